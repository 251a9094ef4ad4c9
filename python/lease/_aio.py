"""asyncio bridging: core operations run on the library's runtime and settle an
``asyncio.Future`` through ``loop.call_soon_threadsafe``; the event loop never blocks.
Cancelling the awaiting task cancels the core operation (an acquire whose write already
landed releases what it got)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Generator, Optional, Type, Union

from ._errors import LeaseError
from ._types import FencedObject

if TYPE_CHECKING:
    from ._lease import GrantCore, Lease, Pending

    #: What fences: a lease, or a grant held through a shared session.
    Fences = Union[Lease, GrantCore]

Done = Callable[[bool, Any], None]


def task_owner() -> str:
    """The asyncio task that awaits an acquisition, as its owner: acquiring what the same task
    holds fails at once (``LeaseHeld``) instead of waiting for itself. Its name and address
    (``Task-N`` names count up, so a later task at the same address is another owner)."""
    task = asyncio.current_task()
    if task is None:
        return ""
    return f"asyncio task {task.get_name()} ({id(task):#x})"


def _discard(value: Any) -> None:
    """A result nobody will receive: release it if it is a lease."""
    release = getattr(value, "_release_background", None)
    if release is not None:
        try:
            release()
        except LeaseError:
            pass


def _settle(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    if fut.cancelled():
        if ok:
            _discard(value)
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


async def await_core(start: Callable[[Done], "Pending"]) -> Any:
    """Start a core operation with ``start(done)`` and wait for it without blocking the loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def done(ok: bool, value: Any) -> None:
        # Runs on the library's results thread, with the GIL.
        try:
            loop.call_soon_threadsafe(_settle, fut, ok, value)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            if ok:
                _discard(value)

    pending = start(done)
    try:
        return await fut
    except asyncio.CancelledError:
        pending.cancel()
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            _discard(fut.result())
        raise


async def release_async(lease: "Lease") -> None:
    await await_core(lease._release_start)


async def set_ttl_async(lease: "Lease", ttl: Any) -> float:
    left: float = await await_core(lambda done: lease._set_ttl_start(ttl, done))
    return left


async def set_data_async(lease: "Lease", data: Optional[str]) -> float:
    left: float = await await_core(lambda done: lease._set_data_start(data, done))
    return left


async def fenced_put_async(
    lease: "Fences",
    key: str,
    data: Union[bytes, bytearray, str],
    if_version: Optional[str] = None,
    if_absent: Optional[bool] = None,
) -> str:
    version: str = await await_core(
        lambda done: lease._fenced_put_start(key, data, done, if_version, if_absent)
    )
    return version


async def fenced_read_async(lease: "Fences", key: str) -> Optional[FencedObject]:
    d = await await_core(lambda done: lease._fenced_read_start(key, done))
    return FencedObject._from_dict(d)


async def fenced_delete_async(lease: "Fences", key: str) -> bool:
    deleted: bool = await await_core(lambda done: lease._fenced_delete_start(key, done))
    return deleted


async def ready(lease: "Lease") -> "Lease":
    return lease


async def lease_aexit(lease: "Lease", exc_value: Optional[BaseException]) -> bool:
    """``async with`` exit: release without blocking the loop, then the same policy as
    ``Lease.__exit__``."""
    err: Optional[LeaseError] = None
    try:
        await await_core(lease._release_start)
    except LeaseError as e:
        err = e
    return lease._exit_outcome(exc_value, err)


class AcquireAsync:
    """What ``lease.acquire_async(...)`` returns: await it for a :class:`Lease`, or use it as
    ``async with lease.acquire_async(...) as l:`` to release on exit."""

    __slots__ = ("_start", "_lease")

    def __init__(self, start: Callable[[Done], "Pending"]) -> None:
        self._start = start
        self._lease: Optional["Lease"] = None

    async def _acquire(self) -> "Lease":
        lease: "Lease" = await await_core(self._start)
        return lease

    def __await__(self) -> Generator[Any, None, "Lease"]:
        return self._acquire().__await__()

    async def __aenter__(self) -> "Lease":
        self._lease = await self._acquire()
        return self._lease

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        lease, self._lease = self._lease, None
        if lease is None:
            return False
        return await lease_aexit(lease, exc_value)
