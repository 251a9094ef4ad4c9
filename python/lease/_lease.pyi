# Type stubs of the Rust extension module `lease._lease` (python/src/).
import datetime
import ipaddress
import os
import threading
from typing import Any, Awaitable, Callable, Dict, List, Literal, Optional, Tuple, Union, final

from ._errors import LeaseError, LeaseLost
from ._types import FencedObject, Grant, HealthEvent, Holder, YieldRequest, YieldRequested

__version__: str

_URL = Union[str, "os.PathLike[str]"]
_Seconds = Union[int, float, datetime.timedelta, str]
_Done = Callable[[bool, Any], None]
_OnLost = Optional[Callable[[LeaseLost], object]]
_OnYield = Optional[Callable[[YieldRequested], object]]
_Data = Union[bytes, bytearray, str]

@final
class Options:
    """The options of an acquisition, checked once (``lease.acquire``'s keywords)."""

    def __init__(
        self,
        *,
        ttl: _Seconds,
        wait: Optional[_Seconds] = None,
        label: Optional[str] = None,
        data: Optional[str] = None,
        on_lost: _OnLost = None,
        on_yield: _OnYield = None,
        unavailable_timeout: Optional[_Seconds] = None,
        shared: Optional[bool] = None,
        permits: Optional[int] = None,
        scope: Optional[str] = None,
        range: Optional[Tuple[int, int]] = None,
        queue: Optional[bool] = None,
        poll: Optional[_Seconds] = None,
        wake_hints: Optional[Union[str, ipaddress.IPv4Address, ipaddress.IPv6Address]] = None,
        priority: Optional[int] = None,
        ask_yield: Optional[bool] = None,
        yield_reason: Optional[str] = None,
        preempt: Optional[Literal["every-effect-fenced", "never"]] = None,
    ) -> None: ...

@final
class Pending:
    def cancel(self) -> None: ...

@final
class Lease:
    """A held lease. Use it as a context manager (``with`` / ``async with``) or call
    :meth:`release`. Clones do not exist: one object per acquisition."""

    @property
    def epoch(self) -> int:
        """The fencing token: strictly increasing per lease, unchanged by renewals."""
    @property
    def url(self) -> str: ...
    @property
    def token(self) -> str:
        """``URL#EPOCH@HOLDER`` (for a queued lock's shared or scoped grant followed by
        ``;shared``, ``;path=P``, ``;range=A..B``), to hand to resources that check it
        (:func:`lease.parse_token` takes it apart)."""
    @property
    def grant(self) -> Optional[Grant]:
        """The grant of a queued lock (mode, token, scope, range, permits); ``None`` for a
        lease."""
    @property
    def holder(self) -> Holder: ...
    @property
    def ttl(self) -> float: ...
    @property
    def held(self) -> bool: ...
    @property
    def lost(self) -> threading.Event:
        """Set when the lease is lost (not when it is released)."""
    @property
    def lost_reason(self) -> Optional[str]: ...
    def remaining(self) -> float:
        """Seconds this holder may still rely on the lease (0.0 once lost or released)."""
    def ensure_held(self, min_remaining: Optional[_Seconds] = None) -> float:
        """The seconds left if at least ``min_remaining``; else raises :class:`LeaseLost`."""
    def on_lost(self, callback: Callable[[LeaseLost], object]) -> None: ...
    @property
    def yield_requested(self) -> Optional[YieldRequested]:
        """The latest yield request that named this lease's grant, or None (not a loss)."""
    @property
    def health(self) -> str:
        """"healthy", "late", "unknown" or "lost" (docs/protocol.md §4)."""
    def on_health(self, callback: Callable[[HealthEvent], object]) -> None:
        """Call ``callback`` with the current health, then at each change."""
    def fenced_put(
        self,
        key: str,
        data: _Data,
        *,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> str:
        """Write ``data`` (a ``str`` is written as UTF-8) at ``key`` in this lease's store
        (``key`` read like a relative path from the lease's directory: ``x`` beside the lease,
        ``../x`` one level up, ``/x`` from the store's root), stamped with this lease, epoch
        and holder, unless a holder with a higher epoch (or
        another lease) wrote it: then raise :class:`Fenced`, whose ``epoch`` is the newer one.
        Returns the object's new version (what :func:`lease.fenced_get` reports as
        ``version``).

        ``if_version=obj.version`` writes only if the object is still at the version read
        (``if_absent=True``: only if it does not exist); otherwise :class:`Conflict` (read
        again and decide again). Not both. Without them the write does not look at what is
        there: ``fenced_get`` + plain ``fenced_put`` is not atomic (see :meth:`fenced_update`).
        """
    def fenced_update(
        self, key: str, f: Callable[[Optional[FencedObject]], _Data]
    ) -> str:
        """Read-modify-write ``key`` without losing updates: ``f`` gets the object now (a
        :class:`FencedObject`, or ``None``) and returns the new contents, written only if
        nobody wrote in between; on a :class:`Conflict` it reads and calls ``f`` again (up to
        32 times, with a short random pause; then :class:`StoreUnavailable`). ``f`` runs on
        the calling thread and may be called more than once: keep it free of side effects.
        Raises :class:`Fenced` when a newer holder wrote the object. Returns the new
        version."""
    async def fenced_update_async(
        self,
        key: str,
        f: Callable[[Optional[FencedObject]], Union[_Data, Awaitable[_Data]]],
    ) -> str:
        """:meth:`fenced_update` for asyncio; ``f`` may be a plain or an async function."""
    def fenced_read(self, key: str) -> Optional[FencedObject]:
        """Read ``key`` (placed as :meth:`fenced_put` places it) and fence it with this
        lease's token: from then on no holder whose grant ended before this one began can
        change it, so a reader (a shared grant) sees its data stay while it holds, whatever a
        stale writer does. The first read of an object under a grant writes it back unchanged
        with this token in its metadata (1 GET + 1 PUT); reading it again costs 1 GET. Where
        nothing is, it leaves an empty marker that fenced reads see as ``None``. Raises
        :class:`Fenced` when a later conflicting grant wrote or fenced it (this grant has
        ended)."""
    async def fenced_read_async(self, key: str) -> Optional[FencedObject]: ...
    def _fenced_read_start(self, key: str, done: _Done) -> Pending: ...
    def fenced_delete(self, key: str) -> bool:
        """Delete ``key`` unless a newer holder wrote it (:class:`Fenced`); ``False`` when
        there was nothing to delete. :class:`StoreError` on stores without conditional
        deletes."""
    async def fenced_put_async(
        self,
        key: str,
        data: _Data,
        *,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> str: ...
    async def fenced_delete_async(self, key: str) -> bool: ...
    def _fenced_put_start(
        self,
        key: str,
        data: _Data,
        done: _Done,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> Pending: ...
    def _fenced_delete_start(self, key: str, done: _Done) -> Pending: ...
    def _fenced_get(self, key: str) -> Optional[Dict[str, Any]]: ...
    def _fenced_get_start(self, key: str, done: _Done) -> Pending: ...
    def renew(self) -> float: ...
    def set_ttl(self, ttl: _Seconds) -> float:
        """Change the lease's ttl (redis-py's ``extend``, with the new ttl whole): a renewal made
        at once writes it, and the renewals after it follow it. Returns the seconds left.
        Raises :class:`InvalidArgument` (out of range; a queued lock's grant keeps its ttl) or
        :class:`LeaseLost`."""
    def set_data(self, data: Optional[str]) -> float:
        """Change the data stored in the lease's record (etcd's ``Proclaim``; ``None`` removes
        it): a renewal made at once writes it. Returns the seconds left."""
    async def set_ttl_async(self, ttl: _Seconds) -> float:
        """:meth:`set_ttl` for asyncio."""
    async def set_data_async(self, data: Optional[str]) -> float:
        """:meth:`set_data` for asyncio."""
    def _set_ttl_start(self, ttl: _Seconds, done: _Done) -> Pending: ...
    def _set_data_start(self, data: Optional[str], done: _Done) -> Pending: ...
    def release(self) -> None: ...
    async def release_async(self) -> None: ...
    def _release_start(self, done: _Done) -> Pending: ...
    def _release_background(self) -> None: ...
    def _exit_outcome(
        self, exc_value: Optional[BaseException], release_error: Optional[LeaseError]
    ) -> bool: ...
    def __enter__(self) -> "Lease": ...
    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> bool: ...
    async def __aenter__(self) -> "Lease": ...
    async def __aexit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> bool: ...

@final
class SessionCore:
    """A shared session (``lease.Session`` wraps it)."""

    @property
    def sid(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def store(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def alive(self) -> bool: ...
    @property
    def attached(self) -> int: ...
    @property
    def lost_reason(self) -> Optional[str]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def process(self) -> bool: ...
    def acquire(self, target: _URL, options: Options) -> GrantCore: ...
    def _acquire_start(self, target: _URL, options: Options, done: _Done) -> Pending: ...
    def close(self) -> None: ...
    def _close_at_exit(self) -> None: ...
    def _close_start(self, done: _Done) -> Pending: ...

@final
class GrantCore:
    """A grant held through a shared session (``lease.SharedGrant`` wraps it)."""

    @property
    def epoch(self) -> int: ...
    @property
    def token(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def grant(self) -> Grant: ...
    @property
    def held(self) -> bool: ...
    @property
    def lost_reason(self) -> Optional[str]: ...
    @property
    def lost_kind(self) -> Optional[str]: ...
    @property
    def yield_requested(self) -> Optional[YieldRequested]: ...
    def ensure_held(self) -> None: ...
    def fenced_put(
        self,
        key: str,
        data: _Data,
        *,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> str: ...
    def _fenced_put_start(
        self,
        key: str,
        data: _Data,
        done: _Done,
        if_version: Optional[str] = None,
        if_absent: Optional[bool] = None,
    ) -> Pending: ...
    def _fenced_get(self, key: str) -> Optional[Dict[str, Any]]: ...
    def _fenced_get_start(self, key: str, done: _Done) -> Pending: ...
    def fenced_read(self, key: str) -> Optional[FencedObject]: ...
    def _fenced_read_start(self, key: str, done: _Done) -> Pending: ...
    def fenced_delete(self, key: str) -> bool: ...
    def _fenced_delete_start(self, key: str, done: _Done) -> Pending: ...
    def release(self) -> None: ...
    def _release_start(self, done: _Done) -> Pending: ...
    def _release_background(self) -> None: ...

def _open_session(
    url: _URL, ttl: _Seconds, label: Optional[str] = None, prefix: Optional[str] = None
) -> SessionCore: ...
def _open_session_start(
    url: _URL,
    ttl: _Seconds,
    done: _Done,
    label: Optional[str] = None,
    prefix: Optional[str] = None,
) -> Pending: ...
def _acquire_on_process_session(
    url: _URL, options: Options
) -> Tuple[GrantCore, SessionCore]: ...
def _acquire_on_process_session_start(url: _URL, options: Options, done: _Done) -> Pending: ...

@final
class Watch:
    def __init__(self, url: _URL, poll: Optional[_Seconds] = None) -> None: ...
    def next(self) -> Dict[str, Any]: ...
    def _next_start(self, done: _Done) -> Pending: ...

@final
class LeaderStream:
    def next(self) -> Optional[Dict[str, Any]]: ...
    def _next_start(self, done: _Done) -> Pending: ...

@final
class ElectionCore:
    def __init__(self, url: _URL, options: Options) -> None: ...
    @property
    def url(self) -> str: ...
    def campaign(self) -> Lease: ...
    def _campaign_start(self, done: _Done) -> Pending: ...
    def resign(self) -> None: ...
    def _resign_start(self, done: _Done) -> Pending: ...
    def lease(self) -> Optional[Lease]: ...
    def leader(self) -> Optional[Dict[str, Any]]: ...
    def _leader_start(self, done: _Done) -> Pending: ...
    def observe(self, poll: Optional[_Seconds] = None) -> LeaderStream: ...

@final
class GateCore:
    def __init__(self, store: Optional[_URL] = None, prefix: Optional[str] = None) -> None: ...
    def admit(self, resource: str, token: str) -> None: ...
    def _admit_start(self, resource: str, token: str, done: _Done) -> Pending: ...
    @property
    def description(self) -> str: ...

def _fenced_get(url: _URL, key: Optional[str] = None) -> Optional[Dict[str, Any]]: ...
def _fenced_get_start(url: _URL, key: Optional[str], done: _Done) -> Pending: ...
def _acquire(url: _URL, options: Options) -> Lease: ...
def _try_acquire(url: _URL, options: Options) -> Optional[Lease]: ...
def _acquire_start(url: _URL, options: Options, done: _Done, owner: str) -> Pending: ...
def _seconds(name: str, value: object) -> float: ...
def _status(url: _URL) -> Dict[str, Any]: ...
def _status_start(url: _URL, done: _Done) -> Pending: ...
def _ask_yield(
    url: _URL, to: Optional[str] = None, reason: Optional[str] = None, by: Optional[str] = None
) -> Optional[YieldRequest]: ...
def _ask_yield_start(
    url: _URL,
    done: _Done,
    to: Optional[str] = None,
    reason: Optional[str] = None,
    by: Optional[str] = None,
) -> Pending: ...
def _error_for_kind(
    kind: str,
    message: str,
    url: Optional[str] = None,
    epoch: Optional[int] = None,
    holder_id: Optional[str] = None,
) -> LeaseError: ...
def _error_kinds() -> List[str]: ...
def _parse_token(
    token: str,
) -> Tuple[str, int, Optional[str], bool, Optional[str], Optional[Tuple[int, int]]]: ...
def _shutdown() -> None: ...
def _refresh_log_level() -> None: ...
def _log_through_tracing(level: str, message: str) -> None: ...

def _metrics() -> List[Dict[str, Any]]: ...
def _metrics_text() -> str: ...
