"""Fencing the store enforces, through the Python API, on each store (file, moto S3, and MinIO
when configured): zombie writes are rejected after a takeover, objects carry their writer's
epoch and holder, version-conditional writes refuse a changed object (Conflict) and
fenced_update loses no update, the gate admits by the highest epoch, tokens name their holder,
and the zombie example runs with real SIGSTOP/SIGCONT."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import List, Optional

import pytest

import lease

from conftest import make_url

ROOT = Path(__file__).resolve().parents[2]


def break_lease(lease_bin: str, url: str) -> None:
    """`lease break --allow-two-holders`: the next holder may start at once, while the broken
    one may still believe it holds, which is what these tests need (a zombie) and what fencing
    makes safe. (The default break waits out the holder: test_lease.py.)"""
    subprocess.run(
        [lease_bin, "break", url, "--yes", "--allow-two-holders"],
        check=True,
        capture_output=True,
        timeout=60,
    )


def key_of(url: str) -> str:
    """The lease's key in its store: the path after the bucket (S3, GCS), the account and
    container (Azure), or the directory (file)."""
    head = url.split("?", 1)[0]
    scheme, _, path = head.partition("://")
    if scheme in ("s3", "gs"):
        return path.split("/", 1)[1]
    if scheme in ("az", "azure"):
        return path.split("/", 2)[2]
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
        assert got.lease == l.url and got.holder == l.holder.id
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


def counter(obj: Optional[lease.FencedObject]) -> bytes:
    """One increment of a counter kept as decimal text (absent: 0)."""
    return str(int(obj.data) + 1 if obj is not None else 1).encode()


def test_a_put_conditional_on_an_old_version_conflicts(url: str) -> None:
    # Issue 11 item 6: a holder (epoch n) paused between read and write lands its write while
    # the next holder (n + 1) has read the same value; the newer holder's write, conditional on
    # the version it read, must not land on top of it.
    key = data_key()
    old = lease.acquire(url, ttl=30, label="old")
    old.fenced_put(key, b"5")
    old.release()  # the lease moves on; old's handle still writes, as a paused holder would
    with lease.acquire(url, ttl=30, wait=10, label="new") as new:
        assert new.epoch > old.epoch
        read = lease.fenced_get(url, key=key)
        assert read is not None and read.data == b"5" and read.epoch == old.epoch
        old.fenced_put(key, b"6")  # lands: nobody with a higher epoch has written yet
        with pytest.raises(lease.Conflict) as info:
            new.fenced_put(key, b"6", if_version=read.version)
        e = info.value
        assert type(e) is lease.Conflict and isinstance(e, lease.LeaseError)
        assert e.kind == "conflict" and not e.retryable and e.url is not None
        assert "changed since" in str(e)
        got = lease.fenced_get(url, key=key)
        assert got is not None and got.data == b"6" and got.epoch == old.epoch  # nothing lost
        # An object that exists is not absent.
        with pytest.raises(lease.Conflict, match="created since"):
            new.fenced_put(key, b"x", if_absent=True)
        # Read again, decide again.
        v = new.fenced_put(key, b"7", if_version=got.version)
        again = lease.fenced_get(url, key=key)
        assert again is not None and again.data == b"7" and again.version == v
        assert again.epoch == new.epoch and again.holder == new.holder.id
        # Once a newer epoch has written, the older holder is Fenced, with or without the
        # current version.
        with pytest.raises(lease.Fenced) as fenced:
            old.fenced_put(key, b"8", if_version=v)
        assert fenced.value.epoch == new.epoch
        with pytest.raises(lease.Fenced):
            old.fenced_put(key, b"8")
        with pytest.raises(lease.Fenced):
            old.fenced_update(key, counter)
        # The newer holder's own versions chain: each write returns the next expected one.
        v = new.fenced_put(key, b"9", if_version=v)
        with pytest.raises(lease.Conflict):
            new.fenced_put(key, b"10", if_version=again.version)
        new.fenced_put(key, b"10", if_version=v)
        last = lease.fenced_get(url, key=key)
        assert last is not None and last.data == b"10"


def test_a_plain_put_after_fenced_get_is_not_atomic(url: str) -> None:
    # What if_version is for (and what the README warns about): the same interleaving with a
    # plain put silently loses the other writer's update.
    key = data_key()
    old = lease.acquire(url, ttl=30)
    old.fenced_put(key, b"5")
    old.release()
    with lease.acquire(url, ttl=30, wait=10) as new:
        read = lease.fenced_get(url, key=key)
        assert read is not None
        old.fenced_put(key, counter(read))  # 6
        new.fenced_put(key, counter(read))  # also 6: one increment lost
        got = lease.fenced_get(url, key=key)
        assert got is not None and got.data == b"6"


def test_if_absent_creates_once(url: str) -> None:
    key = data_key()
    with lease.acquire(url, ttl=30) as l:
        v = l.fenced_put(key, b"first", if_absent=True)
        with pytest.raises(lease.Conflict):
            l.fenced_put(key, b"second", if_absent=True)
        got = lease.fenced_get(url, key=key)
        assert got is not None and got.data == b"first" and got.version == v
        # A version of an object that was deleted since conflicts too (file and moto delete
        # conditionally; MinIO cannot: see test_fenced_delete).
        if "conditional_delete" in url or url.startswith("file://"):
            assert l.fenced_delete(key)
            with pytest.raises(lease.Conflict, match="deleted since"):
                l.fenced_put(key, b"third", if_version=v)


def test_fenced_put_arguments(url: str) -> None:
    key = data_key()
    with lease.acquire(url, ttl=30) as l:
        with pytest.raises(TypeError, match="not both"):
            l.fenced_put(key, b"x", if_version="abc", if_absent=True)
        with pytest.raises(TypeError, match="if_version must be a str"):
            l.fenced_put(key, b"x", if_version=5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="if_absent must be a bool"):
            l.fenced_put(key, b"x", if_absent=1)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            l.fenced_put(key, b"x", "abc")  # type: ignore[misc]
        with pytest.raises(lease.InvalidArgument, match="if_version is empty"):
            l.fenced_put(key, b"x", if_version="")
        with pytest.raises(TypeError, match="not both"):
            l.fenced_put_async(  # type: ignore[unused-coroutine]
                key, b"x", if_version="abc", if_absent=True
            )  # raises at the call, not when awaited
        with pytest.raises(TypeError, match="fn must be callable"):
            l.fenced_update(key, b"x")  # type: ignore[arg-type]
        # Nothing was written by any of these.
        assert lease.fenced_get(url, key=key) is None
        # if_absent=False and if_version=None are a plain put.
        l.fenced_put(key, b"plain", if_version=None, if_absent=False)


# What the core says when a conditional fenced write's outcome is unknown.
OUTCOME_UNKNOWN = "the outcome of a fenced write"


def test_fenced_update_from_threads_loses_no_increment(url: str) -> None:
    key = data_key()
    threads, rounds = 4, 5
    done = [0]  # acknowledged updates
    tally = threading.Lock()
    unknown: List[lease.StoreUnavailable] = []
    errors: List[BaseException] = []
    with lease.acquire(url, ttl=30) as l:
        calls = [0]

        def count(obj: Optional[lease.FencedObject]) -> bytes:
            with tally:
                calls[0] += 1
            return counter(obj)

        def work() -> None:
            try:
                for _ in range(rounds):
                    l.fenced_update(key, count)
                    with tally:
                        done[0] += 1
            except lease.StoreUnavailable as e:
                if OUTCOME_UNKNOWN not in str(e):
                    raise
                unknown.append(e)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=120)
        assert not errors, errors
        got = lease.fenced_get(url, key=key)
        assert got is not None
        value = int(got.data)
        # Every acknowledged increment counted once; a write of unknown outcome at most once.
        assert done[0] <= value <= done[0] + len(unknown), (value, done, unknown)
        assert got.epoch == l.epoch and got.holder == l.holder.id
        assert calls[0] >= done[0]
    # With no faults injected, a 412 is a definitive answer: every update lands.
    assert not unknown, unknown
    assert done[0] == threads * rounds and value == threads * rounds


def test_fenced_update_from_processes_loses_no_increment(url: str) -> None:
    # Workers in separate processes take the lease in turn; each update reads and writes
    # conditionally on a version another process's client wrote.
    key = data_key()
    code = (
        "import sys, lease\n"
        "url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        "for _ in range(n):\n"
        "    with lease.acquire(url, ttl=30, wait=60) as l:\n"
        "        l.fenced_update(key, lambda o: str(int(o.data) + 1 if o else 1).encode())\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, url, key, "3"]) for _ in range(3)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    got = lease.fenced_get(url, key=key)
    assert got is not None and got.data == b"9"


def test_fenced_update_gives_up_after_bounded_attempts(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lease._update as update

    monkeypatch.setattr(update, "MAX_ATTEMPTS", 3)
    key = data_key()
    with lease.acquire(url, ttl=30) as l:
        l.fenced_put(key, b"0")
        calls = [0]

        def meddle(obj: Optional[lease.FencedObject]) -> bytes:
            # Someone writes between every read and write: every attempt conflicts.
            calls[0] += 1
            l.fenced_put(key, f"noise {calls[0]}")
            return b"mine"

        with pytest.raises(lease.StoreUnavailable, match="kept changing") as info:
            l.fenced_update(key, meddle)
        assert info.value.retryable and isinstance(info.value.__cause__, lease.Conflict)
        assert calls[0] == 3
        got = lease.fenced_get(url, key=key)
        assert got is not None and got.data == b"noise 3"


def test_fenced_update_passes_fn_errors_through(url: str) -> None:
    key = data_key()
    with lease.acquire(url, ttl=30) as l:

        def refuse(obj: Optional[lease.FencedObject]) -> bytes:
            raise KeyError("no")

        with pytest.raises(KeyError):
            l.fenced_update(key, refuse)
        assert lease.fenced_get(url, key=key) is None


def test_fenced_update_from_asyncio(url: str) -> None:
    key = data_key()

    async def slow_counter(obj: Optional[lease.FencedObject]) -> bytes:
        await asyncio.sleep(0.001)
        return counter(obj)

    unknown: List[BaseException] = []

    async def main() -> None:
        async with lease.acquire_async(url, ttl=30) as l:
            # Plain and async functions, concurrently on one loop.
            results = await asyncio.gather(
                *(l.fenced_update_async(key, slow_counter) for _ in range(4)),
                *(l.fenced_update_async(key, counter) for _ in range(4)),
                return_exceptions=True,
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            unknown.extend(
                e for e in failed
                if isinstance(e, lease.StoreUnavailable) and OUTCOME_UNKNOWN in str(e)
            )
            assert len(failed) == len(unknown), failed
            assert all(isinstance(r, str) for r in results if r not in failed)
            done = len(results) - len(failed)
            got = await lease.fenced_get_async(url, key=key)
            assert got is not None and done <= int(got.data) <= done + len(unknown)
            with pytest.raises(lease.Conflict):
                await l.fenced_put_async(key, b"x", if_absent=True)
            with pytest.raises(lease.Conflict):
                await l.fenced_put_async(key, b"x", if_version="0123")
            v = await l.fenced_put_async(key, b"9", if_version=got.version)
            again = await lease.fenced_get_async(url, key=key)
            assert again is not None and again.version == v and again.data == b"9"

    asyncio.run(main())
    # With no faults injected, a 412 is a definitive answer: every update lands.
    assert not unknown, unknown


def test_fenced_delete(url: str, store: str) -> None:
    # moto's URL says conditional_delete=true (it honours If-Match on DeleteObject), the file
    # store and Azure always have it; MinIO ignores If-Match on DeleteObject and fake-gcs-server
    # ignores ifGenerationMatch on delete (docs/stores.md), so their URLs leave the option off
    # (the default for a custom endpoint) and the library must refuse rather than delete unfenced.
    key = data_key()
    with lease.acquire(url, ttl=30) as l:
        l.fenced_put(key, b"x")
        if store in ("minio", "gcs"):
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
        # (Keys are read from the lease's directory: the record is "/KEY", or its own name.)
        for record in ("/" + key_of(l.url), "./" + key_of(l.url).rsplit("/", 1)[-1]):
            with pytest.raises(lease.InvalidArgument):
                l.fenced_put(record, b"x")


def test_tokens_name_their_holder(url: str) -> None:
    with lease.acquire(url, ttl=30) as l:
        assert l.token == f"{l.url}#{l.epoch}@{l.holder.id}"
        t = lease.parse_token(l.token)
        assert isinstance(t, lease.Token)
        assert t == (l.url, l.epoch, l.holder.id)
        assert (t.lease, t.epoch, t.holder) == (l.url, l.epoch, l.holder.id)
    # A token without a holder (built by hand from LEASE_EPOCH) still parses.
    assert lease.parse_token("s3://b/locks/a#b#7") == lease.Token("s3://b/locks/a#b", 7, None)
    # A queued lock's shared or scoped grant says so, beside the tuple it always was.
    t = lease.parse_token("s3://b/l#7@ab;shared;path=t/u%20v")
    assert t == ("s3://b/l", 7, "ab") and (t.shared, t.scope, t.range) == (True, "t/u v", None)
    assert t == lease.Token("s3://b/l", 7, "ab", shared=True, scope="t/u v")
    assert t != lease.Token("s3://b/l", 7, "ab")
    lease_url, epoch, holder = lease.parse_token("s3://b/l#7@ab;range=0..4096")
    assert lease.parse_token("s3://b/l#7@ab;range=0..4096").range == (0, 4096)
    assert "shared=True" in repr(t) and "shared" not in repr(lease.Token("x", 1, None))
    for bad in ["", "x", "x#", "#7", "x#-1", "x#7@", "x#7@a-b", "x#seven", "x#7@a;readers"]:
        with pytest.raises(lease.InvalidArgument):
            lease.parse_token(bad)
    with pytest.raises(TypeError, match="token must be a str"):
        lease.parse_token(7)  # type: ignore[arg-type]


def test_gate_refuses_another_holder_with_the_same_epoch(url: str) -> None:
    # Issue 11 item 2: two holders must never both be admitted with equal tokens.
    gate = lease.FencingGate()
    with lease.acquire(url, ttl=30) as l:
        gate.admit("orders/1", l)
        t = lease.parse_token(l.token)
        assert t.holder is not None
        impostor = f"{t.lease}#{t.epoch}@{'0' * len(t.holder)}"
        with pytest.raises(lease.Fenced, match="another holder"):
            gate.admit("orders/1", impostor)
        gate.admit("orders/1", l.token)  # the admitted holder still is


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
