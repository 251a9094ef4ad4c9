#!/usr/bin/env python3
"""Real-process histories of database fencing, checked from the workers' own logs.

Usage:
  history.py --dsn URL --worker 'CMD …' [--worker 'CMD …'] [--psql PSQL] [SCENARIO …]

Each worker command (Rust postgres/examples/history_worker.rs, Python python/tests/pg_worker.py,
Node node/test/pg-worker.js, Go bindings/go/pgfence/test/worker) takes
`DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE`, holds a lease on the file store and runs OPS
read-modify-write transactions on the row RESOURCE of pg_counter, each fenced on RESOURCE and
logged in pg_history (op, worker, epoch, the value read), and prints `ack OP READ EPOCH`
once COMMIT returned, `fenced OP EPOCH` when the fence refused it (then exits 3), `error OP
KIND MESSAGE` for any other failure (outcome unknown: it may have committed).

Scenarios (default: all but `faults-nofence`):
  zombie-before-fence   A checks its lease and stops (SIGSTOP) before its fence; B takes the
                        lease over and commits; A continues: refused (Fenced), nothing of A lands.
  zombie-after-read     A is admitted, reads, stops with its transaction open; B takes the lease
                        over and its admission waits (seen waiting on the row lock); A continues
                        and commits; then B is admitted, reads A's value and commits.
  zombie-idle-timeout   as above, with the fence's idle_timeout: the server ends A's session; B
                        commits without A; A continues: its transaction failed, nothing landed.
  nofence-loses-update  the negative control: zombie-after-read without the fence. The checker
                        must find the lost update, every time (else the checks prove nothing).
  forged                equal-epoch token of another holder, and another lease's token: refused.
  faults                workers (each of --worker in turn) hold the lease in turn under SIGSTOP
                        (some past the ttl and the idle timeout), kill -9 and
                        pg_terminate_backend, for LEASE_PG_HISTORY_SECONDS (default 8; `deep`
                        in LEASE_PG_HISTORY: 60).
  faults-nofence        the same without the fence: reports what was lost (not deterministic).

Checked after each scenario, from the workers' logs and the table: every acknowledged op is in
pg_history (no acknowledged update lost); the values read are 0, 1, 2, … once each (no update
lost: two transactions that read the same value lost one); along that order epochs never go
down (no lower epoch's write after a higher one's); no op refused as fenced landed.
Exit 0 when every scenario gave what it must.
"""
from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid

TTL_MS = int(os.environ.get("LEASE_PG_TTL_MS", "1000"))
# Time for a takeover: the ttl, the grace (at least 1 s), polling.
TAKEOVER_S = TTL_MS / 1000 + 1.0 + 1.0
BOUND_S = 60  # any single wait in a scenario


class Failed(Exception):
    pass


class Db:
    def __init__(self, psql: str, dsn: str, sql_file: str) -> None:
        self.psql, self.dsn, self.sql_file = psql, dsn, sql_file

    def sql(self, query: str) -> list[list[str]]:
        out = subprocess.run(
            [self.psql, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", self.dsn, "-c", query],
            check=True, capture_output=True, text=True, timeout=BOUND_S,
        ).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def setup(self) -> None:
        # lease_fence itself, as users install it (idempotent).
        subprocess.run(
            [self.psql, "-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", self.dsn, "-f", self.sql_file],
            check=True, capture_output=True, text=True, timeout=BOUND_S,
        )
        self.sql(
            "CREATE TABLE IF NOT EXISTS pg_counter (id text PRIMARY KEY, n bigint NOT NULL);"
            "CREATE TABLE IF NOT EXISTS pg_history (op text PRIMARY KEY, worker text, epoch numeric,"
            " read_n bigint, resource text)"
        )

    def new_resource(self, tag: str) -> str:
        resource = f"{tag}-{uuid.uuid4().hex[:10]}"
        self.sql(f"INSERT INTO pg_counter VALUES ('{resource}', 0)")
        return resource


def app_name(resource: str) -> str:
    return f"lease-pg-{resource}"[:63]


class Worker:
    """One worker process and its log."""

    def __init__(self, cmd: list[str], args: list[str], env: dict[str, str], log_dir: str, name: str) -> None:
        self.name = name
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd + args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.stopped = False

    def lines(self) -> list[list[str]]:
        with open(self.log_path) as f:
            return [line.split() for line in f.read().splitlines() if line.strip()]

    def has(self, word: str) -> bool:
        return any(parts and parts[0] == word for parts in self.lines())

    def wait_for(self, word: str, timeout: float = BOUND_S) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.has(word):
                return
            if self.proc.poll() is not None and not self.has(word):
                raise Failed(f"{self.name} exited ({self.proc.returncode}) before '{word}':\n{self.text()}")
            time.sleep(0.02)
        raise Failed(f"{self.name} never printed '{word}':\n{self.text()}")

    def wait_stopped(self) -> None:
        end = time.monotonic() + BOUND_S
        while time.monotonic() < end:
            try:
                with open(f"/proc/{self.proc.pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "T":
                        self.stopped = True
                        return
            except FileNotFoundError:
                break
            time.sleep(0.02)
        raise Failed(f"{self.name} never stopped itself:\n{self.text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.stopped = True

    def cont(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=BOUND_S)

    def finish(self, timeout: float = BOUND_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failed(f"{self.name} did not finish:\n{self.text()}")

    def text(self) -> str:
        with open(self.log_path) as f:
            return f.read()


class Run:
    def __init__(self, args: argparse.Namespace, db: Db) -> None:
        self.workers_cmds = [shlex.split(w) for w in args.worker]
        self.dsn = args.dsn
        self.db = db
        self.tmp = tempfile.mkdtemp(prefix="lease-pg-history.")
        self.all: list[Worker] = []

    def worker(self, name: str, lease_url: str, resource: str, ops: int, pause: str = "none",
               fence: bool = True, env: dict[str, str] | None = None, cmd_index: int = 0) -> Worker:
        e = dict(os.environ)
        e["LEASE_PG_TTL_MS"] = str(TTL_MS)
        e.pop("LEASE_PG_TOKEN", None)
        e.pop("LEASE_PG_IDLE_TIMEOUT_MS", None)
        e.update(env or {})
        cmd = self.workers_cmds[cmd_index % len(self.workers_cmds)]
        # Sessions named after the resource: the checks and the faults touch this scenario's
        # workers and nobody else's.
        dsn = self.dsn + ("&" if "?" in self.dsn else "?") + f"application_name={app_name(resource)}"
        w = Worker(cmd, [dsn, lease_url, resource, name, str(ops), pause, "fence" if fence else "nofence"],
                   e, self.tmp, name)
        self.all.append(w)
        return w

    def note(self, what: str) -> None:
        """The driver's own log of the faults it made (printed when a check fails)."""
        with open(os.path.join(self.tmp, "faults.log"), "a") as f:
            f.write(f"{time.monotonic():.3f} {what}\n")

    def lease_url(self, tag: str) -> str:
        d = os.path.join(self.tmp, f"leases-{tag}-{uuid.uuid4().hex[:6]}")
        os.makedirs(d)
        return f"file://{d}/lease"

    def wait_lock_waiter(self, resource: str) -> None:
        """Until a worker of this resource waits on a lock inside lease_fence."""
        end = time.monotonic() + BOUND_S
        while time.monotonic() < end:
            rows = self.db.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                f" AND application_name = '{app_name(resource)}' AND query LIKE '%lease_fence%'"
            )
            if int(rows[0][0]) > 0:
                return
            time.sleep(0.02)
        raise Failed("no admission ever waited on the row lock")

    def cleanup(self) -> None:
        for w in self.all:
            try:
                w.cont()
                w.kill()
            except Exception:
                pass


def check(db: Db, resource: str, workers: list[Worker], must_lose: bool = False) -> str:
    """The invariants, from the logs and the table; returns a summary. Raises Failed."""
    rows = db.sql(f"SELECT op, worker, epoch, read_n FROM pg_history WHERE resource = '{resource}' ORDER BY read_n, op")
    landed = {r[0]: (int(r[2]), int(r[3])) for r in rows}
    counter = int(db.sql(f"SELECT n FROM pg_counter WHERE id = '{resource}'")[0][0])
    acked, fenced, unknown = {}, set(), set()
    for w in workers:
        for parts in w.lines():
            if parts[0] == "ack":
                acked[parts[1]] = (int(parts[3]), int(parts[2]))
            elif parts[0] == "fenced":
                fenced.add(parts[1])
            elif parts[0] == "error":
                unknown.add(parts[1])
    problems = []
    for op, (epoch, read) in acked.items():
        if op not in landed:
            problems.append(f"acknowledged {op} (epoch {epoch}, read {read}) is not in the table: lost")
        elif landed[op] != (epoch, read):
            problems.append(f"acknowledged {op} says {(epoch, read)}, the table {landed[op]}")
    reads = [r for _, r in sorted(landed.values(), key=lambda x: x[1])]
    if reads != list(range(len(reads))):
        dup = sorted({r for r in reads if reads.count(r) > 1})
        problems.append(f"values read are not 0..{len(reads) - 1} once each (read twice: {dup}): lost updates")
    if counter != len(landed):
        problems.append(f"the counter is {counter} after {len(landed)} committed increments: lost updates")
    order = sorted(landed.items(), key=lambda kv: (kv[1][1], kv[0]))
    for (op1, (e1, _)), (op2, (e2, _)) in zip(order, order[1:]):
        if e2 < e1:
            problems.append(f"{op2} (epoch {e2}) landed after {op1} (epoch {e1}): a lower epoch wrote after a higher one")
    for op in fenced & set(landed):
        problems.append(f"{op} was refused as fenced but landed")
    summary = (f"{len(landed)} landed, {len(acked)} acknowledged, {len(fenced)} fenced, "
               f"{len(unknown)} unknown outcome, counter {counter}")
    if must_lose:
        if not problems:
            raise Failed(f"the negative control lost nothing ({summary}): the checks prove nothing")
        return f"{summary}; the checker found, as it must: {problems[0]}"
    if problems:
        logs = "\n".join(f"--- {w.name}\n{w.text()}" for w in workers)
        raise Failed("\n".join(problems) + f"\n({summary})\n{logs}")
    return summary


def zombie(run: Run, pause: str, fence: bool = True, idle_ms: int | None = None) -> str:
    db = run.db
    resource = db.new_resource(f"zombie-{pause}")
    url = run.lease_url(pause)
    env = {"LEASE_PG_IDLE_TIMEOUT_MS": str(idle_ms)} if idle_ms else {}
    a = run.worker(f"a-{resource}", url, resource, 1, pause, fence, env)
    a.wait_stopped()
    b = run.worker(f"b-{resource}", url, resource, 1, "none", fence, env, cmd_index=1)
    workers = [a, b]
    if pause == "before-fence" or not fence:
        b.wait_for("ack")
        a.cont()
        rc = a.finish()
        if fence and (rc != 3 or not a.has("fenced")):
            raise Failed(f"the zombie was not refused (exit {rc}):\n{a.text()}")
    elif idle_ms:
        b.wait_for("ack")  # the server ended A's session; B went ahead
        a.cont()
        rc = a.finish()
        if rc != 4 or not a.has("error") or a.has("ack"):
            raise Failed(f"the zombie's transaction did not fail (exit {rc}):\n{a.text()}")
    else:
        b.wait_for("holding")
        run.wait_lock_waiter(resource)
        if b.has("ack"):
            raise Failed(f"B committed while A held the fence:\n{b.text()}")
        a.cont()
        a.wait_for("ack")
        b.wait_for("ack")
        a.finish()
    b.finish()
    return check(db, resource, workers, must_lose=not fence)


def forged(run: Run) -> str:
    db = run.db
    resource = db.new_resource("forged")
    url = run.lease_url("forged")
    a = run.worker(f"a-{resource}", url, resource, 2)
    if a.finish() != 0:
        raise Failed(f"the first holder failed:\n{a.text()}")
    holding = next(p for p in a.lines() if p[0] == "holding")
    epoch, token = holding[1], holding[2]
    lease = token.rsplit("#", 1)[0]
    cases = {
        "same epoch, another holder": f"{lease}#{epoch}@f0f0f0f0",
        "lower epoch": f"{lease}#{int(epoch) - 1}@{token.rsplit('@', 1)[1]}",
        "another lease": f"{lease}-other#{int(epoch) + 5}@abc123",
    }
    workers = [a]
    for i, (what, t) in enumerate(cases.items()):
        w = run.worker(f"forged{i}-{resource}", url, resource, 1, env={"LEASE_PG_TOKEN": t}, cmd_index=i + 1)
        workers.append(w)
        rc = w.finish()
        if rc != 3 or not w.has("fenced"):
            raise Failed(f"{what} ({t}) was not refused (exit {rc}):\n{w.text()}")
    # The same holder's own token is admitted again.
    w = run.worker(f"again-{resource}", url, resource, 1, env={"LEASE_PG_TOKEN": token})
    workers.append(w)
    if w.finish() != 0:
        raise Failed(f"the admitted holder's own token was refused:\n{w.text()}")
    return check(db, resource, workers) + "; " + ", ".join(cases) + ": refused"


def faults(run: Run, fence: bool = True) -> str:
    db = run.db
    resource = db.new_resource("faults" if fence else "faults-nofence")
    url = run.lease_url("faults")
    deep = os.environ.get("LEASE_PG_HISTORY") == "deep"
    seconds = float(os.environ.get("LEASE_PG_HISTORY_SECONDS", "60" if deep else "8"))
    seed = int(os.environ.get("LEASE_PG_HISTORY_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    idle_ms = int((TAKEOVER_S + 2) * 1000)
    # Workers think inside their transactions, so that pauses land between the lease check and
    # the fence, and between a read and the write computed from it.
    env = {"LEASE_PG_IDLE_TIMEOUT_MS": str(idle_ms), "LEASE_PG_THINK_MS": "60"}
    slots: list[Worker | None] = [None, None, None]
    workers: list[Worker] = []
    stops: dict[Worker, float] = {}
    counts = {"SIGSTOP": 0, "kill -9": 0, "pg_terminate_backend": 0, "workers": 0}
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.1, 0.5))
        for i, w in enumerate(slots):
            if w is None or w.proc.poll() is not None:
                n += 1
                w = run.worker(f"w{n}-{resource}", url, resource, 20, "none", fence, env, cmd_index=n)
                slots[i] = w
                workers.append(w)
                counts["workers"] += 1
        for w, until in list(stops.items()):
            if time.monotonic() >= until:
                w.cont()
                run.note(f"SIGCONT {w.name}")
                del stops[w]
        fault = rng.random()
        live = [w for w in slots if w is not None and w.proc.poll() is None and w not in stops]
        # The holder (the one that printed `holding` and has not finished): faults hurt there.
        holders = [w for w in live if w.has("holding") and not w.has("done")]
        if fault < 0.45:
            if not holders:
                continue
            w = rng.choice(holders)
            w.stop()
            # Some short, most past a takeover, some past the idle timeout as well.
            stops[w] = time.monotonic() + rng.choice([0.3, TAKEOVER_S + 0.5, TAKEOVER_S + 0.5, (idle_ms + 500) / 1000])
            counts["SIGSTOP"] += 1
            run.note(f"SIGSTOP {w.name} until +{stops[w] - time.monotonic():.1f} s")
        elif fault < 0.5:
            if not live:
                continue
            w = rng.choice(live)
            w.kill()
            run.note(f"kill -9 {w.name}")
            counts["kill -9"] += 1
        elif fault < 0.58:
            rows = db.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                f" AND application_name = '{app_name(resource)}' ORDER BY random() LIMIT 1"
            )
            counts["pg_terminate_backend"] += len(rows)
            run.note(f"pg_terminate_backend: {len(rows)}")
    for w in list(stops):
        w.cont()
    for w in slots:
        if w is not None and w.proc.poll() is None:
            try:
                w.finish(timeout=TAKEOVER_S * 4 + 10)
            except Failed:
                pass  # killed: its last op's outcome is unknown, which the checks allow
    faults_done = ", ".join(f"{v} {k}" for k, v in counts.items()) + f", {seconds:g} s, seed {seed}"
    if not fence:
        try:
            return "without the fence: " + check(db, resource, workers) + f" (nothing lost this time; {faults_done})"
        except Failed as e:
            return f"without the fence, updates were lost ({faults_done}): {str(e).splitlines()[0]}"
    summary = check(db, resource, workers)
    acks = sum(1 for w in workers for p in w.lines() if p[0] == "ack")
    if acks == 0:
        raise Failed(f"no transaction committed under faults ({faults_done}): the history tested nothing")
    return f"{summary} ({faults_done})"


SCENARIOS = {
    "zombie-before-fence": lambda run: zombie(run, "before-fence"),
    "zombie-after-read": lambda run: zombie(run, "after-read"),
    "zombie-idle-timeout": lambda run: zombie(run, "after-read", idle_ms=TTL_MS * 3),
    "nofence-loses-update": lambda run: zombie(run, "after-read", fence=False),
    "forged": forged,
    "faults": faults,
    "faults-nofence": lambda run: faults(run, fence=False),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default=os.environ.get("LEASE_TEST_PG"))
    p.add_argument("--worker", action="append", required=True, help="a worker command (repeat to mix languages)")
    p.add_argument("--psql", default=os.path.join(os.environ.get("LEASE_TEST_PG_BIN", "/usr/bin"), "psql"))
    p.add_argument("--sql", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lease_fence.sql"),
                   help="the fence to install (a broken copy shows the checks catch it)")
    p.add_argument("scenarios", nargs="*")
    args = p.parse_args()
    if not args.dsn:
        print("history.py: no --dsn and no LEASE_TEST_PG (scripts/postgres.sh start)", file=sys.stderr)
        return 64
    db = Db(args.psql, args.dsn, args.sql)
    db.setup()
    names = args.scenarios or [s for s in SCENARIOS if s != "faults-nofence"]
    run = Run(args, db)
    failed = 0
    try:
        for name in names:
            t0 = time.monotonic()
            try:
                summary = SCENARIOS[name](run)
                print(f"ok   {name}: {summary} [{time.monotonic() - t0:.1f} s]", flush=True)
            except Failed as e:
                failed += 1
                print(f"FAIL {name}: {e}", flush=True)
    finally:
        run.cleanup()
    print(f"history: {len(names) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
