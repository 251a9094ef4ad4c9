"""Shared sessions (issue 24; docs/protocol.md §10, "Shared sessions: one heartbeat for many
grants"): many queued-lock grants held through one session, on the file store and on S3
(moto); a holder killed with SIGKILL hands its locks over; the session's record deleted loses
every grant; bad input raises typed errors."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import hashlib
import hmac
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest

import lease

from conftest import _missing, s3_url, make_url

# A waiter polls the lock this often (moto has no kernel wake-up).
POLL = 0.1


@pytest.fixture(params=["file", "moto"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def lock_urls(kind: str, tmp_path: Path, name: str, n: int) -> List[str]:
    """``n`` fresh lock URLs in one store: one directory (file), or one bucket (moto)."""
    base = make_url(kind, tmp_path, name)
    if kind == "file":
        return [f"{base}-{i}" for i in range(n)]
    bucket = os.environ.get("LEASE_TEST_S3_MOTO")
    if not bucket:
        _missing("LEASE_TEST_S3_MOTO")
    assert bucket is not None
    tail = base.split("/locks/", 1)[1].split("?", 1)[0]
    return [s3_url(bucket, f"locks/{tail}/{i}") for i in range(n)]


def wait_for(what: str, check: Any, timeout: float) -> None:
    """Poll ``check()`` until true; a bound on the wait, not a timed assertion."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout} s")
        time.sleep(0.05)


# --- 1. Many grants, one session.


def test_many_grants_on_one_session_released_one_by_one(kind: str, tmp_path: Path) -> None:
    n = 200 if kind == "file" else 50
    urls = lock_urls(kind, tmp_path, "many", n)
    with lease.open_session(urls[0], ttl=10, label="py-many") as session:
        assert session.alive and session.attached == 0
        # Eight threads at once: the GIL is released while each waits, and attachments that
        # wait together go into one session write.
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            grants = list(pool.map(lambda u: session.acquire(u, wait=60, poll=POLL), urls))
        assert all(g.held for g in grants)
        assert session.attached == n
        assert len({g.id for g in grants}) == n
        assert all(g.id.startswith(session.sid + ".") for g in grants)
        assert all(g.token == f"{g.url}#{g.epoch}@{g.id}" for g in grants)
        assert all(g.epoch == g.grant.token for g in grants)
        assert all(g.grant.mode == "exclusive" for g in grants)
        # Others see the locks held: a plain queued request cannot be granted.
        assert lease.try_acquire(urls[-1], ttl=5, queue=True) is None

        half = n // 2
        for g in grants[:half]:
            g.release()
            assert not g.held
            g.release()  # idempotent
        rest = grants[half:]
        assert all(g.held for g in rest), [g.lost_reason for g in rest if not g.held]
        for g in rest:
            g.ensure_held()
        with pytest.raises(lease.LeaseLost, match="released"):
            grants[0].ensure_held()
        # A released lock is free for others; a held one is not.
        other = lease.try_acquire(urls[0], ttl=5, queue=True)
        assert other is not None
        other.release()
        assert lease.try_acquire(urls[-1], ttl=5, queue=True) is None
        assert session.alive
    # Closing released the rest.
    assert session.closed and not session.alive
    assert not any(g.held for g in rest)
    free = lease.try_acquire(urls[-1], ttl=5, queue=True)
    assert free is not None
    free.release()


def test_grants_as_context_managers_by_key_and_async(tmp_path: Path) -> None:
    # The store's own directory opens a session on it; keys name locks in it.
    with lease.open_session(f"file://{tmp_path}", ttl=5) as session:
        assert session.store.startswith("file://")
        with session.acquire("jobs/a") as a, session.acquire(tmp_path / "b") as b:
            assert a.url == f"file://{tmp_path}/jobs/a"
            assert a.held and b.held and session.attached == 2
        assert not a.held and not b.held

    async def main() -> None:
        async with lease.open_session_async(tmp_path / "c", ttl=5) as s:
            grants = await asyncio.gather(*(s.acquire_async(f"async-{i}") for i in range(20)))
            assert all(g.held for g in grants) and s.attached == 20
            async with grants[0] as g0:
                assert g0.held
            assert not grants[0].held
            await grants[1].release_async()
            assert all(g.held for g in grants[2:])
        assert s.closed

    asyncio.run(main())


def test_a_shared_grants_token_names_its_entry_and_a_gate_fences_it(tmp_path: Path) -> None:
    # Two grants of one lock, one after the other, through one session: two holders to a
    # gate, the later one fencing the earlier.
    gate = lease.FencingGate()
    with lease.open_session(f"file://{tmp_path}", ttl=5) as session:
        first = session.acquire("jobs/a")
        old = first.token
        assert old == f"file://{tmp_path}/jobs/a#{first.epoch}@{first.id}"
        gate.admit("orders/1", old)
        first.release()
        with session.acquire("jobs/a") as second:
            assert second.epoch > first.epoch and second.id != first.id
            gate.admit("orders/1", second.token)
        with pytest.raises(lease.Fenced):
            gate.admit("orders/1", old)


def test_a_waiters_yield_request_reaches_the_shared_grant_it_names(tmp_path: Path) -> None:
    with lease.open_session(f"file://{tmp_path}", ttl=3) as session:
        a = session.acquire("jobs/a")
        b = session.acquire("jobs/b")
        assert a.yield_requested is None
        got: List[Any] = []
        waiter = threading.Thread(target=lambda: got.append(lease.acquire(
            f"file://{tmp_path}/jobs/a", ttl=3, wait=30, poll=POLL,
            ask_yield=True, yield_reason="deploy")))
        waiter.start()
        wait_for("the yield request", lambda: a.yield_requested is not None, 15)
        told = a.yield_requested
        assert told is not None and told.reason == "deploy"
        assert a.held and not got, "a request is not a loss"
        assert b.yield_requested is None
        a.release()
        waiter.join(30)
        assert got and got[0].held
        got[0].release()


def delete_session_record(kind: str, lock_url: str, session_key: str) -> None:
    """Delete a session's record (a holder cut off from the store looks the same to others)."""
    if kind == "file":
        os.unlink(Path(lock_url[len("file://"):]).parent / session_key)
        return
    # moto, path-style: s3://BUCKET?endpoint=E&region=R&... -> DELETE E/BUCKET/KEY, signed
    # (AWS Signature Version 4) with the test credentials the library uses.
    base = os.environ["LEASE_TEST_S3_MOTO"]
    bucket = base[len("s3://"):].split("?", 1)[0].strip("/")
    query = urllib.parse.parse_qs(base.split("?", 1)[1])
    endpoint = query["endpoint"][0].rstrip("/")
    region = query.get("region", ["us-east-1"])[0]
    host = urllib.parse.urlsplit(endpoint).netloc
    now = datetime.datetime.now(datetime.timezone.utc)
    amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    empty = hashlib.sha256(b"").hexdigest()
    path = f"/{bucket}/{session_key}"
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = (
        f"DELETE\n{path}\n\nhost:{host}\nx-amz-content-sha256:{empty}\nx-amz-date:{amz}\n\n"
        f"{signed}\n{empty}"
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    k = ("AWS4" + os.environ["AWS_SECRET_ACCESS_KEY"]).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = (
        f"AWS4-HMAC-SHA256 Credential={os.environ['AWS_ACCESS_KEY_ID']}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    req = urllib.request.Request(
        endpoint + path,
        method="DELETE",
        headers={"x-amz-date": amz, "x-amz-content-sha256": empty, "Authorization": auth},
    )
    with urllib.request.urlopen(req, timeout=30) as res:
        assert res.status in (200, 204), res.status


def test_a_shared_grants_fenced_writes_and_its_stale_write_after_a_takeover_is_fenced(
    kind: str, tmp_path: Path
) -> None:
    # As a Lease's: its writes carry its token; once its holder is cut off (the session's
    # record deleted) and another takes the lock, its write is refused.
    (url,) = lock_urls(kind, tmp_path, "fence", 1)
    session = lease.open_session(url, ttl=3)
    try:
        g = session.acquire(url, wait=30, poll=POLL)
        v1 = g.fenced_put("data", b"one")
        got = lease.fenced_get(url, key="data")
        assert got is not None and got.data == b"one" and got.version == v1
        assert got.epoch == g.epoch and got.holder == g.id
        g.fenced_update("data", lambda old: (old.data if old else b"") + b"+1")
        read = g.fenced_read("data")
        assert read is not None and read.data == b"one+1"
        with pytest.raises(lease.Conflict):
            g.fenced_put("data", b"x", if_absent=True)

        async def in_asyncio() -> None:
            await g.fenced_put_async("async", "a")
            await g.fenced_update_async("async", lambda old: (old.data if old else b"") + b"b")
            obj = await g.fenced_read_async("async")
            assert obj is not None and obj.data == b"ab"
            # Conditional deletes: the file store, and moto (its URL says so).
            assert await g.fenced_delete_async("async")
            assert not g.fenced_delete("async")

        asyncio.run(in_asyncio())

        # Cut off: the session's record deleted; the grant is lost, another takes the lock.
        delete_session_record(kind, url, session.key)
        wait_for("the grant lost", lambda: g.lost_reason is not None, 15)
        with lease.acquire(url, ttl=5, queue=True, wait=30, poll=POLL) as nxt:
            assert nxt.epoch > g.epoch
            nxt.fenced_put("data", b"two")
            with pytest.raises(lease.Fenced) as info:
                g.fenced_put("data", b"stale")
            assert info.value.epoch == nxt.epoch
            with pytest.raises(lease.Fenced):
                g.fenced_update("data", lambda old: b"stale")
            got = lease.fenced_get(url, key="data")
            assert got is not None and got.data == b"two"
        with pytest.raises(lease.LeaseLost):
            g.release()
    finally:
        session.close()


def test_a_forked_child_leaves_its_parents_session_and_grants_alone(tmp_path: Path) -> None:
    # As a Lease across fork (test_processes.py): the child holds none of its parent's, says
    # so, touches nothing of it on release, close or exit, and can open a session of its own.
    from test_processes import _run_in_fork

    with lease.open_session(f"file://{tmp_path}", ttl=5) as session:
        g = session.acquire("jobs/a")

        def child() -> List[str]:
            out = [f"alive={session.alive} held={g.held} lost={g.lost_reason}"]
            try:
                session.acquire("jobs/b")
            except lease.InvalidArgument as e:
                out.append(f"acquire: InvalidArgument: {e}")
            try:
                g.ensure_held()
            except lease.LeaseLost as e:
                out.append(f"ensure_held: LeaseLost: {e}")
            g.release()
            session.close()
            with lease.open_session(f"file://{tmp_path}", ttl=5) as mine:
                with mine.acquire("jobs/c") as c:
                    out.append(f"own session: held={c.held}")
            return out

        lines = _run_in_fork(child)
        assert lines[0].startswith("alive=False held=False lost=acquired by process"), lines
        assert lines[1].startswith("acquire: InvalidArgument:") and "os.fork()" in lines[1]
        assert lines[2].startswith("ensure_held: LeaseLost:") and "os.fork()" in lines[2]
        assert lines[3] == "own session: held=True"
        # The child's release, close and exit touched nothing of the parent's.
        assert session.alive and session.attached == 1
        g.ensure_held()
        time.sleep(0.5)
        assert g.held
        assert lease.try_acquire(f"file://{tmp_path}/jobs/a", ttl=5, queue=True) is None
        g.release()


def test_a_cancelled_acquire_async_leaves_the_queue_and_the_session(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/jobs/a"
    holder = lease.acquire(url, ttl=5, queue=True, label="holder")

    async def main() -> None:
        async with lease.open_session_async(f"file://{tmp_path}", ttl=5) as s:
            task = asyncio.ensure_future(s.acquire_async("jobs/a", poll=0.1))
            deadline = time.monotonic() + 15
            while not lease.status(url).waiting:
                assert time.monotonic() < deadline, "the session's request never waited"
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # It left the queue and the session (before: it waited on, to be granted later).
            while lease.status(url).waiting or s.attached:
                assert time.monotonic() < deadline, "the cancelled request stayed"
                await asyncio.sleep(0.05)

    asyncio.run(main())
    holder.release()
    assert lease.status(url).state in ("free", "released")  # nobody was handed it


def test_a_shared_grant_beside_a_plain_reader(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/rw"
    with lease.open_session(url, ttl=5) as session:
        g = session.acquire(url, shared=True)
        assert g.grant.mode == "shared"
        r = lease.acquire(url, ttl=5, shared=True, wait=10)
        assert r.held and g.held
        r.release()
        g.release()


# --- 2. Kill -9 of the holder hands its locks over.

CHILD = r"""
import sys, time, lease
urls = sys.argv[1:]
session = lease.open_session(urls[0], ttl=3, label="py-killed")
grants = [session.acquire(u, wait=60, poll=0.1) for u in urls]
assert all(g.held for g in grants)
for i, g in enumerate(grants):
    print("held", i, g.epoch, flush=True)
print("all held", flush=True)
time.sleep(600)
"""


def test_kill_9_of_the_holder_hands_its_locks_over(kind: str, tmp_path: Path) -> None:
    n = 50
    urls = lock_urls(kind, tmp_path, "killed", n)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *urls], stdout=subprocess.PIPE, text=True
    )
    epochs: Dict[int, int] = {}
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("all held"):
                break
            _, i, epoch = line.split()
            epochs[int(i)] = int(epoch)
        assert len(epochs) == n, f"the child held {len(epochs)} of {n}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # A sample of five, waited for at once (each waiter judges the dead session itself:
    # absent renewals for its ttl plus grace).
    sample = list(range(0, n, n // 5))[:5]
    got: Dict[int, lease.Lease] = {}
    errors: List[BaseException] = []

    def take(i: int) -> None:
        try:
            got[i] = lease.acquire(urls[i], ttl=3, queue=True, wait=30, poll=POLL)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    threads = [threading.Thread(target=take, args=(i,)) for i in sample]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in sample:
        assert got[i].epoch > epochs[i]
        got[i].release()


# --- 3. The session's record deleted: every grant reports its loss.


def test_deleting_the_session_record_loses_every_grant(tmp_path: Path) -> None:
    urls = lock_urls("file", tmp_path, "deleted", 20)
    session = lease.open_session(urls[0], ttl=3)
    grants = [session.acquire(u, wait=30) for u in urls]
    assert all(g.held for g in grants)
    record = tmp_path / session.key
    assert record.is_file(), list(tmp_path.rglob("*"))
    record.unlink()
    wait_for("every grant lost", lambda: all(g.lost_reason is not None for g in grants), 15)
    for g in grants:
        assert not g.held
        assert g.lost_kind == "session_deleted", g.lost_reason
        with pytest.raises(lease.LeaseLost, match="session's record was deleted") as e:
            g.ensure_held()
        assert e.value.kind == "lost" and e.value.url == g.url
    assert not session.alive and session.lost_reason is not None
    # A lost session takes no more grants: the core's LeaseLost.
    with pytest.raises(lease.LeaseLost, match="not held"):
        session.acquire(urls[0], wait=1)
    # Releasing a lost grant reports the loss (work under it may have overlapped).
    with pytest.raises(lease.LeaseLost):
        grants[0].release()
    with pytest.raises(lease.LeaseLost):
        with grants[1]:
            pass
    session.close()


# --- 4. Bad input.


@pytest.mark.parametrize(
    "kw,error,match",
    [
        ({"ttl": -1}, lease.InvalidArgument, "negative"),
        ({"ttl": 0}, lease.InvalidArgument, "ttl"),
        ({"ttl": 36000}, lease.InvalidArgument, "milliseconds"),
        ({"ttl": "1000h"}, lease.InvalidArgument, "ttl"),
        ({"ttl": "30"}, lease.InvalidArgument, "unit"),
        ({"ttl": [1]}, TypeError, "ttl"),
        ({"prefix": "team-a"}, lease.InvalidArgument, "prefix"),
        ({"prefix": 3}, TypeError, "prefix"),
    ],
)
def test_bad_session_options(
    tmp_path: Path, kw: Dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        lease.open_session(f"file://{tmp_path}/x", **kw)


def test_bad_acquisitions_through_a_session(tmp_path: Path) -> None:
    session = lease.open_session(f"file://{tmp_path}/x", ttl=5)
    # Another bucket, another directory, another kind of store.
    for other in (
        "s3://another-bucket/locks/x?endpoint=http://127.0.0.1:1&region=us-east-1",
        f"file://{tmp_path}/sub/x",
        "memory://elsewhere/x",
    ):
        with pytest.raises(lease.InvalidArgument, match="not in this session's store"):
            session.acquire(other)
    with pytest.raises(lease.InvalidArgument, match="the session's ttl applies"):
        session.acquire("x", ttl=5)  # type: ignore[call-arg]
    with pytest.raises(lease.InvalidArgument, match="per-grant data"):
        session.acquire("x", data="10.0.0.2")
    with pytest.raises(TypeError, match="did you mean wait="):
        session.acquire("x", wiat=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="always queued"):
        session.acquire("x", queue=True)  # type: ignore[call-arg]
    with pytest.raises(lease.InvalidArgument):
        session.acquire("x", permits=2, scope="a", range=(0, 1))
    assert session.attached == 0 and session.alive
    session.close()
    session.close()  # idempotent
    with pytest.raises(lease.InvalidArgument, match="closed"):
        session.acquire("x")

    async def closed_async() -> None:
        with pytest.raises(lease.InvalidArgument, match="closed"):
            await session.acquire_async("x")

    asyncio.run(closed_async())


def test_a_session_on_another_bucket_than_the_lock(tmp_path: Path) -> None:
    base = os.environ.get("LEASE_TEST_S3_MOTO")
    if not base:
        _missing("LEASE_TEST_S3_MOTO")
    assert base is not None
    session = lease.open_session(base, ttl=5)
    try:
        head, _, query = base.partition("?")
        other = f"s3://another-bucket-x/locks/x?{query}"
        with pytest.raises(lease.InvalidArgument, match="not in this session's store"):
            session.acquire(other)
        g = session.acquire(s3_url(base, f"locks/py-session-{os.getpid()}-{time.time_ns()}"))
        assert g.held
        g.release()
    finally:
        session.close()
