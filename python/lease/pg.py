"""Fencing at a PostgreSQL database: a lease holder's token checked and recorded inside the
holder's own transaction (docs/postgres.md).

``fence(conn, resource, token)`` admits ``token`` for ``resource`` in the transaction open on
``conn``, or raises :class:`lease.Fenced` once a newer holder of ``resource`` has been admitted
(or another holder with the same epoch, or another lease's token). It holds the resource's row
lock until the transaction ends, so a later holder's admission waits for this transaction, and
every read after the fence sees every earlier fenced write::

    import lease, lease.pg, psycopg

    with lease.acquire(url, ttl=30) as l, psycopg.connect(dsn) as conn:
        with conn.transaction():
            lease.pg.fence(conn, "jobs", l.token)
            conn.execute("UPDATE counters SET n = n + 1 WHERE name = 'jobs'")

Drivers: psycopg 3 (``Connection`` or ``Cursor``; ``fence_async`` takes an ``AsyncConnection``
or ``AsyncCursor``) and asyncpg (``fence_async`` on a ``Connection``): ``pip install
'bucket-lease[postgres]'`` or ``'bucket-lease[asyncpg]'``. The helpers use the caller's
connection and never open one. Pure Python: the SQL is ``lease/lease_fence.sql``.

Errors: SQLSTATE LF001 is :class:`lease.Fenced` (``.epoch``: the admitted epoch), LF002
:class:`lease.InvalidArgument`, 40001/40P01 (serialization failure, deadlock: run the
transaction again) :class:`lease.Conflict`, 55P03 (``lock_wait`` ran out)
:class:`lease.LeaseTimeout`, a missing ``lease_fence`` :class:`lease.StoreError`; each with the
driver's exception as ``__cause__``. Other driver errors (a lost connection) propagate as they are.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Optional, Union

from ._errors import Conflict, Fenced, InvalidArgument, LeaseError, LeaseTimeout, StoreError

__all__ = ["SCHEMA", "fence", "fence_async", "migrate", "migrate_async", "error_from"]

#: The one SQL definition of database fencing: the ``lease_fence`` table and function.
SCHEMA: str = resources.files("lease").joinpath("lease_fence.sql").read_text(encoding="utf-8")

_PSYCOPG = "SELECT lease_fence(%s, %s, %s::text::interval, %s::text::interval)"
_ASYNCPG = "SELECT lease_fence($1, $2, $3::text::interval, $4::text::interval)"


def _token_text(token: Any) -> str:
    """A token string, from a string or anything with a ``token`` string (a ``Lease``)."""
    if isinstance(token, str):
        return token
    t = getattr(token, "token", None)
    if isinstance(t, str):
        return t
    raise TypeError(f"token must be a token string (URL#EPOCH@HOLDER) or a Lease, not {type(token).__name__}")


def _interval(seconds: Optional[float], what: str) -> Optional[str]:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if not seconds >= 0:
        raise InvalidArgument(f"{what} must be >= 0 seconds, not {seconds}")
    return f"{round(seconds * 1000)} milliseconds"


def _lease_of(token: str) -> Optional[str]:
    return token.rsplit("#", 1)[0] if "#" in token else None


def _admitted_epoch(detail: Optional[str]) -> Optional[int]:
    if not detail or not detail.startswith("admitted: "):
        return None
    tail = detail.rsplit("#", 1)[-1].split("@", 1)[0]
    return int(tail) if tail.isdigit() else None


def error_from(exc: BaseException, token: Optional[str] = None) -> Optional[LeaseError]:
    """The library's exception for a psycopg or asyncpg error of a fenced transaction, or
    ``None`` when it is none of the kinds fencing maps (then handle the driver's own).
    Use it on the other statements too: a COMMIT that fails with a serialization failure is
    a :class:`lease.Conflict`."""
    code = getattr(exc, "sqlstate", None)
    if not isinstance(code, str):
        return None
    diag = getattr(exc, "diag", None)  # psycopg
    message = (diag.message_primary if diag is not None else getattr(exc, "message", None)) or str(exc)
    detail = diag.message_detail if diag is not None else getattr(exc, "detail", None)
    url = _lease_of(token) if token else None
    if code == "LF001":
        return Fenced(f"{message} (SQLSTATE {code})", url=url, epoch=_admitted_epoch(detail))
    if code == "LF002":
        return InvalidArgument(f"{message} (SQLSTATE {code})", url=url)
    if code in ("40001", "40P01"):
        return Conflict(f"{message} (SQLSTATE {code}): roll back and run the transaction again", url=url)
    if code == "55P03":
        return LeaseTimeout(
            f"{message} (SQLSTATE {code}): an earlier holder's transaction still holds the resource;"
            " retry later", url=url)
    if code in ("42883", "42P01") and "lease_fence" in message:
        return StoreError(
            f"{message} (SQLSTATE {code}): lease_fence is not installed in this database: run"
            " lease.pg.migrate(conn) or `psql -X -1 -f lease_fence.sql`", url=url)
    return None


def _raise_mapped(exc: BaseException, token: Optional[str]) -> None:
    mapped = error_from(exc, token)
    if mapped is not None:
        raise mapped from exc
    raise exc


def _is_asyncpg(conn: Any) -> bool:
    return type(conn).__module__.split(".")[0] == "asyncpg"


def _psycopg_connection(conn: Any) -> Any:
    return getattr(conn, "connection", conn)  # a cursor's connection, or the connection


def _check_in_transaction(conn: Any) -> None:
    """A fence outside a transaction protects nothing: its lock would end with its statement."""
    if _is_asyncpg(conn):
        if not conn.is_in_transaction():
            raise InvalidArgument("lease.pg.fence: no transaction is open on this asyncpg connection:"
                                  " call it inside `async with conn.transaction():`")
        return
    c = _psycopg_connection(conn)
    if getattr(c, "autocommit", False) and c.info.transaction_status == 0:  # IDLE
        raise InvalidArgument("lease.pg.fence: this psycopg connection is in autocommit mode with no"
                              " transaction open: call it inside `with conn.transaction():`")


def fence(conn: Any, resource: str, token: Union[str, Any], *, lock_wait: Optional[float] = None,
          idle_timeout: Optional[float] = None) -> None:
    """Admit ``token`` for ``resource`` in the transaction open on ``conn`` (a psycopg
    ``Connection`` or ``Cursor``), or raise :class:`lease.Fenced`.

    ``lock_wait`` (seconds): wait at most this long for an earlier holder's transaction that
    holds the resource (default: the session's ``lock_timeout``, usually forever), then
    :class:`lease.LeaseTimeout`; ``0`` tries once. ``idle_timeout`` (seconds): the server ends
    this session once it has been idle in this transaction that long, so a paused holder cannot
    block the resource longer (its transaction is rolled back). Call it at the top of the
    transaction, not inside a savepoint you may roll back."""
    if not isinstance(resource, str):
        raise TypeError(f"resource must be a str, not {type(resource).__name__}")
    t = _token_text(token)
    params = (resource, t, _interval(lock_wait, "lock_wait"), _interval(idle_timeout, "idle_timeout"))
    _check_in_transaction(conn)
    try:
        conn.execute(_PSYCOPG, params)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised unchanged
        _raise_mapped(exc, t)


async def fence_async(conn: Any, resource: str, token: Union[str, Any], *,
                      lock_wait: Optional[float] = None, idle_timeout: Optional[float] = None) -> None:
    """:func:`fence` for asyncio: a psycopg ``AsyncConnection`` or ``AsyncCursor``, or an
    asyncpg ``Connection`` (inside ``async with conn.transaction():``)."""
    if not isinstance(resource, str):
        raise TypeError(f"resource must be a str, not {type(resource).__name__}")
    t = _token_text(token)
    wait, idle = _interval(lock_wait, "lock_wait"), _interval(idle_timeout, "idle_timeout")
    _check_in_transaction(conn)
    try:
        if _is_asyncpg(conn):
            await conn.execute(_ASYNCPG, resource, t, wait, idle)
        else:
            await conn.execute(_PSYCOPG, (resource, t, wait, idle))
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised unchanged
        _raise_mapped(exc, t)


def migrate(conn: Any) -> None:
    """Install (or upgrade) the ``lease_fence`` table and function on a psycopg connection, in
    the first schema of its search_path, in one transaction (a savepoint if one is open). Safe
    to run from many processes at once."""
    with conn.transaction():
        conn.execute(SCHEMA)


async def migrate_async(conn: Any) -> None:
    """:func:`migrate` for a psycopg ``AsyncConnection`` or an asyncpg ``Connection``."""
    async with conn.transaction():
        await conn.execute(SCHEMA)
