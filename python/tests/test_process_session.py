"""The process's shared session (issue 24; docs/protocol.md §10, "Shared sessions", "The API":
*Per-process default*): ``lease.acquire_on_process_session(url, ...)`` takes a queued lock
through one session per store and ttl of this process, opened on first use, released and
deleted by itself one ttl after its last grant is released, and opened afresh by the next
acquisition. On the file store and on S3 (moto); keys are unique (CI's stores are shared by
every suite), and each test uses a ttl of its own where it counts the session's grants (the
process's session of a store and ttl is shared by every test in this process)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest

import lease

from test_shared_session import POLL, lock_urls, wait_for


@pytest.fixture(params=["file", "moto"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def sid_of(g: lease.SharedGrant) -> str:
    """The session's id in the grant's token, ``URL#EPOCH@SID.N``."""
    return g.token.rsplit("@", 1)[1].split(".", 1)[0]


# --- 1. Two locks, one session.


def test_two_locks_share_the_process_session_and_are_released_one_by_one(
    kind: str, tmp_path: Path
) -> None:
    a_url, b_url = lock_urls(kind, tmp_path, "procsess-two", 2)
    a = lease.acquire_on_process_session(a_url, ttl=7, wait=30, poll=POLL)
    b = lease.acquire_on_process_session(b_url, ttl=7, wait=30, poll=POLL)
    try:
        assert isinstance(a, lease.SharedGrant) and isinstance(b, lease.SharedGrant)
        assert a.held and b.held
        # One session: the same SID in both tokens, and one Session object for both.
        assert sid_of(a) == sid_of(b) == a.session.sid
        assert a.session is b.session
        assert a.token == f"{a.url}#{a.epoch}@{a.id}" and a.id != b.id
        assert a.session.ttl == 7 and a.session.alive
        assert a.session.key == f".lease-sessions/{a.session.sid}"
        # Others see both held.
        for url in (a_url, b_url):
            assert lease.try_acquire(url, ttl=5, queue=True) is None
        # Another ttl is another session.
        (c_url,) = lock_urls(kind, tmp_path, "procsess-other-ttl", 1)
        with lease.acquire_on_process_session(c_url, ttl=8, wait=30, poll=POLL) as c:
            assert c.held and sid_of(c) != sid_of(a)
        a.release()
        assert not a.held and b.held
        b.ensure_held()
        assert lease.try_acquire(b_url, ttl=5, queue=True) is None
        got = lease.try_acquire(a_url, ttl=5, queue=True)
        assert got is not None
        got.release()
    finally:
        a.release()
        b.release()


def test_the_process_sessions_grants_as_context_managers_and_in_asyncio(tmp_path: Path) -> None:
    with lease.acquire_on_process_session(f"file://{tmp_path}/jobs/a", ttl=6) as a:
        with lease.acquire_on_process_session(tmp_path / "jobs" / "b", ttl=6) as b:
            assert a.held and b.held and sid_of(a) == sid_of(b)
            assert a.session.attached >= 2
        assert not b.held and a.held
    assert not a.held

    async def main() -> None:
        grants = await asyncio.gather(*(
            lease.acquire_on_process_session_async(f"file://{tmp_path}/async-{i}", ttl=6)
            for i in range(10)))
        assert all(g.held for g in grants)
        assert len({sid_of(g) for g in grants}) == 1
        async with grants[0] as g0:
            assert g0.held
        assert not grants[0].held and all(g.held for g in grants[1:])
        for g in grants[1:]:
            await g.release_async()

    asyncio.run(main())


# --- 2. A hand-over through the process session.


def test_a_second_acquirer_in_another_thread_waits_and_is_handed_the_lock(
    kind: str, tmp_path: Path
) -> None:
    (url,) = lock_urls(kind, tmp_path, "procsess-handover", 1)
    first = lease.acquire_on_process_session(url, ttl=5, wait=30, poll=POLL)
    got: List[lease.SharedGrant] = []
    errors: List[BaseException] = []

    def second() -> None:
        try:
            got.append(lease.acquire_on_process_session(url, ttl=5, wait=60, poll=POLL))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    t = threading.Thread(target=second)
    t.start()
    wait_for("the second acquirer waiting", lambda: len(lease.status(url).waiting or []) == 1, 30)
    assert not got and first.held
    first.release()
    t.join(60)
    assert not errors, errors
    assert got and got[0].held
    # The same process's session: another entry of one session, a later epoch.
    assert sid_of(got[0]) == sid_of(first) and got[0].id != first.id
    assert got[0].epoch > first.epoch
    got[0].release()


CHILD = r"""
import sys, lease
g = lease.acquire_on_process_session(sys.argv[1], ttl=5, wait=60, poll=0.1)
print("held", g.epoch, g.session.sid, flush=True)
g.release()
print("released", flush=True)
"""


def test_another_process_waits_and_is_handed_the_lock(kind: str, tmp_path: Path) -> None:
    (url,) = lock_urls(kind, tmp_path, "procsess-process", 1)
    first = lease.acquire_on_process_session(url, ttl=5, wait=30, poll=POLL)
    child = subprocess.Popen([sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE,
                             text=True)
    try:
        wait_for("the other process waiting", lambda: len(lease.status(url).waiting or []) == 1, 60)
        assert first.held
        first.release()
        assert child.stdout is not None
        _, epoch, sid = child.stdout.readline().split()
        assert int(epoch) > first.epoch
        assert sid != first.session.sid  # its own process's session
        assert child.stdout.readline().strip() == "released"
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --- 3. Bad input.


def test_bad_acquisitions_on_the_process_session(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/bad"
    with pytest.raises(lease.InvalidArgument, match="per-grant data"):
        lease.acquire_on_process_session(url, data="10.0.0.2")
    with pytest.raises(lease.InvalidArgument, match="always queued"):
        lease.acquire_on_process_session(url, queue=False)
    with pytest.raises(TypeError, match="did you mean wait="):
        lease.acquire_on_process_session(url, wiat=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_lost"):
        lease.acquire_on_process_session(url, on_lost=print)  # type: ignore[arg-type]
    with pytest.raises(lease.InvalidArgument, match="ttl"):
        lease.acquire_on_process_session(url, ttl=0)

    async def bad_async() -> None:
        with pytest.raises(lease.InvalidArgument, match="per-grant data"):
            await lease.acquire_on_process_session_async(url, data="x")

    asyncio.run(bad_async())
    # Nothing was left waiting or held.
    with lease.acquire_on_process_session(url, ttl=5, queue=True, wait=0) as g:
        assert g.held
        with pytest.raises(lease.InvalidArgument, match="closes by itself"):
            g.session.close()
        assert g.held


# --- 4. The idle release: one ttl after the last release, the record is gone.


def test_the_process_session_is_released_one_ttl_after_its_last_grant(tmp_path: Path) -> None:
    # A ttl no other test uses: this session is this test's alone.
    ttl = 1.5
    a = lease.acquire_on_process_session(f"file://{tmp_path}/idle-a", ttl=ttl)
    b = lease.acquire_on_process_session(f"file://{tmp_path}/idle-b", ttl=ttl)
    sid = a.session.sid
    record = tmp_path / ".lease-sessions" / sid
    assert record.exists()
    a.release()
    # Still attached (b): it stays past one ttl (no release decided while attached).
    deadline = time.monotonic() + 2 * ttl
    while time.monotonic() < deadline:
        assert record.exists()
        time.sleep(0.1)
    assert b.session is a.session
    b.release()
    wait_for("the idle session's record deleted", lambda: not record.exists(), 30)
    assert not a.session.alive
    # The next acquisition opens a fresh session.
    with lease.acquire_on_process_session(f"file://{tmp_path}/idle-a", ttl=ttl) as c:
        assert c.held and c.session.sid != sid
        assert (tmp_path / ".lease-sessions" / c.session.sid).exists()


# --- 5. Fork.


def test_a_forked_childs_acquisition_opens_its_own_session(tmp_path: Path) -> None:
    from test_processes import _run_in_fork

    g = lease.acquire_on_process_session(f"file://{tmp_path}/fork-a", ttl=5)
    parent_sid = g.session.sid

    def child() -> List[str]:
        out = [f"inherited: held={g.held} lost={g.lost_reason}"]
        try:
            g.ensure_held()
        except lease.LeaseLost as e:
            out.append(f"ensure_held: LeaseLost: {e}")
        g.release()  # touches nothing of the parent's
        with lease.acquire_on_process_session(f"file://{tmp_path}/fork-b", ttl=5) as c:
            out.append(f"own: held={c.held} sid={c.session.sid}")
        return out

    lines = _run_in_fork(child)
    assert lines[0].startswith("inherited: held=False lost=acquired by process"), lines
    assert lines[1].startswith("ensure_held: LeaseLost:") and "os.fork()" in lines[1], lines
    assert lines[2].startswith("own: held=True sid="), lines
    assert lines[2].split("sid=")[1] != parent_sid
    # The parent's grant and session are untouched.
    assert g.held and g.session.alive and g.session.sid == parent_sid
    assert lease.try_acquire(f"file://{tmp_path}/fork-a", ttl=5, queue=True) is None
    g.release()


# --- Cancellation.


def test_a_cancelled_acquisition_leaves_the_queue_and_the_process_session(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}/cancel"
    holder = lease.acquire(url, ttl=5, queue=True)
    ttl = 4.7  # this test's own session

    async def main() -> Any:
        task = asyncio.ensure_future(
            lease.acquire_on_process_session_async(url, ttl=ttl, poll=0.1))
        deadline = time.monotonic() + 15
        while not lease.status(url).waiting:
            assert time.monotonic() < deadline, "the request never waited"
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while lease.status(url).waiting:
            assert time.monotonic() < deadline, "the cancelled request stayed in the queue"
            await asyncio.sleep(0.05)

    asyncio.run(main())
    holder.release()
    assert lease.status(url).state in ("free", "released")  # nobody was handed it
    # Nothing is attached to this ttl's session: its record goes one ttl later.
    sessions = tmp_path / ".lease-sessions"
    wait_for("the cancelled request's session released",
             lambda: not sessions.exists() or not os.listdir(sessions), 30)


# --- Interpreter exit.

EXITING = r"""
import sys, lease
g = lease.acquire_on_process_session(sys.argv[1], ttl=30)
print("held", g.session.sid, flush=True)
"""


def test_interpreter_exit_closes_the_process_session_and_frees_its_locks(tmp_path: Path) -> None:
    # Exit with a grant held: its lock is free at once (not after the ttl), the record gone.
    url = f"file://{tmp_path}/exiting"
    out = subprocess.run([sys.executable, "-c", EXITING, url], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    sid = out.stdout.split()[1]
    assert not (tmp_path / ".lease-sessions" / sid).exists()
    got = lease.try_acquire(url, ttl=5, queue=True)
    assert got is not None, "the exited process's grant was not released"
    got.release()
