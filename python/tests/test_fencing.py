"""Fencing the store enforces, through the Python API, on each store (file and moto S3):
zombie writes are rejected after a takeover, objects carry their writer's epoch, the gate
admits by the highest epoch, and the zombie example runs with real SIGSTOP/SIGCONT."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import lease

from conftest import make_url

ROOT = Path(__file__).resolve().parents[2]


def break_lease(lease_bin: str, url: str) -> None:
    subprocess.run([lease_bin, "break", url, "--yes"], check=True, capture_output=True, timeout=60)


def key_of(url: str) -> str:
    """The lease's key in its store: the path after the bucket (S3) or directory (file)."""
    head = url.split("?", 1)[0]
    if head.startswith("s3://"):
        return head[len("s3://") :].split("/", 1)[1]
    return head.rsplit("/", 1)[1]


def data_key() -> str:
    return f"py-data/{uuid.uuid4().hex[:12]}"


def test_fenced_put_stamps_the_epoch_and_get_reads_it(url: str) -> None:
    key = data_key()
    assert lease.fenced_get(url, key=key) is None
    with lease.acquire(url, ttl=30) as l:
        v1 = l.fenced_put(key, b"one")
        got = lease.fenced_get(url, key=key)
        assert got is not None
        assert got.data == b"one" and got.epoch == l.epoch and got.version == v1
        assert got.lease == l.url
        v2 = l.fenced_put(key, "two \u00e9")  # a str is written as UTF-8
        assert v2 != v1
        got = lease.fenced_get(url, key=key)
        assert got is not None and got.text == "two \u00e9" and got.version == v2


def test_a_zombie_write_after_break_and_takeover_raises_fenced(
    url: str, store: str, lease_bin: str
) -> None:
    key = data_key()
    zombie = lease.acquire(url, ttl=30, label="zombie")
    zombie.fenced_put(key, b"old holder")
    break_lease(lease_bin, url)
    with lease.acquire(url, ttl=30, wait=10, label="newer") as newer:
        assert newer.epoch > zombie.epoch
        newer.fenced_put(key, b"newer holder")
        with pytest.raises(lease.Fenced) as info:
            zombie.fenced_put(key, b"ZOMBIE")
        assert info.value.epoch == newer.epoch
        assert isinstance(info.value, lease.LeaseError) and info.value.kind == "fenced"
        if store == "file":  # conditional deletes: see test_fenced_delete
            with pytest.raises(lease.Fenced):
                zombie.fenced_delete(key)
    got = lease.fenced_get(url, key=key)
    assert got is not None and got.data == b"newer holder" and got.epoch == newer.epoch
    with pytest.raises(lease.LeaseLost):
        zombie.release()


def test_fenced_delete(url: str, store: str) -> None:
    # moto's URL says conditional_delete=true (it honours If-Match on DeleteObject) and the
    # file store always has it; MinIO ignores If-Match on DeleteObject (docs/stores.md), so
    # its URL leaves the option off and the library must refuse rather than delete unfenced.
    key = data_key()
    with lease.acquire(url, ttl=30) as l:
        l.fenced_put(key, b"x")
        if store == "minio":
            assert "conditional_delete" not in url
            with pytest.raises(lease.StoreError, match="no conditional delete"):
                l.fenced_delete(key)
            got = lease.fenced_get(url, key=key)
            assert got is not None and got.data == b"x"
            return
        assert l.fenced_delete(key) is True
        assert lease.fenced_get(url, key=key) is None
        assert l.fenced_delete(key) is False


def test_fenced_delete_is_refused_where_deletes_are_not_conditional(tmp_path: Path) -> None:
    url = make_url("moto", tmp_path, "plain-delete")
    # A custom S3 endpoint is not trusted with If-Match on DeleteObject unless the URL says so
    # (MinIO ignores it): the library refuses rather than delete unfenced (docs/stores.md).
    plain = url.replace("&conditional_delete=true", "")
    assert plain != url
    key = data_key()
    with lease.acquire(plain, ttl=30) as l:
        l.fenced_put(key, b"x")
        with pytest.raises(lease.StoreError, match="no conditional delete"):
            l.fenced_delete(key)
        assert lease.fenced_get(plain, key=key) is not None


def test_fenced_writes_from_asyncio(url: str) -> None:
    key = data_key()

    async def main() -> None:
        async with lease.acquire_async(url, ttl=30) as l:
            version = await l.fenced_put_async(key, b"async")
            got = await lease.fenced_get_async(url, key=key)
            assert got is not None and got.version == version and got.epoch == l.epoch

    asyncio.run(main())


def test_the_lease_record_and_bad_arguments_are_refused(url: str) -> None:
    with lease.acquire(url, ttl=30) as l:
        with pytest.raises(TypeError, match="key must be a str"):
            l.fenced_put(b"key", b"x")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="data must be bytes"):
            l.fenced_put(data_key(), 12)  # type: ignore[arg-type]
        with pytest.raises(lease.InvalidArgument):
            l.fenced_put("", b"x")
        # The lease's own record is not a data object.
        with pytest.raises(lease.LeaseError):
            l.fenced_put(key_of(l.url), b"x")


def test_gate_in_memory_admits_by_the_highest_epoch(url: str) -> None:
    gate = lease.FencingGate()
    with lease.acquire(url, ttl=30) as first:
        gate.admit("orders/42", first)
        gate.admit("orders/42", first.token)  # the same epoch again is fine
        old = first.token
    with lease.acquire(url, ttl=30) as second:
        gate.admit("orders/42", second)
        with pytest.raises(lease.Fenced) as info:
            gate.admit("orders/42", old)
        assert info.value.epoch == second.epoch
        gate.admit("orders/43", old)  # resources are independent
    with pytest.raises(lease.InvalidArgument):
        gate.admit("orders/42", "not a token")
    with pytest.raises(TypeError, match="token must be a str"):
        gate.admit("orders/42", 7)  # type: ignore[arg-type]
    assert "in memory" in repr(gate)


def test_gate_in_a_store_is_shared(tmp_path: Path, url: str) -> None:
    store = f"file://{tmp_path}"
    a = lease.FencingGate(store, prefix="fencing")
    b = lease.FencingGate(store, prefix="fencing")
    with lease.acquire(url, ttl=30) as first:
        old = first.token
        a.admit("db/row-1", first)
    with lease.acquire(url, ttl=30) as second:
        b.admit("db/row-1", second)
    # Gate a never saw the second token itself: the store object tells it.
    with pytest.raises(lease.Fenced):
        a.admit("db/row-1", old)
    with pytest.raises(TypeError, match="prefix is only for"):
        lease.FencingGate(prefix="x")


def test_the_zombie_example_is_rejected_with_real_sigstop(url: str) -> None:
    env = dict(os.environ, PYTHON=sys.executable, ZOMBIE_DATA_KEY=data_key())
    out = subprocess.run(
        [str(ROOT / "examples/zombie/run.sh"), url, "python"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the store rejected the write" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert "written by the newer holder" in last and "ZOMBIE" not in last, out.stdout
