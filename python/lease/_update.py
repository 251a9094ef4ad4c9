"""``Lease.fenced_update``: a fenced read-modify-write that loses no update.

``fenced_get`` followed by a plain ``fenced_put`` is not atomic: another writer of the same (or
a lower) epoch may write between the read and the write, and its update is then lost. Here the
write is conditional on the version that was read (``if_version=``, or ``if_absent=True`` when
there was nothing): a change in between raises :class:`Conflict`, and the update reads again,
calls ``fn`` again on what is there now, and writes again, a bounded number of times with a
small random backoff.

Written in Python, over ``Lease._fenced_get`` and the conditional ``fenced_put``, so ``fn`` runs
on the caller's thread (or event loop), never on one of the library's runtime threads.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from typing import TYPE_CHECKING, Awaitable, Callable, Optional, Union, cast

from ._aio import await_core, fenced_put_async
from ._errors import Conflict, StoreUnavailable
from ._types import FencedObject

if TYPE_CHECKING:
    from ._lease import GrantCore, Lease

    #: What fences: a lease, or a grant held through a shared session.
    Fences = Union[Lease, GrantCore]

Data = Union[bytes, bytearray, str]

#: Attempts before giving up (as the core's fenced_update).
MAX_ATTEMPTS = 32
#: The first pause after a conflict, doubling up to LONGEST_PAUSE (seconds).
FIRST_PAUSE = 0.02
LONGEST_PAUSE = 1.0


class _Attempts:
    """Counts attempts and says how long to pause after each conflict (jittered, doubling)."""

    __slots__ = ("_lease", "_key", "_made", "_pause")

    def __init__(self, lease: "Fences", key: str) -> None:
        self._lease = lease
        self._key = key
        self._made = 0
        self._pause = FIRST_PAUSE

    def after_conflict(self, conflict: Conflict) -> float:
        """The pause before the next attempt; raises once there were too many."""
        self._made += 1
        if self._made >= MAX_ATTEMPTS:
            # As the core: a key that keeps changing is a busy store, retryable later.
            raise StoreUnavailable(
                f"{conflict.url or self._key} kept changing under a fenced update; gave up "
                f"after {MAX_ATTEMPTS} attempts (last: {conflict})",
                conflict.url,
                None,
                conflict.epoch,
                "unavailable",
            ) from conflict
        pause = self._pause * random.uniform(0.5, 1.0)
        self._pause = min(self._pause * 2, LONGEST_PAUSE)
        return pause


def _write(lease: "Fences", key: str, data: Data, old: Optional[FencedObject]) -> str:
    if old is None:
        return lease.fenced_put(key, data, if_absent=True)
    return lease.fenced_put(key, data, if_version=old.version)


def fenced_update(
    lease: "Fences", key: str, fn: Callable[[Optional[FencedObject]], Data]
) -> str:
    if not callable(fn):
        raise TypeError(f"fn must be callable, not {type(fn).__name__}")
    attempts = _Attempts(lease, key)
    while True:
        old = FencedObject._from_dict(lease._fenced_get(key))
        data = fn(old)
        try:
            return _write(lease, key, data, old)
        except Conflict as conflict:
            time.sleep(attempts.after_conflict(conflict))


async def fenced_update_async(
    lease: "Fences",
    key: str,
    fn: Callable[[Optional[FencedObject]], Union[Data, Awaitable[Data]]],
) -> str:
    if not callable(fn):
        raise TypeError(f"fn must be callable, not {type(fn).__name__}")
    attempts = _Attempts(lease, key)
    while True:
        old = FencedObject._from_dict(
            await await_core(lambda done: lease._fenced_get_start(key, done))
        )
        made = fn(old)
        data = await made if inspect.isawaitable(made) else cast(Data, made)
        try:
            if old is None:
                return await fenced_put_async(lease, key, data, if_absent=True)
            return await fenced_put_async(lease, key, data, if_version=old.version)
        except Conflict as conflict:
            await asyncio.sleep(attempts.after_conflict(conflict))
