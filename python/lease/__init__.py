"""Leases, leader election and fencing on object storage.

A lease is one small JSON record in a store (``s3://bucket/locks/gc``, ``file:///…``,
``memory://…``), changed only by conditional writes. The holder gets an *epoch*, a fencing
token that strictly increases per lease; the lease renews itself in the background, tells you
at once when it is lost, and is released when the ``with`` block ends::

    import lease

    with lease.acquire("s3://bucket/locks/gc", ttl=30, wait=60, label="gc-1") as l:
        print(l.epoch)                   # fencing token
        l.ensure_held(min_remaining=5)   # raises lease.LeaseLost when it cannot

Durations are seconds (int or float). ``wait=None`` waits forever, ``wait=0`` tries once.
Library logs go to the ``logging`` logger ``lease``. See python/README.md for the whole API.
"""

from __future__ import annotations

# Only the API is public: what the module imports for itself is bound under a private name (or
# for type checkers only), and `dir(lease)` lists `__all__`.
import atexit as _atexit
import difflib as _difflib
import weakref as _weakref
from typing import TYPE_CHECKING

from . import _lease
from ._aio import AcquireAsync, await_core, task_owner
from ._errors import (
    Conflict,
    CorruptRecord,
    Fenced,
    InternalError,
    InvalidArgument,
    LeaseCancelled,
    LeaseError,
    LeaseHeld,
    LeaseLost,
    LeaseTimeout,
    QueueFull,
    StoreError,
    StoreUnavailable,
    UnsupportedRecord,
)
from ._lease import Lease
from ._session import (
    Session,
    SharedGrant,
    acquire_on_process_session,
    acquire_on_process_session_async,
    open_session,
    open_session_async,
)
from ._types import (
    FencedObject,
    Grant,
    Holder,
    Leader,
    Mode,
    Participant,
    State,
    Status,
    Tenure,
    HealthEvent,
    Token,
    YieldRequest,
    YieldRequested,
)

if TYPE_CHECKING:
    import datetime
    import ipaddress
    import os
    from typing import (
        Any,
        AsyncIterator,
        Callable,
        Dict,
        Iterator,
        List,
        Literal,
        Mapping,
        NoReturn,
        Optional,
        Tuple,
        Union,
    )

    #: A lease URL: ``s3://bucket/key?…``, ``file:///dir/name``, ``memory://ns/name``, a path
    #: (``str`` or ``os.PathLike``), or a bare name (in ``$LEASE_HOME``).
    URL = Union[str, "os.PathLike[str]"]
    #: A duration: seconds as an int or a float, a ``datetime.timedelta``, or a str with its
    #: unit (``"30s"``, ``"500ms"``, ``"5m"``; a number alone in a str is refused).
    Seconds = Union[int, float, datetime.timedelta, str]
    OnLost = Optional[Callable[[LeaseLost], object]]
    OnYield = Optional[Callable[[YieldRequested], object]]
    #: Where a waiter listens for wake hints: ``"off"``, ``"loopback"``, ``"route"`` or an
    #: interface's IP address (a str or an ``ipaddress`` object).
    WakeHints = Union[str, ipaddress.IPv4Address, ipaddress.IPv6Address]
    #: ``preempt=``: the one value that preempts names what the caller asserts.
    Preempt = Literal["every-effect-fenced", "never"]

__version__: str = _lease.__version__

__all__ = [
    "acquire",
    "acquire_async",
    "try_acquire",
    "open_session",
    "open_session_async",
    "acquire_on_process_session",
    "acquire_on_process_session_async",
    "Session",
    "SharedGrant",
    "status",
    "status_async",
    "ask_yield",
    "ask_yield_async",
    "watch",
    "watch_async",
    "fenced_get",
    "fenced_get_async",
    "parse_token",
    "Election",
    "FencingGate",
    "FencedObject",
    "Lease",
    "Watch",
    "LeaderObserver",
    "Holder",
    "Grant",
    "Participant",
    "Mode",
    "Status",
    "State",
    "Tenure",
    "HealthEvent",
    "metrics",
    "metrics_text",
    "Leader",
    "Token",
    "YieldRequest",
    "YieldRequested",
    "LeaseError",
    "LeaseHeld",
    "LeaseTimeout",
    "LeaseCancelled",
    "LeaseLost",
    "Fenced",
    "Conflict",
    "StoreError",
    "StoreUnavailable",
    "InvalidArgument",
    "CorruptRecord",
    "InternalError",
    "QueueFull",
    "UnsupportedRecord",
    "__version__",
]



def __dir__() -> "list[str]":
    return sorted(__all__)


# Leases acquired by this process that may still be held, released at interpreter exit.
_live: "_weakref.WeakSet[Lease]" = _weakref.WeakSet()

# Keywords of peers' locks, and what to write here instead: py-filelock's `timeout=` is how long
# to wait, redis-py's is how long the lock lasts, so neither is taken as an alias.
_PEERS = {
    "timeout": "lease has no timeout=: to bound the wait for the lease, use wait= (py-filelock's "
    "timeout=); for how long the lease lasts, use ttl= (redis-py's timeout=)",
    "blocking": "lease has no blocking=: waiting is the default; for blocking=False, use "
    "lease.try_acquire(url), which returns None when the lease is held (or wait=0, which "
    "raises LeaseHeld)",
    "blocking_timeout": "lease has no blocking_timeout=: use wait= (seconds to wait for the "
    "lease)",
    "poll_interval": "use poll= (seconds between a waiter's reads)",
}


def _no_such_keywords(call: str, wrong: "Mapping[str, object]", known: "Tuple[str, ...]") -> None:
    """Raise the ``TypeError`` Python raises for unexpected keyword arguments, saying what to
    write instead."""
    if not wrong:
        return
    name = sorted(wrong)[0]
    hint = _PEERS.get(name)
    if call == "try_acquire" and name in ("wait", "timeout", "blocking", "blocking_timeout"):
        hint = "try_acquire tries once and never waits: to wait, use lease.acquire(url, wait=…)"
    if call == "try_acquire" and name in ("ask_yield", "yield_reason"):
        hint = ("try_acquire tries once and never waits, so it asks nobody to yield: use "
                "lease.acquire(url, ask_yield=True, wait=…)")
    if hint is None:
        close = _difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]}=?" if close else "it takes " + ", ".join(
            k + "=" for k in known)
    raise TypeError(f"{call}() got an unexpected keyword argument {name!r}: {hint}")


_ACQUIRE_KEYWORDS = ("ttl", "wait", "label", "data", "on_lost", "on_yield", "unavailable_timeout", "shared",
                     "permits", "scope", "range", "queue", "poll", "wake_hints", "priority",
                     "ask_yield", "yield_reason", "preempt")
_TRY_KEYWORDS = tuple(k for k in _ACQUIRE_KEYWORDS
                      if k not in ("wait", "unavailable_timeout", "ask_yield", "yield_reason"))


def acquire(
    url: URL,
    *,
    ttl: Seconds = 30,
    wait: Optional[Seconds] = None,
    label: Optional[str] = None,
    data: Optional[str] = None,
    on_lost: OnLost = None,
    on_yield: OnYield = None,
    unavailable_timeout: Optional[Seconds] = None,
    shared: bool = False,
    permits: Optional[int] = None,
    scope: Optional[str] = None,
    range: Optional[Tuple[int, int]] = None,
    queue: bool = False,
    poll: Optional[Seconds] = None,
    wake_hints: Optional[WakeHints] = None,
    priority: int = 0,
    ask_yield: bool = False,
    yield_reason: Optional[str] = None,
    preempt: Optional[Preempt] = None,
    **wrong: NoReturn,
) -> Lease:
    """Acquire the lease at ``url``, waiting up to ``wait`` seconds (``None``: as long as a
    holder keeps it, ``0``: try once and raise :class:`LeaseHeld`). Raises
    :class:`LeaseTimeout` when the wait runs out on a holder, :class:`StoreUnavailable` when it runs
    out on a store that does not answer, or once the store has not answered for
    ``unavailable_timeout`` (default: the ttl, at least 10 s). The GIL is released while
    waiting, and Ctrl-C interrupts the wait (``KeyboardInterrupt``).

    ``ttl``: how long the lease lasts without renewal (it renews every ttl/3); a bare number is
    seconds, at most 3600 (a larger one is refused as a likely milliseconds mix-up: write a
    long ttl with its unit, ``"2h"``, up to ``"24h"``).
    ``label``: for people (shown by ``status``). ``data``: a small payload for others to read.
    ``on_lost``: called once with a :class:`LeaseLost` if the lease is lost, from the library's
    notifier thread (an exception it raises is logged to the ``lease`` logger).
    ``on_yield``: called with a :class:`YieldRequested` (``by``, ``to``, ``reason``) once per
    yield request that names this holder of a queued lock (:func:`ask_yield`; docs/protocol.md
    §10, "Yield on request"), from the same thread as ``on_lost``. It is not a loss: the lease
    stays held until released; :attr:`Lease.yield_requested` holds the latest request.

    Queued locks (docs/protocol.md §10; granted in arrival order among conflicting requests,
    :attr:`Lease.grant` says what was granted): ``shared=True`` holds beside other shared
    holders (readers) while an exclusive holder (a writer) holds alone; ``permits=N`` makes the
    lock a semaphore of N (implies shared); ``scope="tables/users"`` holds a path (it conflicts
    with the paths above and under it), ``range=(start, end)`` the bytes ``[start, end)`` of one
    object (overlapping ranges conflict); ``queue=True`` queues an exclusive request too.
    ``priority=N`` (an int, default 0; a queued request when not 0): among waiters that conflict
    the higher priority is granted first, arrival order within a priority, and a waiter is passed
    over by at most 8 later ones; a holder is never preempted.
    ``ask_yield=True`` (a queued request): once waiting, ask the holders in its way to step aside
    for it, naming this waiter as ``to``, with ``yield_reason`` (a str of at most 256 bytes) as
    the reason; their ``on_yield`` callbacks are told, and each decides when to release
    (docs/protocol.md §10, "Yield on request").
    ``preempt="every-effect-fenced"`` (a plain lease only): take a live holder's lease at once
    with the next epoch instead of waiting out its deadline, asserting that every effect of every
    holder of this lease goes through fenced writes or a :class:`FencingGate`; the preempted
    holder goes on believing it holds until its next renewal, then loses it with kind
    ``"preempted"`` (docs/protocol.md §5, "Preemption for fenced workloads"). ``"never"`` (the
    default) waits; any other str raises :class:`InvalidArgument` and anything else
    ``TypeError`` (no bool turns it on), and a queued request with it raises
    :class:`InvalidArgument`.
    ``poll``: how often a waiter reads the lock (default ttl/10 within 50 ms..2 s).
    ``wake_hints``: where a waiter of a queued lock can be woken by the write that grants it,
    so that it reads at once rather than at its next poll (docs/protocol.md §10, "Wake hints"):
    ``"loopback"`` (the default: 127.0.0.1, hints from writers on this host), ``"off"`` (it
    learns of its grant at its next poll), ``"route"`` (the address this host's default route
    leaves from, for writers on other hosts of one network), or the IP address of an interface
    to listen on (``"10.0.0.5"`` or an ``ipaddress`` object); anything else
    raises :class:`InvalidArgument`. A hint only makes the waiter read sooner.
    """
    _no_such_keywords("acquire", wrong, _ACQUIRE_KEYWORDS)
    options = _lease.Options(
        ttl=ttl, wait=wait, label=label, data=data, on_lost=on_lost, on_yield=on_yield,
        unavailable_timeout=unavailable_timeout, shared=shared, permits=permits, scope=scope,
        range=range, queue=queue, poll=poll, wake_hints=wake_hints, priority=priority,
        ask_yield=ask_yield, yield_reason=yield_reason, preempt=preempt,
    )
    lease = _lease._acquire(url, options)
    _live.add(lease)
    return lease


def try_acquire(
    url: URL,
    *,
    ttl: Seconds = 30,
    label: Optional[str] = None,
    data: Optional[str] = None,
    on_lost: OnLost = None,
    on_yield: OnYield = None,
    shared: bool = False,
    permits: Optional[int] = None,
    scope: Optional[str] = None,
    range: Optional[Tuple[int, int]] = None,
    queue: bool = False,
    poll: Optional[Seconds] = None,
    wake_hints: Optional[WakeHints] = None,
    priority: int = 0,
    preempt: Optional[Preempt] = None,
    **wrong: NoReturn,
) -> Optional[Lease]:
    """Try once: the :class:`Lease`, or ``None`` when someone else holds it (or, for a queued
    lock, when it cannot be granted now). The queued-lock options are :func:`acquire`'s."""
    _no_such_keywords("try_acquire", wrong, _TRY_KEYWORDS)
    options = _lease.Options(
        ttl=ttl, label=label, data=data, on_lost=on_lost, on_yield=on_yield, shared=shared, permits=permits,
        scope=scope, range=range, queue=queue, poll=poll, wake_hints=wake_hints, priority=priority,
        preempt=preempt,
    )
    lease = _lease._try_acquire(url, options)
    if lease is not None:
        _live.add(lease)
    return lease


def acquire_async(
    url: URL,
    *,
    ttl: Seconds = 30,
    wait: Optional[Seconds] = None,
    label: Optional[str] = None,
    data: Optional[str] = None,
    on_lost: OnLost = None,
    on_yield: OnYield = None,
    unavailable_timeout: Optional[Seconds] = None,
    shared: bool = False,
    permits: Optional[int] = None,
    scope: Optional[str] = None,
    range: Optional[Tuple[int, int]] = None,
    queue: bool = False,
    poll: Optional[Seconds] = None,
    wake_hints: Optional[WakeHints] = None,
    priority: int = 0,
    ask_yield: bool = False,
    yield_reason: Optional[str] = None,
    preempt: Optional[Preempt] = None,
    **wrong: NoReturn,
) -> AcquireAsync:
    """:func:`acquire` for asyncio: ``l = await lease.acquire_async(url)``, or
    ``async with lease.acquire_async(url) as l:`` (released on exit). Cancelling the task
    cancels the wait; if the lease was acquired at that moment it is released."""

    _no_such_keywords("acquire_async", wrong, _ACQUIRE_KEYWORDS)
    options = _lease.Options(
        ttl=ttl, wait=wait, label=label, data=data, on_lost=on_lost, on_yield=on_yield,
        unavailable_timeout=unavailable_timeout, shared=shared, permits=permits, scope=scope,
        range=range, queue=queue, poll=poll, wake_hints=wake_hints, priority=priority,
        ask_yield=ask_yield, yield_reason=yield_reason, preempt=preempt,
    )

    def start(done: Callable[[bool, object], None]) -> _lease.Pending:
        return _lease._acquire_start(url, options, done, task_owner())

    return AcquireAsync(start)


def metrics() -> List[Dict[str, Any]]:
    """This process's lease metrics (the same numbers in every language): a list of
    ``{"name", "help", "type", "samples"}``, each sample ``{"labels": {…}, "value": v}`` or,
    for a histogram, ``{"labels", "buckets": [[le, cumulative count], …], "sum", "count"}``.
    :class:`lease.prometheus.LeaseCollector` hands them to ``prometheus_client``."""
    return _lease._metrics()


def metrics_text() -> str:
    """This process's lease metrics in the Prometheus (OpenMetrics) text format."""
    return _lease._metrics_text()


def status(url: URL) -> Status:
    """The lease as the store shows it now (read-only: needs only read permission)."""
    return Status._from_json(_lease._status(url))


async def status_async(url: URL) -> Status:
    """:func:`status` for asyncio."""
    d = await await_core(lambda done: _lease._status_start(url, done))
    return Status._from_json(d)


def ask_yield(
    url: URL, *, to: Optional[str] = None, reason: Optional[str] = None, by: Optional[str] = None
) -> Optional[YieldRequest]:
    """Ask the holders of the queued lock at ``url`` to step aside (docs/protocol.md §10,
    "Yield on request"): those in the way of the waiter ``to`` (its id, or an unambiguous
    prefix of it), else every holder. ``by`` says who asks (default ``user@host``). Each holder
    asked learns it once, through its ``on_yield`` callback and ``yield_requested``, and keeps
    the lease until it releases. Returns the request as it stands, or ``None`` when nobody
    holds anything in ``to``'s way. Raises :class:`InvalidArgument` for a plain lease, an
    unknown or ambiguous ``to``, or an empty or too long ``by``/``reason``."""
    r: Optional[YieldRequest] = _lease._ask_yield(url, to, reason, by)
    return r


async def ask_yield_async(
    url: URL, *, to: Optional[str] = None, reason: Optional[str] = None, by: Optional[str] = None
) -> Optional[YieldRequest]:
    """:func:`ask_yield` for asyncio."""
    r: Optional[YieldRequest] = await await_core(
        lambda done: _lease._ask_yield_start(url, done, to, reason, by)
    )
    return r


def fenced_get(url: URL, *, key: Optional[str] = None) -> Optional[FencedObject]:
    """Read an object written by :meth:`Lease.fenced_put`, with the epoch, lease and holder of
    the writer and its version: a :class:`FencedObject`, or ``None`` when it does not exist.
    Needs no lease. To change it based on what was read, write with
    ``fenced_put(key, data, if_version=obj.version)`` or use :meth:`Lease.fenced_update`:
    a plain ``fenced_put`` after ``fenced_get`` is not atomic.

    ``url`` is the object's URL (``s3://bucket/data/report``, ``file:///dir/report``); or,
    with ``key``, the URL of the lease that wrote it and ``key`` as given to ``fenced_put``,
    placed the same way (beside the lease): ``lease.fenced_get(l.url, key="data/report")``.
    """
    return FencedObject._from_dict(_lease._fenced_get(url, key))


async def fenced_get_async(url: URL, *, key: Optional[str] = None) -> Optional[FencedObject]:
    """:func:`fenced_get` for asyncio."""
    d = await await_core(lambda done: _lease._fenced_get_start(url, key, done))
    return FencedObject._from_dict(d)


def parse_token(token: str) -> Token:
    """Take a fencing token apart: ``URL#EPOCH@HOLDER`` (what :attr:`Lease.token` is and
    ``lease run`` exports as ``LEASE_TOKEN``), or ``URL#EPOCH`` (then ``holder`` is ``None``),
    with ``;shared`` and ``;path=P`` or ``;range=A..B`` after it for a queued lock's shared or
    scoped grant. Raises :class:`InvalidArgument` if it is not one."""
    lease_url, epoch, holder, shared, scope, rng = _lease._parse_token(token)
    return Token(
        lease=lease_url, epoch=epoch, holder=holder, shared=shared, scope=scope, range=rng
    )


class FencingGate:
    """Admit or refuse fencing tokens for resources outside the store (a database row, an
    HTTP API): the resource calls ``gate.admit(resource, token)`` before acting on a request
    that carries a token (``Lease.token``, ``URL#EPOCH@HOLDER``, or a :class:`Lease`).

    A token is admitted when its epoch is above the highest admitted so far for that
    resource, or equal to it and of the same holder; a lower epoch, the same epoch of another
    holder, or a token of another lease raises :class:`Fenced` (its ``epoch`` is the highest
    admitted). ``FencingGate()`` keeps what it admitted in this object's memory: it guards a
    resource served by one process (share the one gate object among its threads); other
    processes, machines and ``FencingGate()`` objects have their own, unshared views. ``FencingGate(store_url, prefix="fencing")`` keeps one small object per
    resource in a store (``s3://bucket?…``, ``file:///dir``, a directory path), changed only by
    conditional writes: that is the gate services in many processes and machines share.
    """

    __slots__ = ("_g",)

    def __init__(self, store: Optional[URL] = None, *, prefix: Optional[str] = None) -> None:
        self._g = _lease.GateCore(store, prefix)

    def admit(self, resource: str, token: Union[str, Lease]) -> None:
        """Admit ``token`` for ``resource`` and remember its epoch, or raise :class:`Fenced`."""
        self._g.admit(resource, token.token if isinstance(token, Lease) else token)

    async def admit_async(self, resource: str, token: Union[str, Lease]) -> None:
        """:meth:`admit` for asyncio."""
        text = token.token if isinstance(token, Lease) else token
        await await_core(lambda done: self._g._admit_start(resource, text, done))

    def __repr__(self) -> str:
        return f"<lease.FencingGate {self._g.description}>"


class Watch:
    """Changes of one lease: iterate (``for s in w``) or async-iterate (``async for s in w``).
    The first item is the status now; each later one comes when the holder, epoch, state or
    data change (renewals are not changes). Never ends by itself: ``break`` out of it."""

    __slots__ = ("_w",)

    def __init__(self, url: URL, *, poll: Optional[Seconds] = None) -> None:
        self._w = _lease.Watch(url, poll)

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> Status:
        return Status._from_json(self._w.next())

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> Status:
        d = await await_core(self._w._next_start)
        return Status._from_json(d)


def watch(url: URL, *, poll: Optional[Seconds] = None) -> Iterator[Status]:
    """Iterate over the changes of a lease (see :class:`Watch`); ``poll`` seconds between
    reads (default 1; an unchanged record costs a 304)."""
    return Watch(url, poll=poll)


def watch_async(url: URL, *, poll: Optional[Seconds] = None) -> AsyncIterator[Status]:
    """``async for status in lease.watch_async(url)``: :func:`watch` for asyncio."""
    return Watch(url, poll=poll)


class LeaderObserver:
    """Leadership changes of an election: each item is the :class:`Leader`, or ``None`` when
    nobody leads. Iterate or async-iterate; never ends by itself."""

    __slots__ = ("_s",)

    def __init__(self, stream: _lease.LeaderStream) -> None:
        self._s = stream

    def __iter__(self) -> "LeaderObserver":
        return self

    def __next__(self) -> Optional[Leader]:
        return Leader._from_dict(self._s.next())

    def __aiter__(self) -> "LeaderObserver":
        return self

    async def __anext__(self) -> Optional[Leader]:
        return Leader._from_dict(await await_core(self._s._next_start))


class Election:
    """One participant in a leader election on the lease at ``url``.

    ``campaign()`` blocks until this participant leads and returns its :class:`Lease`
    (renewed in the background; its epoch is the leader's fencing token), ``resign()`` steps
    down, ``leader()`` says who leads now, ``observe()`` yields every change of leader.
    ``data`` is published to everyone while this participant leads (an address, say).
    """

    __slots__ = ("_e",)

    def __init__(
        self,
        url: URL,
        *,
        ttl: Seconds = 15,
        label: Optional[str] = None,
        data: Optional[str] = None,
        wait: Optional[Seconds] = None,
        on_lost: OnLost = None,
    ) -> None:
        options = _lease.Options(ttl=ttl, wait=wait, label=label, data=data, on_lost=on_lost)
        self._e = _lease.ElectionCore(url, options)

    @property
    def url(self) -> str:
        return self._e.url

    def campaign(self) -> Lease:
        """Block until this participant leads (at most ``wait`` seconds, if given)."""
        lease = self._e.campaign()
        _live.add(lease)
        return lease

    async def campaign_async(self) -> Lease:
        lease: Lease = await await_core(self._e._campaign_start)
        _live.add(lease)
        return lease

    def resign(self) -> None:
        """Stop leading (release the lease). Does nothing when not leading; raises
        :class:`LeaseLost` if leadership had already been lost."""
        self._e.resign()

    async def resign_async(self) -> None:
        await await_core(self._e._resign_start)

    @property
    def lease(self) -> Optional[Lease]:
        """The lease while this participant leads, else ``None``."""
        return self._e.lease()

    @property
    def is_leader(self) -> bool:
        return self._e.lease() is not None

    def leader(self) -> Optional[Leader]:
        """Who leads now, by the store's record."""
        return Leader._from_dict(self._e.leader())

    async def leader_async(self) -> Optional[Leader]:
        return Leader._from_dict(await await_core(self._e._leader_start))

    def observe(self, *, poll: Optional[Seconds] = None) -> LeaderObserver:
        """Iterate over leadership changes (the first item is the leader now)."""
        return LeaderObserver(self._e.observe(poll))

    def __enter__(self) -> "Election":
        return self

    def __exit__(self, *exc: object) -> None:
        self.resign()


@_atexit.register
def _release_at_exit() -> None:
    # Release what is still held, so others need not wait out the ttl; then stop calling
    # into Python from the library's threads.
    for lease in list(_live):
        try:
            if lease.held:
                lease.release()
        except BaseException:  # noqa: BLE001 - best effort at exit
            pass
    _lease._shutdown()
