"""The Python worker of the real-process histories (postgres/tests/history.py; the protocol is
in postgres/examples/history_worker.rs): a lease holder running read-modify-write
transactions on a counter, fenced by lease.pg, printing what happened to each.

    pg_worker.py DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE

LEASE_PG_DRIVER=psycopg (default) or asyncpg picks the driver.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any, Optional

import lease
import lease.pg


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pause(at: str, wanted: str, op: int) -> None:
    if op == 1 and at == wanted:
        say(f"paused {at}")
        os.kill(os.getpid(), signal.SIGSTOP)


def env_s(name: str) -> Optional[float]:
    v = os.environ.get(name)
    return int(v) / 1000 if v else None


def report(op: str, exc: BaseException) -> None:
    if isinstance(exc, lease.Fenced):
        say(f"fenced {op} {exc.epoch or 0}")
        sys.exit(3)
    kind = exc.kind if isinstance(exc, lease.LeaseError) else type(exc).__name__
    say(f"error {op} {kind} {str(exc).splitlines()[0] if str(exc) else ''}")
    sys.exit(4)


def main() -> None:
    dsn, url, resource, name, ops_s, at, fencing = sys.argv[1:8]
    ops, fenced = int(ops_s), fencing == "fence"
    think = env_s("LEASE_PG_THINK_MS") or 0.0
    idle = env_s("LEASE_PG_IDLE_TIMEOUT_MS")
    held: Optional[lease.Lease] = None
    token = os.environ.get("LEASE_PG_TOKEN")
    if token is None:
        held = lease.acquire(url, ttl=env_s("LEASE_PG_TTL_MS") or 1.0, wait=None)
        token = held.token
    say(f"holding {lease.parse_token(token).epoch} {token}")
    epoch = lease.parse_token(token).epoch
    if os.environ.get("LEASE_PG_DRIVER") == "asyncpg":
        asyncio.run(run_asyncpg(dsn, resource, name, ops, at, fenced, token, epoch, think, idle, held))
    else:
        run_psycopg(dsn, resource, name, ops, at, fenced, token, epoch, think, idle, held)
    if held is not None:
        held.release()
    say("done")


def check_lease(held: Optional[lease.Lease], op: str) -> None:
    if held is not None:
        try:
            held.ensure_held(min_remaining=0.1)
        except lease.LeaseLost:
            say(f"lost {op}")
            sys.exit(5)


def run_psycopg(dsn: str, resource: str, name: str, ops: int, at: str, fenced: bool, token: str,
                epoch: int, think: float, idle: Optional[float], held: Optional[lease.Lease]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(1, ops + 1):
            op = f"{name}-{i}"
            check_lease(held, op)
            try:
                time.sleep(think)
                with conn.transaction():
                    pause(at, "before-fence", i)
                    if fenced:
                        lease.pg.fence(conn, resource, token, idle_timeout=idle)
                    row: Any = conn.execute("SELECT n FROM pg_counter WHERE id = %s", (resource,)).fetchone()
                    read = int(row[0])
                    pause(at, "after-read", i)
                    time.sleep(think / 2)
                    conn.execute("UPDATE pg_counter SET n = %s WHERE id = %s", (read + 1, resource))
                    conn.execute(
                        "INSERT INTO pg_history (op, worker, epoch, read_n, resource) VALUES (%s, %s, %s, %s, %s)",
                        (op, name, epoch, read, resource))
                    pause(at, "before-commit", i)
            except Exception as exc:  # noqa: BLE001 - every outcome is reported
                report(op, lease.pg.error_from(exc, token) or exc)
            say(f"ack {op} {read} {epoch}")


async def run_asyncpg(dsn: str, resource: str, name: str, ops: int, at: str, fenced: bool, token: str,
                      epoch: int, think: float, idle: Optional[float], held: Optional[lease.Lease]) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(dsn)
    for i in range(1, ops + 1):
        op = f"{name}-{i}"
        check_lease(held, op)
        try:
            await asyncio.sleep(think)
            async with conn.transaction():
                pause(at, "before-fence", i)
                if fenced:
                    await lease.pg.fence_async(conn, resource, token, idle_timeout=idle)
                read = int(await conn.fetchval("SELECT n FROM pg_counter WHERE id = $1", resource))
                pause(at, "after-read", i)
                await asyncio.sleep(think / 2)
                await conn.execute("UPDATE pg_counter SET n = $1 WHERE id = $2", read + 1, resource)
                await conn.execute(
                    "INSERT INTO pg_history (op, worker, epoch, read_n, resource)"
                    " VALUES ($1, $2, $3::text::numeric, $4, $5)",
                    op, name, str(epoch), read, resource)
                pause(at, "before-commit", i)
        except Exception as exc:  # noqa: BLE001 - every outcome is reported
            report(op, lease.pg.error_from(exc, token) or exc)
        say(f"ack {op} {read} {epoch}")
    await conn.close()


if __name__ == "__main__":
    main()
