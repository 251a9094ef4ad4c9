"""Queued locks (docs/protocol.md §10) from Python: shared readers and a writer, a semaphore,
byte ranges, the status of holders and waiters, try-once, argument checks. On the file store
and on S3 (moto)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import multiprocessing as mp
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import lease

from conftest import in_another_thread, make_url

# A waiter polls the lock this often (moto has no kernel wake-up).
POLL = 0.1
TTL = 10


@pytest.fixture(params=["file", "moto"])
def qurl(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return make_url(str(request.param), tmp_path, request.node.originalname or "q")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def labels(ps: Optional[List[lease.Participant]]) -> List[Optional[str]]:
    return [p.holder.label for p in ps or []]


class Acquirer:
    """acquire() in a thread: the lease once granted, or the exception."""

    def __init__(self, url: str, label: str, **kw: Any) -> None:
        self.lease: Optional[lease.Lease] = None
        self.error: Optional[BaseException] = None
        self.granted = threading.Event()

        def run() -> None:
            try:
                self.lease = lease.acquire(url, ttl=TTL, wait=60, poll=POLL, label=label, **kw)
            except BaseException as e:  # noqa: BLE001 - handed to the test
                self.error = e
            self.granted.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def get(self, timeout: float = 30.0) -> lease.Lease:
        assert self.granted.wait(timeout), "not granted in time"
        if self.error is not None:
            raise self.error
        assert self.lease is not None
        return self.lease


def test_shared_readers_then_a_writer_then_later_readers_wait(qurl: str) -> None:
    r1 = lease.acquire(qurl, ttl=TTL, shared=True, label="r1", poll=POLL)
    r2 = lease.acquire(qurl, ttl=TTL, shared=True, label="r2", poll=POLL, wait=0)
    assert r1.grant is not None and r1.grant.mode == "shared"
    assert r2.grant is not None and r2.grant.token > r1.grant.token
    assert r1.epoch == r1.grant.token

    # A writer arrives: it waits for the readers.
    w = Acquirer(qurl, "w", queue=True)
    wait_for("the writer to wait", lambda: labels(lease.status(qurl).waiting) == ["w"])
    # A later reader waits behind the writer (no writer starvation).
    r3 = Acquirer(qurl, "r3", shared=True)
    wait_for("r3 to wait", lambda: labels(lease.status(qurl).waiting) == ["w", "r3"])
    s = lease.status(qurl)
    assert labels(s.holders) == ["r1", "r2"]
    assert s.holders is not None and s.waiting is not None
    assert [p.mode for p in s.holders] == ["shared", "shared"]
    assert [p.token for p in s.holders] == [r1.epoch, r2.epoch]
    assert [(p.mode, p.token) for p in s.waiting] == [("exclusive", None), ("shared", None)]
    assert s.permits is None and s.holders[0].ttl == TTL
    assert s.to_json()["waiting"][0]["scope"] is None

    r1.release()
    time.sleep(0.3)
    assert not w.granted.is_set(), "the writer was granted beside a reader"
    r2.release()
    writer = w.get()
    assert writer.grant is not None and writer.grant.mode == "exclusive"
    assert writer.epoch > r2.epoch
    time.sleep(0.3)
    assert not r3.granted.is_set(), "a reader was granted beside the writer"
    assert labels(lease.status(qurl).waiting) == ["r3"]
    writer.release()
    reader = r3.get()
    assert reader.epoch > writer.epoch
    reader.release()
    s = lease.status(qurl)
    assert s.holders == [] and s.waiting == []


def test_a_higher_priority_waiter_goes_first_and_a_holder_is_not_preempted(qurl: str) -> None:
    holder = lease.acquire(qurl, ttl=TTL, queue=True, label="holder", poll=POLL)
    low = Acquirer(qurl, "low", queue=True)
    wait_for("low to wait", lambda: labels(lease.status(qurl).waiting) == ["low"])
    high = Acquirer(qurl, "high", priority=5)
    # Listed in the order they will be granted: the later, higher priority first.
    wait_for("high to wait", lambda: labels(lease.status(qurl).waiting) == ["high", "low"])
    assert not high.granted.is_set(), "a priority preempted the holder"
    # Each waiter's priority, and how often it was passed over, as the status shows them.
    assert [(w.priority, w.passed) for w in lease.status(qurl).waiting] == [(5, 0), (0, 0)]
    holder.release()
    first = high.get()
    assert first.grant is not None and first.epoch > holder.epoch
    assert not low.granted.is_set() and labels(lease.status(qurl).waiting) == ["low"]
    # The high one, joined later, went first: the low one was passed over once.
    assert [(w.priority, w.passed) for w in lease.status(qurl).waiting] == [(0, 1)]
    first.release()
    second = low.get()
    assert second.epoch > first.epoch
    second.release()


def test_preempt_takes_a_queued_lock_at_once_ahead_of_the_waiters(qurl: str) -> None:
    """Issue 23, "Preemption of a queued lock": an exclusive queued request with
    preempt="every-effect-fenced" removes the grant in its way and is granted at once, ahead of
    a waiter; the removed holder's fenced write is refused once the preemptor wrote, and it
    learns the loss as "preempted" at its next confirmation."""
    # A key of its own: the stores are shared with every suite (and "data" beside the lock
    # would be another lease's object).
    data = f"py-preempt-{uuid.uuid4().hex[:12]}-data"
    holder = lease.acquire(qurl, ttl=3, queue=True, label="old", poll=POLL)
    holder.fenced_put(data, b"old")
    waiter = Acquirer(qurl, "waiter", queue=True)
    wait_for("the waiter to wait", lambda: labels(lease.status(qurl).waiting) == ["waiter"])
    # From another thread: this one holds "old" (leases are not re-entrant).
    new = in_another_thread(
        lambda: lease.acquire(
            qurl, ttl=TTL, queue=True, wait=0, label="new", preempt="every-effect-fenced"
        )
    )
    assert new.grant is not None and new.epoch > holder.epoch
    s = lease.status(qurl)
    assert labels(s.holders) == ["new"] and labels(s.waiting) == ["waiter"]
    new.fenced_put(data, b"new")
    # The old holder still believes (until its next confirmation), but its write is refused.
    with pytest.raises(lease.Fenced):
        holder.fenced_put(data, b"stale")
    wait_for("the old holder to learn it", lambda: not holder.held)
    assert holder.lost_reason is not None and "preempted" in holder.lost_reason
    assert not waiter.granted.is_set(), "the waiter waits for the preemptor"
    new.release()
    w = waiter.get()
    assert w.epoch > new.epoch
    w.release()


def semaphore_worker(url: str, history: str, i: int) -> None:
    with lease.acquire(url, ttl=TTL, wait=120, permits=2, poll=POLL, label=f"s{i}") as l:
        assert l.grant is not None and l.grant.permits == 2
        with open(history, "a") as f:
            f.write(f"start {time.monotonic_ns()} {i}\n")
        time.sleep(0.3)
        with open(history, "a") as f:
            f.write(f"end {time.monotonic_ns()} {i}\n")


def test_a_semaphore_of_two_with_four_processes(qurl: str, tmp_path: Path) -> None:
    history = tmp_path / "history"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=semaphore_worker, args=(qurl, str(history), i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    events = sorted(
        (int(t), kind, int(i))
        for kind, t, i in (line.split() for line in history.read_text().splitlines())
    )
    running, most = 0, 0
    for _, kind, _ in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most <= 2, events
    assert sum(1 for e in events if e[1] == "start") == 4


def test_a_semaphore_of_two_with_four_threads(qurl: str) -> None:
    lock = threading.Lock()
    running: List[int] = [0, 0]  # now, most

    def work(i: int) -> None:
        with lease.acquire(qurl, ttl=TTL, wait=60, permits=2, poll=POLL, label=f"t{i}"):
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
            time.sleep(0.2)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert running == [0, 2]


def test_byte_ranges_conflict_only_when_they_overlap(qurl: str) -> None:
    a = lease.acquire(qurl, ttl=TTL, range=(0, 100), wait=0, poll=POLL)
    b = lease.acquire(qurl, ttl=TTL, range=(100, 200), wait=0, poll=POLL)
    assert a.grant is not None and a.grant.range == (0, 100) and a.grant.scope is None
    assert b.grant is not None and b.grant.range == (100, 200)
    with pytest.raises(lease.LeaseHeld):
        lease.acquire(qurl, ttl=TTL, range=(50, 150), wait=0)
    assert lease.try_acquire(qurl, ttl=TTL, range=(199, 300)) is None
    # Shared readers of overlapping ranges go together.
    a.release()
    b.release()
    with lease.acquire(qurl, ttl=TTL, range=(0, 10), shared=True, wait=0) as c:
        with lease.acquire(qurl, ttl=TTL, range=(5, 20), shared=True, wait=0) as d:
            assert c.grant is not None and d.grant is not None
            s = lease.status(qurl)
            assert [(p.range, p.mode) for p in s.holders or []] == [
                ((0, 10), "shared"),
                ((5, 20), "shared"),
            ]
            assert s.to_json()["holders"][0]["scope"] == {"start": 0, "end": 10}


def test_path_scopes(qurl: str) -> None:
    with lease.acquire(qurl, ttl=TTL, scope="tables/users", wait=0) as users:
        assert users.grant is not None and users.grant.scope == "tables/users"
        with lease.acquire(qurl, ttl=TTL, scope="tables/orders", wait=0):
            assert lease.try_acquire(qurl, ttl=TTL, scope="tables") is None
            assert lease.try_acquire(qurl, ttl=TTL, scope="tables/users/ids") is None
        s = lease.status(qurl)
        assert [p.scope for p in s.holders or []] == ["tables/users"]
        assert s.to_json()["holders"][0]["scope"] == {"path": "tables/users"}


def test_try_once_on_a_queued_lock_raises_held(qurl: str) -> None:
    with lease.acquire(qurl, ttl=TTL, queue=True) as l:
        assert l.grant is not None and l.grant.mode == "exclusive" and l.grant.permits is None
        with pytest.raises(lease.LeaseHeld):
            lease.acquire(qurl, ttl=TTL, shared=True, wait=0)
        assert lease.try_acquire(qurl, ttl=TTL, shared=True) is None
        # A plain exclusive request on a queued lock queues too.
        with pytest.raises(lease.LeaseHeld):
            lease.acquire(qurl, ttl=TTL, wait=0)
    # The waiters that gave up left the queue.
    s = lease.status(qurl)
    assert s.holders == [] and s.waiting == []


def test_a_plain_lease_has_no_grant(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "plain")
    with lease.acquire(url, ttl=TTL) as l:
        assert l.grant is None
        s = lease.status(url)
        assert s.permits is None and s.holders is None and s.waiting is None


def test_async_shared_holders(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "async")

    async def main() -> Tuple[int, int]:
        async with lease.acquire_async(url, ttl=TTL, shared=True, wait=0) as a:
            async with lease.acquire_async(url, ttl=TTL, shared=True, wait=0) as b:
                assert a.grant is not None and b.grant is not None
                with pytest.raises(lease.LeaseHeld):
                    await lease.acquire_async(url, ttl=TTL, wait=0)
                s = await lease.status_async(url)
                assert [p.token for p in s.holders or []] == [a.epoch, b.epoch]
                epochs = a.epoch, b.epoch
        return epochs

    ea, eb = asyncio.run(main())
    assert eb > ea


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"shared": "yes"}, TypeError),
        ({"queue": 1}, TypeError),
        ({"permits": 0}, ValueError),
        ({"permits": -1}, ValueError),
        ({"permits": 2.0}, TypeError),
        ({"permits": True}, TypeError),
        ({"scope": ""}, ValueError),
        ({"scope": "a/../b"}, ValueError),
        ({"scope": b"a"}, TypeError),
        ({"range": (5, 1)}, ValueError),
        ({"range": (5, 5)}, ValueError),
        ({"range": (-1, 5)}, ValueError),
        ({"range": (0, 1, 2)}, TypeError),
        ({"range": (0.0, 1)}, TypeError),
        ({"range": "0..4"}, TypeError),
        ({"range": (0, 4), "scope": "a"}, ValueError),
        ({"poll": -1}, ValueError),
        ({"poll": 0}, ValueError),
        ({"poll": "fast"}, ValueError),
        ({"poll": [1]}, TypeError),
        ({"priority": 1_000_000_001}, ValueError),
        ({"priority": -(10**30)}, ValueError),
        ({"priority": 1.5}, TypeError),
        ({"priority": "high"}, TypeError),
        ({"priority": True}, TypeError),
    ],
)
def test_bad_queue_options(tmp_path: Path, kw: Dict[str, Any], error: type) -> None:
    url = make_url("file", tmp_path, "bad")
    with pytest.raises(error):
        lease.acquire(url, ttl=TTL, wait=0, **kw)
    with pytest.raises(error):
        lease.try_acquire(url, ttl=TTL, **kw)

    async def start() -> None:
        await lease.acquire_async(url, ttl=TTL, wait=0, **kw)

    with pytest.raises(error):
        asyncio.run(start())
    if issubclass(error, ValueError):
        with pytest.raises(lease.InvalidArgument):
            lease.acquire(url, ttl=TTL, wait=0, **kw)
    assert lease.status(url).state == "free"


def test_fencing_per_scope_and_for_readers(qurl: str) -> None:
    """Issue 22: holders of disjoint ranges do not fence each other; readers fence what they
    read, so a stale writer's write never lands under them."""
    # Keys beside the lock, unique to this run (moto's bucket is shared by every test).
    blob, data, none = (f"py-fence-{uuid.uuid4().hex[:12]}-{k}" for k in ("blob", "data", "none"))
    a = lease.acquire(qurl, ttl=TTL, range=(0, 100), wait=0, poll=POLL)
    b = lease.acquire(qurl, ttl=TTL, range=(100, 200), wait=0, poll=POLL)
    assert lease.parse_token(a.token).range == (0, 100)
    a.fenced_update(blob, lambda old: (old.data if old else b"") + b"a")
    b.fenced_update(blob, lambda old: (old.data if old else b"") + b"b")
    a.fenced_update(blob, lambda old: (old.data if old else b"") + b"a")  # not fenced by b
    a.release()
    b.release()

    writer = lease.acquire(qurl, ttl=TTL, queue=True, wait=0, poll=POLL)
    writer.fenced_put(data, b"v0")
    seen = writer.fenced_read(data)  # an exclusive holder may fence-read too
    assert seen is not None and seen.data == b"v0"
    writer.release()  # its grant ended; the object stays in its hands
    readers = []
    for _ in range(2):
        r = lease.acquire(qurl, ttl=TTL, shared=True, wait=0, poll=POLL)
        t = lease.parse_token(r.token)
        assert r.token.endswith(";shared") and t.shared and t == (r.url, r.epoch, r.holder.id)
        got = r.fenced_read(data)
        assert got is not None and got.data == b"v0"
        assert r.fenced_read(none) is None
        readers.append(r)
    with pytest.raises(lease.Fenced) as fenced:
        writer.fenced_put(data, b"v1", if_version=seen.version)
    assert fenced.value.epoch == readers[1].epoch
    with pytest.raises(lease.Fenced):
        writer.fenced_put(data, b"v1")
    with pytest.raises(lease.Fenced):
        writer.fenced_put(none, b"x", if_absent=True)
    with pytest.raises(lease.InvalidArgument, match="fenced_read"):
        readers[0].fenced_put(data, b"x")
    again = asyncio.run(readers[0].fenced_read_async(data))
    assert again is not None and again.data == b"v0"
    assert lease.fenced_get(qurl, key=none) is None
    gate = lease.FencingGate()
    gate.admit("doc", readers[0])
    with pytest.raises(lease.Fenced):
        gate.admit("doc", writer.token)
    for r in readers:
        r.release()


def waiter_wake(url: str) -> Optional[str]:
    """The wake field of the one waiter in the queued lock's record, read through the store."""
    obj = lease.fenced_get(url)
    assert obj is not None
    record = json.loads(obj.data)
    assert len(record["queue"]) == 1, record
    wake = record["queue"][0].get("wake")
    assert wake is None or isinstance(wake, str)
    return wake


def route_address() -> str:
    """The address this host's default route leaves from (a connected UDP socket sends
    nothing), or 127.0.0.1 without a route: where ``wake_hints="route"`` listens."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))
        except OSError:
            return "127.0.0.1"
        return str(s.getsockname()[0])


@pytest.mark.parametrize(
    "hints", [None, "loopback", "127.0.0.1", ipaddress.ip_address("127.0.0.1"), "off", "route"]
)
def test_wake_hints_in_the_waiters_entry(qurl: str, hints: Any) -> None:
    """Issue 23: ``wake_hints`` says where a waiter can be woken: by default (and with
    "loopback" or 127.0.0.1) its queue entry names a loopback address, with "off" none, with
    "route" the address the default route leaves from."""
    holder = lease.acquire(qurl, ttl=TTL, queue=True, wait=0, poll=POLL, wake_hints="off")
    w = Acquirer(qurl, "w", queue=True, **({} if hints is None else {"wake_hints": hints}))
    try:
        wait_for("the waiter", lambda: labels(lease.status(qurl).waiting) == ["w"])
        wake = waiter_wake(qurl)
    finally:
        holder.release()
    w.get().release()
    if hints == "off":
        assert wake is None
    elif hints == "route":
        assert wake is not None and wake.startswith(f"udp:{route_address()}:"), wake
    else:
        assert wake is not None and wake.startswith("udp:127.0.0.1:"), wake


# A waiter in another process whose poll is an hour away: only a wake hint can wake it within
# the test (its holder's ttl is an hour too, so no takeover check reads the record either).
HINTED_WAITER = """
import sys, lease
l = lease.acquire(sys.argv[1], ttl=10, queue=True, wait=90, poll="1h", label="hinted")
print("acquired", flush=True)
l.release()
"""


def test_a_release_wakes_a_waiter_in_another_process_by_a_hint(tmp_path: Path) -> None:
    """Issue 23: on S3 (moto: nothing else wakes a waiter) a release wakes the waiter in
    another process long before its poll. Without the hint it reads again only at the end of
    its 90 s wait, past the test's 60 s bound (seen with wake_hints="off": granted after its
    whole wait)."""
    url = make_url("moto", tmp_path, "hinted")
    holder = lease.acquire(url, ttl="1h", queue=True, wait=0)
    p = subprocess.Popen([sys.executable, "-c", HINTED_WAITER, url], stdout=subprocess.PIPE, text=True)
    try:
        wait_for("the waiter", lambda: labels(lease.status(url).waiting) == ["hinted"])
        wake = waiter_wake(url)
        assert wake is not None and wake.startswith("udp:127.0.0.1:"), wake
        holder.release()
        out, _ = p.communicate(timeout=60)
        assert out.split() == ["acquired"], out
        assert p.returncode == 0
    finally:
        holder.release()
        p.kill()
        p.wait()


@pytest.mark.parametrize(
    "hints, error",
    [
        ("on-demand", ValueError),
        ("127.0.0", ValueError),
        ("udp:127.0.0.1:9", ValueError),
        ("", ValueError),
        (True, TypeError),
        (b"off", TypeError),
        (("127.0.0.1", 0), TypeError),
    ],
)
def test_bad_wake_hints(tmp_path: Path, hints: Any, error: type) -> None:
    url = make_url("file", tmp_path, "bad-hints")
    with pytest.raises(error, match="wake hints|wake_hints"):
        lease.acquire(url, ttl=TTL, queue=True, wait=0, wake_hints=hints)
    with pytest.raises(error):
        lease.try_acquire(url, ttl=TTL, queue=True, wake_hints=hints)
    if issubclass(error, ValueError):
        with pytest.raises(lease.InvalidArgument, match="loopback"):
            lease.acquire(url, ttl=TTL, queue=True, wait=0, wake_hints=hints)
    assert lease.status(url).state == "free"


def test_a_yield_request_reaches_the_holder_and_it_hands_over(qurl: str) -> None:
    told: List[lease.YieldRequested] = []
    asked = threading.Event()

    def on_yield(y: lease.YieldRequested) -> None:
        told.append(y)
        asked.set()

    holder = lease.acquire(qurl, ttl=TTL, queue=True, label="holder", poll=POLL, on_yield=on_yield)
    assert holder.yield_requested is None
    waiter = Acquirer(qurl, "waiter", queue=True)
    wait_for("the waiter to wait", lambda: labels(lease.status(qurl).waiting) == ["waiter"])
    waiting = lease.status(qurl).waiting
    assert waiting is not None
    waiter_id = waiting[0].holder.id

    r = lease.ask_yield(qurl, to=waiter_id[:8], reason="deploy", by="op")
    assert r is not None and r.tokens == [holder.epoch]
    assert (r.by, r.to, r.reason) == ("op", waiter_id, "deploy")
    assert asked.wait(30), "the holder was not told"
    assert told == [lease.YieldRequested(by="op", to=waiter_id, reason="deploy")]
    assert holder.yield_requested == told[0]
    assert holder.held, "a yield request is not a loss"
    assert not waiter.granted.is_set()

    holder.release()
    got = waiter.get()
    assert got.epoch > holder.epoch
    got.release()
    assert told == [lease.YieldRequested(by="op", to=waiter_id, reason="deploy")]


def test_ask_yield_refuses_a_bad_to_and_a_plain_lease(qurl: str, tmp_path: Path) -> None:
    holder = lease.acquire(qurl, ttl=TTL, queue=True, label="holder", poll=POLL)
    with pytest.raises(lease.InvalidArgument, match="no-such-waiter"):
        lease.ask_yield(qurl, to="no-such-waiter")
    with pytest.raises(lease.InvalidArgument):
        lease.ask_yield(qurl, to="")
    with pytest.raises(TypeError, match="on_yield"):
        lease._lease.Options(ttl=TTL, on_yield=3)  # type: ignore[arg-type]
    holder.release()

    # A plain lease's holder is asked through KEY.yield (no `to`: it has no waiters), and
    # told after a renewal once it listens.
    plain = str(tmp_path / "plain")
    told: List[lease.YieldRequested] = []
    with lease.acquire(plain, ttl=3, on_yield=told.append) as p:
        with pytest.raises(lease.InvalidArgument, match="no waiters"):
            lease.ask_yield(plain, to="x")
        r = lease.ask_yield(plain, reason="deploy")
        assert r is not None and r.tokens == [p.epoch] and r.to is None
        deadline = time.monotonic() + 10
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [t.reason for t in told] == ["deploy"] and p.held
        assert p.yield_requested is not None
    assert lease.ask_yield(plain) is None  # released: nobody to ask


def test_ask_yield_async(tmp_path: Path) -> None:
    url = str(tmp_path / "y")

    async def main() -> None:
        async with lease.acquire_async(url, ttl=TTL, queue=True) as held:
            r = await lease.ask_yield_async(url, reason="r")
            assert r is not None and r.tokens == [held.epoch] and r.to is None

    asyncio.run(main())


def test_a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside(
    qurl: str,
) -> None:
    told: List[lease.YieldRequested] = []
    asked = threading.Event()

    def on_yield(y: lease.YieldRequested) -> None:
        told.append(y)
        asked.set()

    holder = lease.acquire(qurl, ttl=TTL, queue=True, label="holder", poll=POLL, on_yield=on_yield)
    waiter = Acquirer(qurl, "waiter", ask_yield=True, yield_reason="deploy")
    assert asked.wait(30), "the holder was not told"
    waiting = lease.status(qurl).waiting
    assert waiting is not None and labels(waiting) == ["waiter"]
    waiter_id = waiting[0].holder.id
    # The waiter asks for itself: it is both who asks and whom to hand the lock to.
    assert told == [lease.YieldRequested(by=waiter_id, to=waiter_id, reason="deploy")]
    assert holder.held, "a yield request is not a loss"
    assert not waiter.granted.is_set()
    holder.release()
    got = waiter.get()
    assert got.grant is not None and got.epoch > holder.epoch
    assert got.holder.id == waiter_id
    got.release()
    assert len(told) == 1


@pytest.mark.parametrize(
    "kw, error, says",
    [
        ({"preempt": True}, TypeError, "every-effect-fenced"),
        ({"preempt": 1}, TypeError, "every-effect-fenced"),
        ({"preempt": "yes"}, ValueError, "every-effect-fenced"),
        ({"preempt": "Never "}, ValueError, "every-effect-fenced"),
        ({"preempt": "every-effect"}, ValueError, "believing"),
        ({"preempt": "every-effect-fenced", "shared": True}, ValueError, "only an exclusive request"),
        ({"ask_yield": "yes"}, TypeError, "ask_yield"),
        ({"yield_reason": 5, "ask_yield": True}, TypeError, "yield_reason"),
        ({"yield_reason": "why"}, ValueError, "set ask_yield"),
        ({"ask_yield": True, "yield_reason": "x" * 257}, ValueError, "at most 256 bytes"),
    ],
)
def test_bad_yield_and_preempt_options(
    tmp_path: Path, kw: Dict[str, Any], error: type, says: str
) -> None:
    url = make_url("file", tmp_path, "bad")
    with pytest.raises(error, match=says):
        lease.acquire(url, ttl=TTL, wait=0, **kw)
    if "ask_yield" not in kw and "yield_reason" not in kw:
        with pytest.raises(error, match=says):
            lease.try_acquire(url, ttl=TTL, **kw)

    async def start() -> None:
        await lease.acquire_async(url, ttl=TTL, wait=0, **kw)

    with pytest.raises(error, match=says):
        asyncio.run(start())
    if issubclass(error, ValueError):
        with pytest.raises(lease.InvalidArgument):
            lease.acquire(url, ttl=TTL, wait=0, **kw)
    assert lease.status(url).state == "free"


def test_try_acquire_asks_nobody_to_yield(tmp_path: Path) -> None:
    url = make_url("file", tmp_path, "try")
    with pytest.raises(TypeError, match="asks nobody to yield"):
        lease.try_acquire(url, ask_yield=True)  # type: ignore[call-arg]
