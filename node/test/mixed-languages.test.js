// Conserve's scenario across languages, in real processes, on the file store and on moto (and
// MinIO when it runs): four backup
// workers hold a queued lock shared, one garbage collector exclusive, arriving interleaved
// (b1 CLI, b2 Python, gc CLI, b3 Node, b4 CLI). Each appends start/end lines to one history
// file; the history must show: no backup during the GC, the GC not starved (it ran before every
// backup that arrived after it), tokens in arrival order, everyone served.
//
// Needs the `lease` CLI (LEASE_BIN) and the Python venv with the package installed
// (.venv/python, left by scripts/test-python.sh, which scripts/test runs before this suite).
// Outside CI a missing one skips the test, loudly; with CI=true it fails.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { it } = require('node:test');

const { lease, inCI, makeUrl, tmpDir, until, ROOT } = require('../test-support/helpers.js');

const WORKER = path.join(__dirname, '..', 'test-support', 'conserve-worker.js');
const PYTHON = path.join(ROOT, '.venv', 'python', 'bin', 'python');

const PY_WORKER = `
import os, sys, time, lease
url, history, go, worker, kind = sys.argv[1:6]
def line(what, token):
    with open(history, "a") as f:
        f.write(f"{what} {worker} {kind} {token} {time.monotonic_ns()}\\n")
with lease.acquire(url, ttl=10, wait=120, poll=0.1, label=worker, shared=kind == "backup") as l:
    assert l.grant is not None and l.grant.mode == ("shared" if kind == "backup" else "exclusive")
    line("start", l.epoch)
    end = time.monotonic() + 60
    while not os.path.exists(go):
        assert time.monotonic() < end, "GO did not appear"
        time.sleep(0.02)
    time.sleep(0.2)
    line("end", l.epoch)
`;

function missingTools() {
  const missing = [];
  if (!process.env.LEASE_BIN || !fs.existsSync(process.env.LEASE_BIN)) missing.push('LEASE_BIN (the lease CLI)');
  if (!fs.existsSync(PYTHON)) missing.push(`${PYTHON} (run scripts/test-python.sh first)`);
  return missing;
}

/** Start a process; the promise resolves with its exit code (killed after 180 s). */
function run(cmd, args, name) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
  return new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ name, code, signal, output });
    });
  });
}

const missing = missingTools();
const skip = missing.length && !inCI() ? `!!! missing ${missing.join(', ')}` : false;
if (skip) process.stderr.write(`\n!!! SKIPPING the mixed-languages test: ${skip}\n`);

// On the file store and on moto (and on MinIO when scripts/stores.sh started it).
const STORES = ['file', 'moto', ...(process.env.LEASE_TEST_S3_MINIO ? ['minio'] : [])];
for (const store of STORES) {
  const noServer = store === 'moto' && !process.env.LEASE_TEST_S3_MOTO && !inCI() ? '!!! LEASE_TEST_S3_MOTO unset' : false;
  it(`Conserve's scenario on ${store}: 4 shared backups and 1 exclusive GC from the CLI, Python and Node`, { skip: skip || noServer }, () =>
    conserve(store),
  );
}

/** A lease URL on `store`, MinIO included (the helpers know file, moto, gcs and azure). */
function urlOn(store) {
  if (store !== 'minio') return makeUrl(store, 'conserve');
  const base = process.env.LEASE_TEST_S3_MINIO;
  const i = base.indexOf('?');
  const key = `locks/node-conserve-${process.pid}-${Date.now()}`;
  return i < 0 ? `${base.replace(/\/+$/, '')}/${key}` : `${base.slice(0, i).replace(/\/+$/, '')}/${key}${base.slice(i)}`;
}

async function conserve(store) {
  assert.deepEqual(missing, [], 'CI=true: the CLI and the Python venv must exist');
  const url = urlOn(store);
  const dir = tmpDir();
  const history = path.join(dir, 'history');
  const go = path.join(dir, 'go');
  fs.writeFileSync(history, '');
  const bin = process.env.LEASE_BIN;
  const cli = (worker, kind) => {
    const mode = kind === 'backup' ? ['--shared'] : ['--queue'];
    return run(
      bin,
      ['run', ...mode, '--ttl', '10s', '--poll', '100ms', '--wait', '120s', '--label', worker, url, '--',
        process.execPath, WORKER, 'body', history, go, worker, kind],
      worker,
    );
  };
  const starters = [
    ['b1', 'backup', () => cli('b1', 'backup')],
    ['b2', 'backup', () => run(PYTHON, ['-c', PY_WORKER, url, history, go, 'b2', 'backup'], 'b2')],
    ['gc', 'gc', () => cli('gc', 'gc')],
    ['b3', 'backup', () => run(process.execPath, [WORKER, 'node', url, history, go, 'b3', 'backup'], 'b3')],
    ['b4', 'backup', () => cli('b4', 'backup')],
  ];
  // Arrival order: each starts once the one before is in the lock's record (granted or waiting).
  const arrivals = [];
  const procs = [];
  for (const [worker, , start] of starters) {
    procs.push(start());
    await until(
      async () => {
        const s = await lease.status(url);
        return [...(s.holders ?? []), ...(s.waiting ?? [])].some((p) => p.holder.label === worker);
      },
      60_000,
      `${worker} to join the lock`,
      20,
    );
    arrivals.push(worker);
  }
  // Here b1 and b2 hold, gc waits for them, b3 and b4 wait behind gc.
  const s = await lease.status(url);
  assert.deepEqual((s.holders ?? []).map((p) => p.holder.label), ['b1', 'b2']);
  assert.deepEqual((s.waiting ?? []).map((p) => [p.holder.label, p.mode]), [
    ['gc', 'exclusive'],
    ['b3', 'shared'],
    ['b4', 'shared'],
  ]);
  fs.writeFileSync(go, '');
  const results = await Promise.all(procs);
  for (const r of results) assert.equal(r.code, 0, `${r.name} exited with ${r.code ?? r.signal}:\n${r.output}`);

  // The history.
  const runs = new Map();
  for (const l of fs.readFileSync(history, 'utf8').trim().split('\n')) {
    const [what, worker, kind, token, ns] = l.split(' ');
    const r = runs.get(worker) ?? { worker, kind };
    r[what] = BigInt(ns);
    r.token = Number(token);
    runs.set(worker, r);
  }
  // Everyone served, once.
  assert.deepEqual([...runs.keys()].sort(), ['b1', 'b2', 'b3', 'b4', 'gc']);
  for (const r of runs.values()) assert.ok(r.start !== undefined && r.end !== undefined && r.start < r.end, r.worker);
  const gc = runs.get('gc');
  // No backup runs during the GC.
  for (const b of [...runs.values()].filter((r) => r.kind === 'backup')) {
    assert.ok(b.end < gc.start || b.start > gc.end, `${b.worker} ran during the GC`);
  }
  // The GC was not starved: it ran before every backup that arrived after it.
  for (const w of arrivals.slice(arrivals.indexOf('gc') + 1)) {
    assert.ok(gc.end < runs.get(w).start, `${w} arrived after the GC but ran before it`);
  }
  // Tokens in arrival order (every later arrival conflicts with the GC or follows it).
  const tokens = arrivals.map((w) => runs.get(w).token);
  for (let i = 1; i < tokens.length; i++) {
    assert.ok(tokens[i - 1] < tokens[i], `tokens ${JSON.stringify(arrivals)} = ${JSON.stringify(tokens)}`);
  }
  // b1 and b2 overlapped (shared), and so did b3 and b4.
  const [b1, b2, b3, b4] = ['b1', 'b2', 'b3', 'b4'].map((w) => runs.get(w));
  assert.ok(b1.start < b2.end && b2.start < b1.end, 'b1 and b2 did not overlap');
  assert.ok(b3.start < b4.end && b4.start < b3.end, 'b3 and b4 did not overlap');
  const after = await lease.status(url);
  assert.deepEqual([after.holders, after.waiting], [[], []]);
}
