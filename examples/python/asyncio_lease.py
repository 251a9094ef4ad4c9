"""asyncio: hold a lease without blocking the event loop, and watch it from another task.

    python examples/python/asyncio_lease.py LEASE_URL
"""

from __future__ import annotations

import asyncio
import sys

import lease


async def watch(url: str, seen: "asyncio.Queue[str]") -> None:
    async for status in lease.watch_async(url, poll=0.1):
        await seen.put(f"{status.state} epoch={status.epoch}")


async def main(url: str) -> int:
    seen: asyncio.Queue[str] = asyncio.Queue()
    watcher = asyncio.create_task(watch(url, seen))
    print("watch:", await seen.get())
    async with lease.acquire_async(url, ttl=10, wait=30, label="asyncio") as held:
        print(f"holding epoch {held.epoch}, {held.remaining():.1f}s left")
        print("watch:", await seen.get())
    print("watch:", await seen.get())
    try:
        # Try once (wait=0): nobody holds it now, so this succeeds with the next epoch.
        again = await lease.acquire_async(url, wait=0)
        print(f"again at epoch {again.epoch}")
        await again.release_async()
    except lease.LeaseHeld as e:
        print("held by", e.holder)
    watcher.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
