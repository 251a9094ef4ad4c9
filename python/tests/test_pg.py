"""lease.pg on a real PostgreSQL server (scripts/postgres.sh; LEASE_TEST_PG): the admission
rule and the error mapping with psycopg and asyncpg, the waits, and the real-process histories
(postgres/tests/history.py) with the Python worker on both drivers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import lease
import lease.pg

ROOT = Path(__file__).resolve().parents[2]
DSN = os.environ.get("LEASE_TEST_PG", "")
if not DSN:
    if os.environ.get("CI") == "true":
        raise RuntimeError("LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run)")
    pytest.skip("LEASE_TEST_PG is not set (scripts/postgres.sh start)", allow_module_level=True)

psycopg = pytest.importorskip("psycopg") if os.environ.get("CI") != "true" else __import__("psycopg")
L = "s3://bucket/locks/jobs"


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema with lease_fence installed by lease.pg.migrate."""
    name = f"py_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
        c.execute(f"SET search_path = {name}")
        lease.pg.migrate(c)
        c.execute("CREATE TABLE data (id int PRIMARY KEY, v text)")
    yield name
    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {name} CASCADE")


def connect(schema: str) -> Any:
    return psycopg.connect(DSN, options=f"-c search_path={schema}", application_name=schema)


def admit(conn: Any, resource: str, token: str) -> None:
    with conn.transaction():
        lease.pg.fence(conn, resource, token)


def test_the_admission_rule_and_its_errors(schema: str) -> None:
    with connect(schema) as c:
        admit(c, "jobs", f"{L}#5@aa")
        admit(c, "jobs", f"{L}#5@aa")
        admit(c, "jobs", f"{L}#6@bb")
        with pytest.raises(lease.Fenced) as e:
            admit(c, "jobs", f"{L}#5@aa")
        assert e.value.epoch == 6 and e.value.url == L and e.value.kind == "fenced"
        assert isinstance(e.value.__cause__, psycopg.Error)
        with pytest.raises(lease.Fenced, match="another holder"):
            admit(c, "jobs", f"{L}#6@cc")
        with pytest.raises(lease.Fenced, match="fenced by the lease"):
            admit(c, "jobs", "s3://bucket/locks/other#99@aa")
        # No holder: admitted at the same epoch, and the holder recorded stays the only one.
        admit(c, "jobs", f"{L}#6")
        with pytest.raises(lease.Fenced):
            admit(c, "jobs", f"{L}#6@cc")
        for bad in ["x#y", "#1", f"{L}#1@", f"{L}#18446744073709551616"]:
            with pytest.raises(lease.InvalidArgument):
                admit(c, "jobs", bad)
        # A queued lock's shared or scoped grant: refused, never read as a whole-lock token.
        for grant in [f"{L}#9@aa;shared", f"{L}#9@aa;path=tables/users", f"{L}#9@aa;range=0..10"]:
            with pytest.raises(lease.InvalidArgument, match="shared or scoped grant"):
                admit(c, "jobs", grant)
        with pytest.raises(lease.InvalidArgument):
            admit(c, "", f"{L}#7@aa")
        with pytest.raises(TypeError):
            lease.pg.fence(c, "jobs", 7)
        # A Lease-like object with .token works as well as the string.
        class Held:
            token = f"{L}#7@dd"
        admit(c, "jobs", Held())  # type: ignore[arg-type]


def test_outside_a_transaction_is_refused(schema: str) -> None:
    with psycopg.connect(DSN, autocommit=True, options=f"-c search_path={schema}") as c:
        with pytest.raises(lease.InvalidArgument, match="transaction"):
            lease.pg.fence(c, "jobs", f"{L}#5@aa")


def test_a_missing_install_says_to_migrate() -> None:
    name = f"py_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
        try:
            c.execute(f"SET search_path = {name}")
            with pytest.raises(lease.StoreError, match="migrate"):
                admit(c, "jobs", f"{L}#5@aa")
        finally:
            c.execute(f"DROP SCHEMA {name} CASCADE")


def wait_for_lock_waiter(schema: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as obs:
        for _ in range(3000):
            row: Any = obs.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND application_name = %s AND query LIKE '%%lease_fence%%'", (schema,)).fetchone()
            if row[0] > 0:
                return
            time.sleep(0.01)
    raise AssertionError("no admission ever waited on the row lock")


def test_waits_lock_wait_and_repeatable_read(schema: str) -> None:
    with connect(schema) as a, connect(schema) as b:
        # Not autocommit: psycopg opens the transaction at the first statement.
        lease.pg.fence(a, "w", f"{L}#5@aa")
        a.execute("INSERT INTO data VALUES (1, 'a')")
        # A bounded wait: LeaseTimeout, retryable.
        for wait in (0, 0.05):
            with pytest.raises(lease.LeaseTimeout) as e:
                lease.pg.fence(b, "w", f"{L}#6@bb", lock_wait=wait)
            assert e.value.retryable
            b.rollback()
        # Unbounded, under REPEATABLE READ: waits for A, then a serialization failure (Conflict).
        result: list[BaseException] = []

        def later() -> None:
            b.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            try:
                lease.pg.fence(b, "w", f"{L}#6@bb")
            except BaseException as exc:  # noqa: BLE001 - checked below
                result.append(exc)
            finally:
                b.rollback()
                b.isolation_level = None

        t = threading.Thread(target=later)
        t.start()
        wait_for_lock_waiter(schema)
        assert t.is_alive(), "B was admitted while A's transaction was open"
        a.commit()
        t.join(timeout=60)
        assert len(result) == 1 and isinstance(result[0], lease.Conflict), result
        # Under READ COMMITTED it is admitted and reads A's write.
        with b.transaction():
            lease.pg.fence(b, "w", f"{L}#6@bb")
            row: Any = b.execute("SELECT v FROM data WHERE id = 1").fetchone()
            assert row[0] == "a"


def test_asyncpg_and_psycopg_async(schema: str) -> None:
    asyncpg = pytest.importorskip("asyncpg") if os.environ.get("CI") != "true" else __import__("asyncpg")

    async def run() -> None:
        conn = await asyncpg.connect(DSN, server_settings={"search_path": schema})
        try:
            with pytest.raises(lease.InvalidArgument, match="transaction"):
                await lease.pg.fence_async(conn, "a", f"{L}#5@aa")
            async with conn.transaction():
                await lease.pg.fence_async(conn, "a", f"{L}#5@aa")
            with pytest.raises(lease.Fenced) as e:
                async with conn.transaction():
                    await lease.pg.fence_async(conn, "a", f"{L}#4@aa")
            assert e.value.epoch == 5
            with pytest.raises(lease.InvalidArgument):
                async with conn.transaction():
                    await lease.pg.fence_async(conn, "a", "nonsense")
            await lease.pg.migrate_async(conn)  # again: idempotent
        finally:
            await conn.close()
        aconn = await psycopg.AsyncConnection.connect(DSN, options=f"-c search_path={schema}")
        async with aconn:
            async with aconn.transaction():
                await lease.pg.fence_async(aconn, "a", f"{L}#6@bb")
            with pytest.raises(lease.Fenced):
                async with aconn.transaction():
                    await lease.pg.fence_async(aconn.cursor(), "a", f"{L}#5@aa")

    asyncio.run(run())


def history(*args: str, env: dict[str, str] | None = None) -> None:
    worker = f"{sys.executable} {ROOT / 'python/tests/pg_worker.py'}"
    out = subprocess.run(
        [sys.executable, str(ROOT / "postgres/tests/history.py"), "--dsn", DSN, "--worker", worker, *args],
        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr


def test_histories_psycopg() -> None:
    """Zombies, the negative control, forged tokens, and faults, with the psycopg worker."""
    history()


def test_histories_asyncpg() -> None:
    """The zombies with the asyncpg worker (its faults and controls run with psycopg's)."""
    history("zombie-before-fence", "zombie-after-read", "zombie-idle-timeout", env={"LEASE_PG_DRIVER": "asyncpg"})
