"""Plain values: who holds a lease, what a lease looks like from outside, who leads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, NamedTuple, Optional, Tuple

#: What a lease looks like from outside (``Status.state``).
State = Literal["free", "held", "released", "expired", "broken", "corrupt"]


class Holder(NamedTuple):
    """Who holds (or last held) a lease, as written in its record."""

    id: str
    """Random per acquisition: the only field the protocol compares."""
    label: Optional[str] = None
    host: Optional[str] = None
    pid: Optional[int] = None
    user: Optional[str] = None
    client: Optional[str] = None
    """The library and language that wrote the record, e.g. ``lease 0.1.0 (python)``."""

    def describe(self) -> str:
        details = [f"id {self.id[:8]}"]
        if self.host:
            details.append(f"host {self.host}")
        if self.pid is not None:
            details.append(f"pid {self.pid}")
        who = repr(self.label) if self.label else "holder"
        return f"{who} ({', '.join(details)})"


#: A queued lock's grant or request: ``"exclusive"`` (a writer) or ``"shared"`` (a reader).
Mode = Literal["exclusive", "shared"]


def _scope_of(scope: Optional[Dict[str, Any]]) -> Tuple[Optional[str], Optional[Tuple[int, int]]]:
    """The JSON scope (``null``, ``{"path": …}``, ``{"start": …, "end": …}``) as
    ``(scope, range)``, the way ``acquire`` takes them."""
    if scope is None:
        return None, None
    if "path" in scope:
        return str(scope["path"]), None
    return None, (int(scope["start"]), int(scope["end"]))


class Grant(NamedTuple):
    """The grant of a queued lock (``Lease.grant``; ``None`` for a plain lease)."""

    mode: Mode
    token: int
    """The fencing token (``Lease.epoch``): strictly increasing per lock across all modes."""
    scope: Optional[str] = None
    """The path held, or ``None`` (the whole lock, or a byte range)."""
    range: Optional[Tuple[int, int]] = None
    """The bytes ``(start, end)`` held (the end excluded), or ``None``."""
    permits: Optional[int] = None
    """The lock's permits, when it is a semaphore."""


class Participant(NamedTuple):
    """A holder or a waiter of a queued lock (``Status.holders``, ``Status.departing``,
    ``Status.waiting``). Who it is (``holder``'s label, host, pid), ``since`` and ``data`` come
    from its session; ``session`` says what that shows: ``"live"``, ``"expired"``, ``"broken"``,
    ``"released"``, ``"gone"`` or ``"unknown"`` (not read)."""

    holder: Holder
    mode: Mode
    scope: Optional[str]
    range: Optional[Tuple[int, int]]
    token: Optional[int]
    """The grant's fencing token; ``None`` while waiting."""
    ttl: float
    """The ttl of its session, in seconds."""
    since: Optional[str]
    data: Optional[str]
    session: str = "unknown"
    priority: int = 0
    """A waiter's priority among competing waiters (higher goes first); 0 for a grant."""
    passed: int = 0
    """How many later-joined waiters went before this one; at 8 it is due and goes next."""

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Participant":
        scope, rng = _scope_of(d.get("scope"))
        return cls(
            holder=Holder(**d["holder"]),
            mode=d["mode"],
            scope=scope,
            range=rng,
            token=d.get("token"),
            ttl=d["ttl_ms"] / 1000.0,
            since=d.get("since"),
            data=d.get("data"),
            session=d.get("session", "unknown"),
            priority=d.get("priority", 0),
            passed=d.get("passed", 0),
        )


def _participants(items: Optional[List[Dict[str, Any]]]) -> Optional[List[Participant]]:
    return None if items is None else [Participant._from_json(p) for p in items]


def _opt_seconds(ms: Optional[int]) -> Optional[float]:
    return None if ms is None else ms / 1000.0


class Tenure(NamedTuple):
    """One past tenure of a lease: who held it, from when to when, and how it ended: ``end``
    is ``"released"``, ``"expired"`` (taken over after its deadline), ``"broken"`` (by an
    operator, ``by``) or ``"deleted"`` (the record was deleted while held)."""

    epoch: int
    holder: Holder
    acquired_at: Optional[str]
    ended_at: Optional[str]
    end: str
    by: Optional[str]

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Tenure":
        return cls(
            epoch=d["epoch"],
            holder=Holder(**d["holder"]),
            acquired_at=d.get("acquired_at"),
            ended_at=d.get("ended_at"),
            end=d["end"],
            by=d.get("by"),
        )


class HealthEvent(NamedTuple):
    """A change of a held lease's health (:meth:`Lease.on_health`): ``health`` is
    ``"healthy"`` (renewals landing), ``"late"`` (a renewal failed or is slow, the deadline still
    far), ``"unknown"`` (the deadline is near and no renewal landed: act only through fenced
    writes) or ``"lost"``; ``remaining`` the seconds left; ``reason`` why it was lost."""

    health: Literal["healthy", "late", "unknown", "lost"]
    remaining: float
    reason: Optional[str]


@dataclass(frozen=True)
class Status:
    """A snapshot of a lease, as ``lease.status(url)`` and ``lease.watch(url)`` return it.

    ``state`` is ``"free"`` (no record), ``"held"``, ``"released"``, ``"expired"`` (held, but
    by the store's clock older than its ttl + grace + the clock's resolution: a waiter may take
    it over now), ``"broken"`` (broken by an operator with ``lease break``: nobody takes it until
    the broken holder's deadline has surely passed, or that holder releases) or ``"corrupt"``.
    ``expires_in`` is the time until a waiter may take the lease over (ttl + grace + resolution
    after the last write, by the store's clock); the holder itself stops relying on it sooner.
    Durations are in seconds; :meth:`to_json` gives the exact JSON shape of
    ``lease status --json`` (``ttl_ms``, ``expires_in_ms``).

    For a queued lock (shared, permits, scopes: docs/protocol.md §10) ``holders`` lists the
    grants in the order granted (those whose sessions are live), ``departing`` the grants still
    listed whose sessions show they hold no more (expired, broken, released: the waiters remove
    them), ``waiting`` the waiters in arrival order, and ``permits`` the semaphore's size; all
    four are ``None`` for a plain lease.
    """

    url: str
    state: State
    epoch: Optional[int]
    holder: Optional[Holder]
    ttl: Optional[float]
    expires_in: Optional[float]
    data: Optional[str]
    acquired_at: Optional[str]
    renewed_at: Optional[str]
    detail: Optional[str]
    permits: Optional[int]
    holders: Optional[List[Participant]]
    waiting: Optional[List[Participant]]
    json: Dict[str, Any] = field(repr=False, compare=False)
    departing: Optional[List[Participant]] = None
    #: The tenures before the current one, most recent first (at most 10; docs/protocol.md §3).
    history: List["Tenure"] = field(default_factory=list)

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Status":
        h = d.get("holder")
        return cls(
            url=d["url"],
            state=d["state"],
            epoch=d.get("epoch"),
            holder=Holder(**h) if h is not None else None,
            ttl=_opt_seconds(d.get("ttl_ms")),
            expires_in=_opt_seconds(d.get("expires_in_ms")),
            data=d.get("data"),
            acquired_at=d.get("acquired_at"),
            renewed_at=d.get("renewed_at"),
            detail=d.get("detail"),
            permits=d.get("permits"),
            holders=_participants(d.get("holders")),
            waiting=_participants(d.get("waiting")),
            json=d,
            departing=_participants(d.get("departing")),
            history=[Tenure._from_json(t) for t in d.get("history") or []],
        )

    @property
    def held(self) -> bool:
        return self.state == "held"

    def to_json(self) -> Dict[str, Any]:
        """The dict of ``lease status --json`` (a copy)."""
        return dict(self.json)


class Leader(NamedTuple):
    """The leader of an election: its holder record, epoch (its fencing token) and data."""

    holder: Holder
    epoch: int
    data: Optional[str]

    @classmethod
    def _from_dict(cls, d: Optional[Dict[str, Any]]) -> Optional["Leader"]:
        if d is None:
            return None
        return cls(holder=Holder(**d["holder"]), epoch=d["epoch"], data=d.get("data"))


@dataclass(frozen=True)
class FencedObject:
    """An object read by :func:`lease.fenced_get`, with the epoch, lease and holder of the
    fenced write that wrote it (``None`` for those when something other than a fenced write
    wrote it)."""

    url: str
    """The object's URL."""
    data: bytes
    """Its contents."""
    epoch: Optional[int]
    """The writer's epoch (its fencing token)."""
    lease: Optional[str]
    """The URL of the lease the writer held."""
    version: str
    """The object's version (ETag on S3, a content hash on the file store): what
    :meth:`lease.Lease.fenced_put` returned for the write that produced it, and what
    ``fenced_put(..., if_version=...)`` takes to write only if nobody wrote since."""
    holder: Optional[str] = None
    """The holder id of the writer (``Lease.holder.id``)."""

    @classmethod
    def _from_dict(cls, d: Optional[Dict[str, Any]]) -> Optional["FencedObject"]:
        if d is None:
            return None
        return cls(
            url=d["url"],
            data=d["data"],
            epoch=d["epoch"],
            lease=d["lease"],
            version=d["version"],
            holder=d.get("holder"),
        )

    @property
    def text(self) -> str:
        """``data`` decoded as UTF-8 (raises ``UnicodeDecodeError`` if it is not)."""
        return self.data.decode("utf-8")


class _TokenParts(NamedTuple):
    lease: str
    """The lease's URL."""
    epoch: int
    """The holder's epoch."""
    holder: Optional[str]
    """The holder id (``Lease.holder.id``); ``None`` for a token without one (``URL#EPOCH``)."""


class Token(_TokenParts):
    """A fencing token taken apart (:func:`lease.parse_token`): ``URL#EPOCH@HOLDER``, and for
    a queued lock's shared or scoped grant ``;shared``, ``;path=P`` or ``;range=A..B`` after
    it (what the token fences depends on them: docs/protocol.md §7).

    Still the tuple ``(lease, epoch, holder)`` it always was (it unpacks and compares as
    before); ``shared``, ``scope`` and ``range`` are attributes beside it."""

    shared: bool
    """A shared grant's token (a reader's, or a permit's)."""
    scope: Optional[str]
    """The path the grant holds, or ``None`` (the whole lock, or a byte range)."""
    range: Optional[Tuple[int, int]]
    """The bytes ``(start, end)`` the grant holds (the end excluded), or ``None``."""

    def __new__(
        cls,
        lease: str,
        epoch: int,
        holder: Optional[str],
        shared: bool = False,
        scope: Optional[str] = None,
        range: Optional[Tuple[int, int]] = None,  # noqa: A002 - the name `acquire` takes
    ) -> "Token":
        self = super().__new__(cls, lease, epoch, holder)
        self.shared = shared
        self.scope = scope
        self.range = range
        return self

    def _grant(self) -> Tuple[bool, Optional[str], Optional[Tuple[int, int]]]:
        return (self.shared, self.scope, self.range)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Token) and self._grant() != other._grant():
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((tuple(self), self._grant()))

    def __repr__(self) -> str:
        more = "".join(
            f", {k}={v!r}"
            for k, v in (("shared", self.shared), ("scope", self.scope), ("range", self.range))
            if v
        )
        return f"Token(lease={self.lease!r}, epoch={self.epoch!r}, holder={self.holder!r}{more})"


class YieldRequested(NamedTuple):
    """What a holder of a queued lock is told when asked to step aside (docs/protocol.md §10,
    "Yield on request"): not a loss, the lease stays held until it is released."""

    by: str
    """Who asks: a waiter's id, or an operator's label (``user@host``)."""
    to: Optional[str] = None
    """The waiting participant's id that should go next, if the asker named one."""
    reason: Optional[str] = None


class YieldRequest(NamedTuple):
    """A yield request as it stands in the lock's record (what :func:`lease.ask_yield` returns)."""

    tokens: List[int]
    """The tokens of the grants asked, ascending."""
    by: str
    to: Optional[str] = None
    reason: Optional[str] = None
