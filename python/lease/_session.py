"""Shared sessions: many queued-lock grants kept by one heartbeat (docs/protocol.md §10,
"Shared sessions: one heartbeat for many grants"; issue 24). The Rust side is
python/src/session.rs; this module gives the signatures, the context managers and asyncio.

etcd's ``concurrency.NewSession`` + ``NewMutex(session, key)``, here::

    with lease.open_session("s3://bucket/jobs", ttl=30) as session:
        grants = [session.acquire(f"jobs/{n}") for n in range(1000)]
        ...

or, without a session object, through the process's own session for the store and ttl
(opened on first use, released by itself one ttl after its last grant)::

    g = lease.acquire_on_process_session("s3://bucket/jobs/7", ttl=30)
"""

from __future__ import annotations

import atexit as _atexit
import weakref as _weakref
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Generator,
    Optional,
    Tuple,
    Type,
    Union,
)

from . import _aio, _lease, _update
from ._aio import Done, await_core
from ._errors import InvalidArgument, LeaseError, LeaseLost
from ._types import FencedObject, YieldRequested

if TYPE_CHECKING:
    import datetime
    import ipaddress
    import os
    from typing import Mapping, NoReturn

    from ._types import Grant

    URL = Union[str, "os.PathLike[str]"]
    Data = Union[bytes, bytearray, str]
    Seconds = Union[int, float, datetime.timedelta, str]
    WakeHints = Union[str, ipaddress.IPv4Address, ipaddress.IPv6Address]

__all__ = ["Session", "SharedGrant", "open_session", "open_session_async",
           "acquire_on_process_session", "acquire_on_process_session_async"]

# The keywords Session.acquire takes (lease.acquire's that apply to a grant on a session).
_SESSION_ACQUIRE_KEYWORDS = ("wait", "label", "data", "unavailable_timeout", "shared",
                             "permits", "scope", "range", "poll", "wake_hints", "priority")

# The keywords acquire_on_process_session takes: Session.acquire's, the ttl that chooses the
# session, and queue (implied).
_PROCESS_KEYWORDS = ("ttl",) + _SESSION_ACQUIRE_KEYWORDS + ("queue",)

# lease.acquire's keywords that a grant on a shared session has no use for, and what to do.
_NOT_ON_A_SESSION = {
    "on_lost": "a grant on a shared session has no on_lost callback: read grant.lost_reason "
    "or call grant.ensure_held() (its loss is its own or its session's)",
    "on_yield": "a grant on a shared session has no on_yield callback: read "
    "grant.yield_requested",
    "ask_yield": "a request through a shared session does not ask holders to yield: "
    "lease.ask_yield(url) asks them",
    "yield_reason": "a request through a shared session does not ask holders to yield: "
    "lease.ask_yield(url, reason=...) asks them",
    "preempt": "preemption is for a plain lease (lease.acquire); a grant on a shared session "
    "is a queued lock's",
}

# Sessions of this process not closed yet, closed at interpreter exit.
_open: "_weakref.WeakSet[Session]" = _weakref.WeakSet()

# The process's sessions (lease.acquire_on_process_session) by SID: one Session object per
# session while a grant of it lives; closed at interpreter exit too.
_process_sessions: "_weakref.WeakValueDictionary[str, Session]" = _weakref.WeakValueDictionary()


def _check_keywords(call: str, wrong: "Mapping[str, object]") -> None:
    if "ttl" in wrong:
        raise InvalidArgument(
            f"{call}() takes no ttl=: the session's ttl applies to every grant held through it "
            "(a checker judges a grant by its session's record); open the session with the ttl "
            "wanted (lease.open_session(url, ttl=…))"
        )
    if "queue" in wrong:
        raise TypeError(f"{call}() takes no queue=: a grant on a session is always queued")
    from . import _no_such_keywords

    _no_such_keywords(call, wrong, _SESSION_ACQUIRE_KEYWORDS)


def _options(
    ttl: float,
    wait: Optional[Seconds],
    label: Optional[str],
    data: Optional[str],
    unavailable_timeout: Optional[Seconds],
    shared: bool,
    permits: Optional[int],
    scope: Optional[str],
    range: Optional[Tuple[int, int]],
    poll: Optional[Seconds],
    wake_hints: Optional[WakeHints],
    priority: int,
) -> _lease.Options:
    # The core replaces the ttl with the session's; it is given here because Options needs one.
    return _lease.Options(
        ttl=ttl, wait=wait, label=label, data=data, unavailable_timeout=unavailable_timeout,
        shared=shared, permits=permits, scope=scope, range=range, queue=True, poll=poll,
        wake_hints=wake_hints, priority=priority,
    )


class SharedGrant:
    """A grant of a queued lock held through a :class:`Session`: kept by the session's
    renewals (no heartbeat of its own). Use it as a context manager (``with`` / ``async
    with``) or call :meth:`release`; a grant dropped without either is released in the
    background."""

    __slots__ = ("_g", "_session", "__weakref__")

    def __init__(self, core: _lease.GrantCore, session: "Session") -> None:
        self._g = core
        # The session lives while one of its grants does.
        self._session = session

    @property
    def epoch(self) -> int:
        """The fencing number: strictly increasing per lock (as :attr:`Lease.epoch`)."""
        return self._g.epoch

    @property
    def token(self) -> str:
        """``URL#EPOCH@SID.N``: the token to hand to resources that check it (a
        :class:`FencingGate`, a database's fence), as :attr:`Lease.token`. Its holder is the
        grant's entry id ``SID.N``, so two grants of one session are two holders."""
        return self._g.token

    @property
    def key(self) -> str:
        """The lock's key in the session's store."""
        return self._g.key

    @property
    def url(self) -> str:
        return self._g.url

    @property
    def id(self) -> str:
        """Its entry id in the lock's record, ``SID.N``."""
        return self._g.id

    @property
    def grant(self) -> Grant:
        """What was granted (mode, token, scope, range, permits)."""
        return self._g.grant

    @property
    def session(self) -> "Session":
        return self._session

    @property
    def held(self) -> bool:
        """True while held: its session is believed and its lock's record confirmed it less
        than a ttl ago. False once lost or released."""
        return self._g.held

    @property
    def lost_reason(self) -> Optional[str]:
        """Why it was lost (its session's loss, or its own), or ``None`` while it is not."""
        return self._g.lost_reason

    @property
    def lost_kind(self) -> Optional[str]:
        """The kind of its loss: ``"session_deleted"``, ``"expired"``, ``"taken_over"``,
        ``"broken"``, ``"removed"``, ``"lock_replaced"``, …; ``None`` while not lost."""
        return self._g.lost_kind

    @property
    def yield_requested(self) -> Optional[YieldRequested]:
        """The latest yield request that named this grant (:func:`ask_yield`, or a waiter's
        ``ask_yield=True``), or ``None``. Not a loss: the grant stays held until released. The
        session's confirmation of the lock reports it, within a third of the session's ttl."""
        return self._g.yield_requested

    def ensure_held(self) -> None:
        """Return while held; else raise :class:`LeaseLost` naming why."""
        self._g.ensure_held()

    # Fenced operations, as a Lease's (the same code: lease/_aio.py, lease/_update.py and
    # python/src/fence.rs take either), under this grant's token.

    def fenced_put(
        self,
        key: str,
        data: "Data",
        *,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> str:
        """Write ``data`` at ``key`` under this grant's token, as :meth:`Lease.fenced_put`
        (exclusive grants only): ``key`` is read like a relative path from the lock's
        directory (``x`` beside the lock, ``../x`` one level up, ``/x`` from the store's
        root). Raises :class:`Fenced` (whose ``epoch`` is the newer one) once a later grant of
        the lock wrote it. ``if_version=obj.version`` / ``if_absent=True``: only if the object
        is still at that version / does not exist, else :class:`Conflict`. Returns the
        object's new version."""
        return self._g.fenced_put(key, data, if_version=if_version, if_absent=if_absent)

    async def fenced_put_async(
        self,
        key: str,
        data: "Data",
        *,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> str:
        """:meth:`fenced_put` for asyncio."""
        return await _aio.fenced_put_async(self._g, key, data, if_version, if_absent)

    def fenced_update(self, key: str, f: Callable[[Optional[FencedObject]], "Data"]) -> str:
        """Read-modify-write ``key`` under this grant's token without losing updates, as
        :meth:`Lease.fenced_update`: ``f`` gets the object now (or ``None``) and returns the
        new contents, written only if nobody wrote in between (else read and called again, up
        to 32 times). Raises :class:`Fenced` once a later grant of the lock wrote the object.
        Returns the new version."""
        return _update.fenced_update(self._g, key, f)

    async def fenced_update_async(
        self,
        key: str,
        f: Callable[[Optional[FencedObject]], Union["Data", Awaitable["Data"]]],
    ) -> str:
        """:meth:`fenced_update` for asyncio; ``f`` may be a plain or an async function."""
        return await _update.fenced_update_async(self._g, key, f)

    def fenced_read(self, key: str) -> Optional[FencedObject]:
        """Read ``key`` and fence it with this grant's token, as :meth:`Lease.fenced_read`:
        from then on no holder whose grant ended before this one began can change it. Raises
        :class:`Fenced` when a later conflicting grant wrote or fenced it."""
        return self._g.fenced_read(key)

    async def fenced_read_async(self, key: str) -> Optional[FencedObject]:
        """:meth:`fenced_read` for asyncio."""
        return await _aio.fenced_read_async(self._g, key)

    def fenced_delete(self, key: str) -> bool:
        """Delete ``key`` unless a later grant of the lock wrote it (:class:`Fenced`), as
        :meth:`Lease.fenced_delete`; ``False`` when there was nothing to delete."""
        return self._g.fenced_delete(key)

    async def fenced_delete_async(self, key: str) -> bool:
        """:meth:`fenced_delete` for asyncio."""
        return await _aio.fenced_delete_async(self._g, key)

    def release(self) -> None:
        """Release this grant alone (idempotent): its leave grants the next waiter, and the
        session's other grants stay held. Raises :class:`LeaseLost` if it was lost before."""
        self._g.release()

    async def release_async(self) -> None:
        """:meth:`release` for asyncio."""
        await await_core(self._g._release_start)

    def _release_background(self) -> None:
        self._g._release_background()

    def _exit(self, exc_value: Optional[BaseException], err: Optional[LeaseError]) -> bool:
        if err is None:
            return False
        if exc_value is None:
            raise err
        # Never mask the block's own exception; say what happened beside it.
        add_note = getattr(exc_value, "add_note", None)  # Python 3.11+
        if add_note is not None:
            add_note(f"lease: {self.url} was lost while this block ran: {err}")
        return False

    def __enter__(self) -> "SharedGrant":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        """Release on leaving the block; if the grant was lost while the block ran and the
        block did not raise, :class:`LeaseLost` is raised here (the work may have overlapped
        with another holder)."""
        err: Optional[LeaseError] = None
        try:
            self._g.release()
        except LeaseLost as e:
            err = e
        return self._exit(exc_value, err)

    async def __aenter__(self) -> "SharedGrant":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        err: Optional[LeaseError] = None
        try:
            await self.release_async()
        except LeaseLost as e:
            err = e
        return self._exit(exc_value, err)

    def __repr__(self) -> str:
        return repr(self._g)


class Session:
    """One shared session on a store: any number of queued-lock grants
    (:meth:`acquire`) kept by one renewal of one record, ``PREFIX.lease-sessions/SID`` — one
    write per ``ttl/3`` for the whole session, whatever the number of locks. Made by
    :func:`open_session`. Close it (:meth:`close`, or ``with``): its grants still held are
    released and its record deleted. Lost (its record deleted, taken over, not renewed within
    its ttl), every grant of it is lost."""

    __slots__ = ("_s", "__weakref__")

    def __init__(self, core: _lease.SessionCore) -> None:
        self._s = core
        if not core.process:
            _open.add(self)

    @property
    def sid(self) -> str:
        """The session's id (32 hex digits)."""
        return self._s.sid

    @property
    def url(self) -> str:
        """The session record's URL."""
        return self._s.url

    @property
    def key(self) -> str:
        """The session record's key in its store, ``PREFIX.lease-sessions/SID``."""
        return self._s.key

    @property
    def store(self) -> str:
        """The store's URL."""
        return self._s.store

    @property
    def ttl(self) -> float:
        """The ttl of the session and of every grant held through it, in seconds."""
        return self._s.ttl

    @property
    def alive(self) -> bool:
        """True while the session is believed (renewed less than a ttl ago) and not closed."""
        return self._s.alive

    @property
    def attached(self) -> int:
        """How many grants and waiters are attached to it (or attaching)."""
        return self._s.attached

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the session was lost, or ``None`` while it is not."""
        return self._s.lost_reason

    @property
    def closed(self) -> bool:
        return self._s.closed

    @property
    def process(self) -> bool:
        """True for the process's session (:func:`acquire_on_process_session`): it takes no
        :meth:`acquire` and no :meth:`close` (it closes by itself one ttl after its last grant
        is released)."""
        return self._s.process

    def acquire(
        self,
        lock: URL,
        *,
        wait: Optional[Seconds] = None,
        label: Optional[str] = None,
        data: Optional[str] = None,
        unavailable_timeout: Optional[Seconds] = None,
        shared: bool = False,
        permits: Optional[int] = None,
        scope: Optional[str] = None,
        range: Optional[Tuple[int, int]] = None,
        poll: Optional[Seconds] = None,
        wake_hints: Optional[WakeHints] = None,
        priority: int = 0,
        **wrong: NoReturn,
    ) -> SharedGrant:
        """Acquire a grant of the queued lock ``lock`` through this session, waiting as
        :func:`lease.acquire` does (``wait``; the GIL released, Ctrl-C interrupts). ``lock`` is
        a lock URL in the session's store (``s3://bucket/jobs/7``, ``file:///dir/gc``, a
        path; one of another store raises :class:`InvalidArgument`) or a key in that store
        (``"jobs/7"``: no scheme, not a path). The queued-lock options are
        :func:`lease.acquire`'s; the ttl is the session's (``ttl=`` raises
        :class:`InvalidArgument`), and ``data=`` is refused (:class:`InvalidArgument`: the
        session's record is the process's). A closed session raises
        :class:`InvalidArgument`, a lost one :class:`LeaseLost`."""
        _check_keywords("Session.acquire", wrong)
        options = _options(self._s.ttl, wait, label, data, unavailable_timeout, shared, permits,
                           scope, range, poll, wake_hints, priority)
        return SharedGrant(self._s.acquire(lock, options), self)

    async def acquire_async(
        self,
        lock: URL,
        *,
        wait: Optional[Seconds] = None,
        label: Optional[str] = None,
        data: Optional[str] = None,
        unavailable_timeout: Optional[Seconds] = None,
        shared: bool = False,
        permits: Optional[int] = None,
        scope: Optional[str] = None,
        range: Optional[Tuple[int, int]] = None,
        poll: Optional[Seconds] = None,
        wake_hints: Optional[WakeHints] = None,
        priority: int = 0,
        **wrong: NoReturn,
    ) -> SharedGrant:
        """:meth:`acquire` for asyncio. Cancelling the task stops a waiting request: it leaves
        the lock's queue and the session."""
        _check_keywords("Session.acquire_async", wrong)
        options = _options(self._s.ttl, wait, label, data, unavailable_timeout, shared, permits,
                           scope, range, poll, wake_hints, priority)
        core = self._s
        g: _lease.GrantCore = await await_core(
            lambda done: core._acquire_start(lock, options, done))
        return SharedGrant(g, self)

    def close(self) -> None:
        """Close the session (idempotent): its grants still held are released (each leave
        grants the next waiter), then its record is released and deleted."""
        self._s.close()
        _open.discard(self)

    async def close_async(self) -> None:
        """:meth:`close` for asyncio."""
        await await_core(self._s._close_start)
        _open.discard(self)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()

    def __repr__(self) -> str:
        return repr(self._s)


def open_session(
    url: URL,
    *,
    ttl: Seconds = 30,
    label: Optional[str] = None,
    prefix: Optional[str] = None,
) -> Session:
    """Open a shared session on the store of ``url`` — a lock URL in the store
    (``s3://bucket/jobs/7``, ``file:///var/locks/gc``), the store's own URL (``s3://bucket?…``,
    ``memory://ns``) or its directory (``file:///var/locks``, an existing directory) — and
    write its first record before returning. ``ttl`` as :func:`lease.acquire`'s (the session
    renews every ``ttl/3``); ``label`` for people (``lease status``); ``prefix`` (empty, or
    ending in ``/``: ``"team-a/"``) puts its record at ``PREFIX.lease-sessions/SID`` instead of
    the store's root. Raises :class:`InvalidArgument` for a bad ttl, prefix or URL."""
    return Session(_lease._open_session(url, ttl, label, prefix))


class OpenSessionAsync:
    """What :func:`open_session_async` returns: await it for a :class:`Session`, or use it as
    ``async with lease.open_session_async(...) as s:`` to close it on exit."""

    __slots__ = ("_start", "_session")

    def __init__(self, start: Callable[[Done], _lease.Pending]) -> None:
        self._start = start
        self._session: Optional[Session] = None

    async def _open(self) -> Session:
        core: _lease.SessionCore = await await_core(self._start)
        return Session(core)

    def __await__(self) -> Generator[Any, None, Session]:
        return self._open().__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close_async()


def open_session_async(
    url: URL,
    *,
    ttl: Seconds = 30,
    label: Optional[str] = None,
    prefix: Optional[str] = None,
) -> OpenSessionAsync:
    """:func:`open_session` for asyncio: ``s = await lease.open_session_async(url)``, or
    ``async with lease.open_session_async(url) as s:`` (closed on exit)."""

    def start(done: Done) -> _lease.Pending:
        return _lease._open_session_start(url, ttl, done, label, prefix)

    return OpenSessionAsync(start)


def _check_process_keywords(call: str, wrong: "Mapping[str, object]") -> None:
    if not wrong:
        return
    name = sorted(wrong)[0]
    hint = _NOT_ON_A_SESSION.get(name)
    if hint is not None:
        raise TypeError(f"{call}() got an unexpected keyword argument {name!r}: {hint}")
    from . import _no_such_keywords

    _no_such_keywords(call, wrong, _PROCESS_KEYWORDS)


def _process_options(
    ttl: Seconds,
    wait: Optional[Seconds],
    label: Optional[str],
    data: Optional[str],
    unavailable_timeout: Optional[Seconds],
    shared: bool,
    permits: Optional[int],
    scope: Optional[str],
    range: Optional[Tuple[int, int]],
    queue: bool,
    poll: Optional[Seconds],
    wake_hints: Optional[WakeHints],
    priority: int,
) -> _lease.Options:
    if queue is not True:
        raise InvalidArgument(
            f"queue={queue!r}: a grant on the process's session is always queued (leave "
            "queue= out); for a plain lease, use lease.acquire(url)"
        )
    return _lease.Options(
        ttl=ttl, wait=wait, label=label, data=data, unavailable_timeout=unavailable_timeout,
        shared=shared, permits=permits, scope=scope, range=range, queue=True, poll=poll,
        wake_hints=wake_hints, priority=priority,
    )


def _process_grant(got: Tuple[_lease.GrantCore, _lease.SessionCore]) -> SharedGrant:
    core, session_core = got
    sid = session_core.sid
    session = _process_sessions.get(sid)
    if session is None:
        session = Session(session_core)
        _process_sessions[sid] = session
    return SharedGrant(core, session)


def acquire_on_process_session(
    url: URL,
    *,
    ttl: Seconds = 30,
    wait: Optional[Seconds] = None,
    label: Optional[str] = None,
    data: Optional[str] = None,
    unavailable_timeout: Optional[Seconds] = None,
    shared: bool = False,
    permits: Optional[int] = None,
    scope: Optional[str] = None,
    range: Optional[Tuple[int, int]] = None,
    queue: bool = True,
    poll: Optional[Seconds] = None,
    wake_hints: Optional[WakeHints] = None,
    priority: int = 0,
    **wrong: NoReturn,
) -> SharedGrant:
    """Acquire the queued lock at ``url`` through this process's shared session for its store
    and ``ttl`` (docs/protocol.md §10, "Shared sessions", *Per-process default*): one session
    record (``.lease-sessions/SID`` at the store's root) and one renewal every ``ttl/3`` for
    every grant this process holds or waits for this way, opened on first use, released and
    deleted by itself one ttl after its last grant is released, and opened afresh by the next
    acquisition (also after its loss, or in a forked child). Waits as :func:`lease.acquire`
    does (``wait``; the GIL released, Ctrl-C interrupts and leaves the queue).

    Returns the :class:`SharedGrant` that :meth:`Session.acquire` returns (its
    :attr:`~SharedGrant.session` is the process's, which takes no ``acquire`` or ``close``).
    The keywords are :func:`lease.acquire`'s that apply to a queued lock; ``queue`` is implied;
    ``ttl`` (default 30 s) chooses the session (one per ttl); ``data=`` raises
    :class:`InvalidArgument` (a session's record is the process's); ``label`` is the grant's
    entry's."""
    _check_process_keywords("acquire_on_process_session", wrong)
    options = _process_options(ttl, wait, label, data, unavailable_timeout, shared, permits,
                               scope, range, queue, poll, wake_hints, priority)
    return _process_grant(_lease._acquire_on_process_session(url, options))


async def acquire_on_process_session_async(
    url: URL,
    *,
    ttl: Seconds = 30,
    wait: Optional[Seconds] = None,
    label: Optional[str] = None,
    data: Optional[str] = None,
    unavailable_timeout: Optional[Seconds] = None,
    shared: bool = False,
    permits: Optional[int] = None,
    scope: Optional[str] = None,
    range: Optional[Tuple[int, int]] = None,
    queue: bool = True,
    poll: Optional[Seconds] = None,
    wake_hints: Optional[WakeHints] = None,
    priority: int = 0,
    **wrong: NoReturn,
) -> SharedGrant:
    """:func:`acquire_on_process_session` for asyncio. Cancelling the task stops a waiting
    request: it leaves the lock's queue and the session."""
    _check_process_keywords("acquire_on_process_session_async", wrong)
    options = _process_options(ttl, wait, label, data, unavailable_timeout, shared, permits,
                               scope, range, queue, poll, wake_hints, priority)
    got: Tuple[_lease.GrantCore, _lease.SessionCore] = await await_core(
        lambda done: _lease._acquire_on_process_session_start(url, options, done))
    return _process_grant(got)


@_atexit.register
def _close_at_exit() -> None:
    # Close what is still open, so the locks' waiters need not wait out the ttl: the sessions
    # opened here, and the process's sessions with a grant still referenced.
    for session in list(_open):
        try:
            session.close()
        except BaseException:  # noqa: BLE001 - best effort at exit
            pass
    for session in list(_process_sessions.values()):
        try:
            session._s._close_at_exit()
        except BaseException:  # noqa: BLE001 - best effort at exit
            pass
