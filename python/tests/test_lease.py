"""The protocol at the API level, on each store: what core/tests/in_process/protocol.rs checks in
simulated time, checked here through the Python API against real files and a real S3 server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any, List, Optional

import pytest

import lease

from conftest import in_another_thread

# Timed assertions carry a generous margin: these bound behaviour, they do not measure it.
MARGIN = 3.0


def break_lease(lease_bin: str, url: str) -> None:
    subprocess.run([lease_bin, "break", url, "--yes"], check=True, capture_output=True, timeout=60)


def test_with_releases_on_normal_exit(url: str) -> None:
    with lease.acquire(url, ttl=30, wait=10, label="gc-1") as l:
        assert isinstance(l, lease.Lease)
        assert l.held and l.epoch >= 1
        s = lease.status(url)
        assert s.state == "held"
        assert s.epoch == l.epoch
        assert s.holder is not None and s.holder.id == l.holder.id
        assert s.holder.label == "gc-1" and s.holder.pid == os.getpid()
        assert s.holder.client is not None and "(python)" in s.holder.client
        assert l.token == f"{l.url}#{l.epoch}@{l.holder.id}"
    assert not l.held and l.remaining() == 0.0
    s = lease.status(url)
    assert s.state == "released" and s.epoch == l.epoch
    with pytest.raises(lease.LeaseLost):
        l.ensure_held()
    assert not l.lost.is_set()  # released, not lost


def test_with_releases_when_the_block_raises(url: str) -> None:
    with pytest.raises(ValueError, match="boom"):
        with lease.acquire(url, wait=10) as l:
            raise ValueError("boom")
    assert not l.held
    assert lease.status(url).state == "released"
    # Taken again at once, with the next epoch.
    with lease.acquire(url, wait=0) as again:
        assert again.epoch == l.epoch + 1


def test_try_acquire_returns_none_while_held(url: str) -> None:
    first = lease.try_acquire(url, ttl=30, label="first")
    assert first is not None
    try:
        assert lease.try_acquire(url, ttl=30) is None
    finally:
        first.release()
    second = lease.try_acquire(url)
    assert second is not None
    assert second.epoch == first.epoch + 1
    second.release()
    second.release()  # idempotent


def test_wait_zero_raises_held_with_the_holder(url: str) -> None:
    with lease.acquire(url, label="owner") as l:
        with pytest.raises(lease.LeaseHeld) as info:
            lease.acquire(url, wait=0)
        e = info.value
        assert e.url == l.url and e.kind == "held"
        assert e.epoch == l.epoch
        assert e.holder is not None and e.holder.id == l.holder.id and e.holder.label == "owner"
        assert "owner" in str(e)


def test_timeout_raises_lease_timeout_in_about_the_requested_time(url: str) -> None:
    with lease.acquire(url, ttl=30):
        t0 = time.monotonic()
        with pytest.raises(lease.LeaseTimeout) as info:
            in_another_thread(lambda: lease.acquire(url, wait=0.5))
        took = time.monotonic() - t0
    assert isinstance(info.value, TimeoutError)
    assert 0.5 <= took < 0.5 + MARGIN, took
    assert info.value.holder is not None


def test_a_waiter_gets_the_lease_when_released(url: str) -> None:
    # Held by another thread: this one may wait for it.
    holder = in_another_thread(lambda: lease.acquire(url, ttl=30))
    threading.Timer(0.3, holder.release).start()
    with lease.acquire(url, wait=30) as l:
        assert l.epoch == holder.epoch + 1
        assert not holder.held


def test_epochs_strictly_increase(url: str) -> None:
    epochs = []
    for _ in range(5):
        with lease.acquire(url, wait=10) as l:
            epochs.append(l.epoch)
    assert epochs == sorted(set(epochs)) and len(epochs) == 5


def test_renewal_keeps_the_lease_held(url: str) -> None:
    with lease.acquire(url, ttl=1.5) as l:
        time.sleep(3.2)  # more than two ttls: only renewals keep it
        assert l.held
        left = l.ensure_held()
        assert 0 < left <= 1.5
        assert lease.status(url).epoch == l.epoch
        assert lease.try_acquire(url) is None


def test_remaining_and_ensure_held_min(url: str) -> None:
    with lease.acquire(url, ttl=10) as l:
        assert 0 < l.remaining() <= 10
        assert l.ensure_held(min_remaining=1) > 1
        with pytest.raises(lease.LeaseLost, match="less than"):
            l.ensure_held(min_remaining=11)
        assert l.renew() > 9
        assert l.ttl == 10


def test_lost_after_break(url: str, lease_bin: str) -> None:
    seen: List[lease.LeaseLost] = []
    called = threading.Event()

    def on_lost(err: lease.LeaseLost) -> None:
        seen.append(err)
        called.set()

    l = lease.acquire(url, ttl=1.5, on_lost=on_lost)
    event = l.lost
    assert not event.is_set()
    break_lease(lease_bin, url)
    # The holder learns at its next renewal (every ttl/3).
    assert event.wait(timeout=1.5 + MARGIN)
    assert called.wait(timeout=MARGIN)
    assert isinstance(seen[0], lease.LeaseLost)
    assert seen[0].url == l.url and seen[0].epoch == l.epoch
    assert seen[0].holder is not None and seen[0].holder.label is not None
    assert seen[0].holder.label.startswith("lease break")
    assert not l.held and l.remaining() == 0.0
    assert l.lost_reason is not None and "broken" in l.lost_reason
    with pytest.raises(lease.LeaseLost, match="lost"):
        l.ensure_held()
    # The lease was lost during the block and the block did not raise: leaving it says so.
    with pytest.raises(lease.LeaseLost):
        with l:
            pass
    with pytest.raises(lease.LeaseLost):
        l.release()
    assert len(seen) == 1  # called once


def test_lost_during_a_block_that_raises_keeps_the_blocks_exception(
    url: str, lease_bin: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lease")
    with pytest.raises(KeyError) as info:
        with lease.acquire(url, ttl=1.5) as l:
            break_lease(lease_bin, url)
            assert l.lost.wait(timeout=1.5 + MARGIN)
            raise KeyError("mine")
    if sys.version_info >= (3, 11):
        assert any("was lost" in n for n in getattr(info.value, "__notes__", []))
    assert any("was lost" in r.getMessage() for r in caplog.records)


def test_on_lost_exceptions_are_logged(
    url: str, lease_bin: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="lease")

    def bad(err: lease.LeaseLost) -> None:
        raise RuntimeError("callback bug")

    l = lease.acquire(url, ttl=1.5, on_lost=bad)
    l.on_lost(bad)
    break_lease(lease_bin, url)
    assert l.lost.wait(timeout=1.5 + MARGIN)
    deadline = time.monotonic() + MARGIN
    while time.monotonic() < deadline and len(caplog.records) < 2:
        time.sleep(0.02)
    recs = [r for r in caplog.records if "on_lost callback" in r.getMessage()]
    assert len(recs) == 2
    assert recs[0].exc_info is not None and "callback bug" in str(recs[0].exc_info[1])
    # A callback added after the loss is called too.
    late = threading.Event()
    l.on_lost(lambda e: late.set())
    assert late.wait(MARGIN)


def test_crashed_holder_is_replaced_after_its_ttl(url: str) -> None:
    code = (
        "import os, signal, sys, lease\n"
        "l = lease.acquire(sys.argv[1], ttl=1)\n"
        "print(l.epoch, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == -9, out.stderr
    dead_epoch = int(out.stdout.split()[0])
    assert lease.status(url).state in ("held", "expired")
    t0 = time.monotonic()
    with lease.acquire(url, ttl=5, wait=30) as l:
        took = time.monotonic() - t0
        assert l.epoch > dead_epoch
    # ttl + grace (1 s) + clock resolution (1 s on S3) + polling, with margin.
    assert took < 1 + 1 + 1 + MARGIN, took


def test_break_waits_out_a_holder_that_cannot_hear_of_it(url: str, lease_bin: str) -> None:
    # Issue 11 item 3: the holder is paused (SIGSTOP) and learns nothing of the break, so
    # nobody may take the lease before its deadline has surely passed.
    code = (
        "import os, signal, sys, lease\n"
        "l = lease.acquire(sys.argv[1], ttl=2, label='victim')\n"
        "print(l.epoch, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        victim_epoch = int(child.stdout.readline())
        t0 = time.monotonic()
        break_lease(lease_bin, url)
        s = lease.status(url)
        assert s.state == "broken" and not s.held, s
        assert s.epoch is not None and s.epoch > victim_epoch
        assert s.holder is not None and s.holder.label is not None
        assert s.holder.label.startswith("lease break")
        assert s.expires_in is not None and s.expires_in > 0
        assert s.to_json()["state"] == "broken"
        assert lease.try_acquire(url) is None
        with lease.acquire(url, ttl=5, wait=30) as l:
            took = time.monotonic() - t0
            assert l.epoch > s.epoch
        # Not before the broken holder's ttl (2 s) could have run out; within ttl + grace
        # (1 s) + resolution (1 s on S3) + polling, with margin.
        assert 2.0 <= took < 2 + 1 + 1 + MARGIN, took
    finally:
        child.kill()
        child.wait(timeout=60)


def test_a_broken_holder_that_releases_lets_the_next_one_in_at_once(
    url: str, lease_bin: str
) -> None:
    # The broken holder acknowledges the break by releasing: nobody waits it out.
    l = lease.acquire(url, ttl=30)
    break_lease(lease_bin, url)
    assert lease.status(url).state == "broken"
    with pytest.raises(lease.LeaseLost, match="broken"):
        l.release()
    t0 = time.monotonic()
    with lease.acquire(url, ttl=30, wait=10) as after:
        assert after.epoch > l.epoch
    assert time.monotonic() - t0 < MARGIN


def test_status_of_a_free_lease_and_the_json_shape(url: str) -> None:
    s = lease.status(url)
    assert s.state == "free" and s.epoch is None and s.holder is None and not s.held
    with lease.acquire(url, ttl=20, label="shape", data="addr:1") as l:
        s = lease.status(url)
        assert s.data == "addr:1"
        assert s.ttl == 20.0
        # The time until a waiter may take over: ttl + grace (2 s at this ttl) + the clock's
        # resolution (1 s on S3) after the last write, which was just now.
        assert s.expires_in is not None and 20 < s.expires_in <= 20 + 2 + 1
        j = s.to_json()
        assert set(j) == {
            "url", "state", "epoch", "holder", "ttl_ms", "expires_in_ms", "data",
            "acquired_at", "renewed_at", "detail", "permits", "holders", "departing", "waiting",
            "history", "preempted",
        }
        # A plain lease: the queued lock's keys are null.
        assert j["permits"] is None and j["holders"] is None and j["waiting"] is None
        assert j["departing"] is None
        assert set(j["holder"]) == {"id", "label", "host", "pid", "user", "client"}
        assert j["ttl_ms"] == 20000 and j["epoch"] == l.epoch
        json.dumps(j)


def test_status_matches_the_cli(url: str, lease_bin: str) -> None:
    with lease.acquire(url, label="cli") as l:
        out = subprocess.run(
            [lease_bin, "status", url, "--json"], capture_output=True, text=True, timeout=60
        )
        cli = json.loads(out.stdout)
        mine = lease.status(url).to_json()
        for k in ("url", "state", "epoch", "holder", "ttl_ms", "data", "acquired_at"):
            assert cli[k] == mine[k], k
        assert cli["holder"]["id"] == l.holder.id


def test_watch_reports_changes(url: str) -> None:
    seen: List[lease.Status] = []
    done = threading.Event()

    def watcher() -> None:
        for s in lease.watch(url, poll=0.05):
            # The record a first take creates, released and acquired by nobody, before its
            # take (docs/protocol.md §5): seen only when a poll falls between the two.
            if s.state == "released" and s.acquired_at is None:
                continue
            seen.append(s)
            if len(seen) == 3:
                break
        done.set()

    t = threading.Thread(target=watcher)
    t.start()
    deadline = time.monotonic() + MARGIN
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    with lease.acquire(url) as l:
        time.sleep(0.5)
    assert done.wait(timeout=10)
    t.join()
    assert [s.state for s in seen] == ["free", "held", "released"]
    assert seen[1].epoch == l.epoch and seen[2].epoch == l.epoch


def test_election(url: str) -> None:
    a = lease.Election(url, ttl=15, label="node-a", data="a:1")
    b = lease.Election(url, ttl=15, label="node-b", data="b:1")
    assert a.leader() is None and not a.is_leader
    la = a.campaign()
    assert a.is_leader and a.lease is not None and a.lease.epoch == la.epoch
    assert a.campaign().epoch == la.epoch  # already leading
    leader = b.leader()
    assert leader is not None
    assert leader.holder.label == "node-a" and leader.epoch == la.epoch and leader.data == "a:1"
    changes: List[Optional[lease.Leader]] = []
    observer = b.observe(poll=0.05)
    changes.append(next(iter(observer)))
    got: List[lease.Lease] = []
    t = threading.Thread(target=lambda: got.append(b.campaign()))
    t.start()
    time.sleep(0.3)
    assert not got  # b waits while a leads
    a.resign()
    t.join(timeout=10)
    assert got and got[0].epoch == la.epoch + 1
    assert not a.is_leader and b.is_leader
    changes.append(next(observer))
    leader = a.leader()
    assert leader is not None and leader.holder.label == "node-b"
    assert [c.holder.label if c else None for c in changes] == ["node-a", "node-b"]
    b.resign()
    assert next(observer) is None
    a.resign()  # not leading: nothing to do


def test_a_path_object_is_a_lease_url(tmp_path: Any) -> None:
    with lease.acquire(tmp_path / "by-path") as l:
        assert l.url == f"file://{tmp_path}/by-path"


def test_memory_store_works_in_process() -> None:
    url = f"memory://pytest/m-{os.getpid()}"
    with lease.acquire(url) as l:
        assert lease.try_acquire(url) is None
    assert lease.status(url).state == "released"
    assert l.epoch >= 1


def test_core_logs_reach_python_logging(
    url: str, lease_bin: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lease")
    lease._lease._refresh_log_level()
    try:
        l = lease.acquire(url, ttl=1.5)
        break_lease(lease_bin, url)
        assert l.lost.wait(timeout=1.5 + MARGIN)
        deadline = time.monotonic() + MARGIN
        while time.monotonic() < deadline and not any(
            "lease lost" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.02)
        lost = [r for r in caplog.records if "lease lost" in r.getMessage()]
        assert lost and lost[0].name == "lease" and lost[0].levelno == logging.INFO
        assert any(r.levelno == logging.DEBUG and r.name == "lease" for r in caplog.records)
    finally:
        caplog.set_level(logging.WARNING, logger="lease")
        lease._lease._refresh_log_level()


# Issue 28: a held lease's ttl and data change while it is held; a thread does not wait for
# what it holds itself.


def test_set_ttl_and_set_data_while_holding(url: str) -> None:
    with lease.acquire(url, ttl=30, data="10.0.0.1:80") as l:
        left = l.set_ttl(60)
        assert 59 < left <= 60 and l.ttl == 60
        s = lease.status(url)
        assert (s.ttl, s.data) == (60, "10.0.0.1:80")
        assert 29 < l.set_ttl("30s") <= 30 and lease.status(url).ttl == 30
        l.set_data("10.0.0.2:80")
        assert lease.status(url).data == "10.0.0.2:80"
        l.set_data(None)
        assert lease.status(url).data is None
        with pytest.raises(lease.InvalidArgument, match="out of range"):
            l.set_ttl(0.01)
        with pytest.raises(TypeError):
            l.set_data(5)  # type: ignore[arg-type]
        assert l.held and l.ttl == 30
    with pytest.raises(lease.LeaseLost):
        l.set_ttl(60)


def test_acquiring_what_this_thread_holds_fails_at_once(url: str) -> None:
    with lease.acquire(url, label="mine") as l:
        # LeaseHeld at once: a wait would end in LeaseTimeout.
        with pytest.raises(lease.LeaseHeld) as info:
            lease.acquire(url, wait=5)
        assert "would wait for itself" in str(info.value), str(info.value)
        assert info.value.holder is not None and info.value.holder.id == l.holder.id
        assert lease.try_acquire(url) is None
        # Another thread of this process waits for it as usual.
        threading.Timer(0.3, l.release).start()
        other = in_another_thread(lambda: lease.acquire(url, wait=30))
        assert other.epoch == l.epoch + 1
        other.release()
    # Released: this thread acquires it again.
    with lease.acquire(url, wait=5):
        pass


def test_preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted(
    url: str,
) -> None:
    reasons: List[Optional[str]] = []
    lost = threading.Event()

    def on_health(e: lease.HealthEvent) -> None:
        if e.health == "lost":
            reasons.append(e.reason)
            lost.set()

    holder = lease.acquire(url, ttl=3, label="old")
    holder.on_health(on_health)
    # Without the mode: held.
    with pytest.raises(lease.LeaseHeld):
        in_another_thread(lambda: lease.acquire(url, ttl=3, wait=0))
    # With it: at once, though it may not wait (wait=0, far less than the holder's ttl).
    new = in_another_thread(
        lambda: lease.acquire(url, ttl=3, wait=0, label="new", preempt="every-effect-fenced")
    )
    assert new.epoch > holder.epoch
    s = lease.status(url)
    assert s.holder is not None and s.holder.label == "new" and s.epoch == new.epoch
    # The old holder learns it at its next renewal (every ttl/3).
    assert lost.wait(timeout=30), "the preempted holder did not learn it"
    assert reasons == ["preempted"]
    assert not holder.held
    assert holder.lost_reason is not None and "preempted" in holder.lost_reason
    with pytest.raises(lease.LeaseLost):
        holder.release()
    assert new.held
    new.release()
