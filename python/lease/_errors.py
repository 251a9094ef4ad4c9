"""The exception classes. The Rust extension maps the core's error kinds onto them in one
place (python/src/error.rs); every exception carries the lease URL and, where known, the
holder in the way and the epoch involved."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ._types import Holder

__all__ = [
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
]


class LeaseError(Exception):
    """Base class of every error raised by this library.

    Attributes: ``url`` (the lease, when known), ``holder`` (a :class:`Holder`, when another
    holder was in the way or took over), ``epoch`` (the epoch involved, when known), ``kind``
    (the core's stable kind name: ``"held"``, ``"timeout"``, ``"lost"``, …) and ``retryable``
    (repeating the same call later may succeed).
    """

    url: Optional[str]
    holder: Optional[Holder]
    epoch: Optional[int]
    kind: str

    def __init__(
        self,
        message: str,
        url: Optional[str] = None,
        holder: Optional[Mapping[str, Any]] = None,
        epoch: Optional[int] = None,
        kind: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.holder = Holder(**holder) if holder is not None else None
        self.epoch = epoch
        self.kind = kind if kind is not None else _DEFAULT_KIND.get(type(self).__name__, "internal")

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    @property
    def retryable(self) -> bool:
        return self.kind in ("unavailable", "held", "timeout", "queue_full")

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        # Picklable (multiprocessing sends exceptions between processes).
        holder = None if self.holder is None else self.holder._asdict()
        return (type(self), (self.message, self.url, holder, self.epoch, self.kind))


class LeaseHeld(LeaseError):
    """The lease is held by another holder and the call was asked not to wait (``wait=0``)."""


class LeaseTimeout(LeaseError, TimeoutError):
    """The wait for the lease ran out (``wait=SECONDS``). Also a :class:`TimeoutError`."""


class LeaseCancelled(LeaseError):
    """A waiting call was cancelled. (Ctrl-C raises ``KeyboardInterrupt`` and asyncio
    cancellation ``asyncio.CancelledError`` instead, as Python code expects.)"""


class LeaseLost(LeaseError):
    """The lease was lost (taken over, broken by an operator, expired without renewal, or its
    record deleted), or is not held long enough for ``ensure_held(min_remaining)``."""


class Fenced(LeaseError):
    """A write carried an epoch lower than one already recorded: a newer holder exists."""


class Conflict(LeaseError):
    """A version-conditional fenced write (``fenced_put(..., if_version=...)`` or
    ``if_absent=True``) found the object changed since that version (or created since it was
    found absent) by a holder of the same or a lower epoch: read it again and decide again.
    (A change by a newer epoch is :class:`Fenced`.) :meth:`Lease.fenced_update` does that
    for you."""


class StoreError(LeaseError):
    """A permanent store problem: permissions, a missing bucket or directory, missing
    credentials, a store that does not honour conditional writes."""


class StoreUnavailable(StoreError):
    """The store is unreachable or overloaded; the same call may succeed later."""


class InvalidArgument(LeaseError, ValueError):
    """Bad input: URL, name, ttl, option. Also a :class:`ValueError`."""


class CorruptRecord(LeaseError):
    """A stored object could not be understood as a lease record."""


class InternalError(LeaseError):
    """A bug in this library."""


class QueueFull(LeaseError):
    """A queued lock's record has no room for another participant (its size limit, stated in
    the message, is reached): nothing was written; the same call may succeed once others have
    left."""


class UnsupportedRecord(LeaseError):
    """A stored record was written by a newer version of this library (a format, mode or feature
    this version does not know, named in the message): it is never taken over or written over.
    Upgrade this client."""


_DEFAULT_KIND = {
    "LeaseHeld": "held",
    "LeaseTimeout": "timeout",
    "LeaseCancelled": "cancelled",
    "LeaseLost": "lost",
    "Fenced": "fenced",
    "Conflict": "conflict",
    "StoreError": "store",
    "StoreUnavailable": "unavailable",
    "InvalidArgument": "invalid",
    "CorruptRecord": "corrupt",
    "InternalError": "internal",
    "QueueFull": "queue_full",
    "UnsupportedRecord": "unsupported",
}
