// Health states, metrics and each epoch's history, seen from Node (issue 25): mirrors
// python/tests/test_observe.py.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { it } = require('node:test');

const { lease, breakLease, tmpDir } = require('../test-support/helpers.js');

const WAIT = 10_000; // a bound on each wait for an event, never a timing assertion

/** Events as they come, and a way to wait for the next one. */
function recorder() {
  const events = [];
  let wake = null;
  return {
    push(e) {
      events.push(e);
      if (wake) wake();
    },
    async next() {
      const deadline = Date.now() + WAIT;
      while (events.length === 0) {
        if (Date.now() > deadline) throw new Error('no health event within the bound');
        await new Promise((resolve) => {
          wake = resolve;
          setTimeout(resolve, 50);
        });
      }
      return events.shift();
    },
  };
}

/** Hold the file store's sidecar lock of `name` in `dir` with flock(1): every renewal then
 * fails, as on an unreachable store. Resolves once the lock is held; `release()` kills the
 * whole process group (flock and the `sleep` that inherited the locked descriptor: killing
 * flock alone would leave the lock held for the sleep's 60 s). */
async function holdRecordLock(dir, name) {
  const lock = path.join(dir, `.${name}.lock`);
  const p = spawn('flock', ['-x', lock, '-c', 'echo locked; exec sleep 60'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    detached: true,
  });
  const exited = new Promise((resolve) => p.once('exit', resolve));
  await new Promise((resolve, reject) => {
    p.stdout.once('data', resolve);
    p.once('exit', (code) => reject(new Error(`flock exited ${code}`)));
  });
  return {
    async release() {
      process.kill(-p.pid, 'SIGKILL');
      await exited;
    },
  };
}

it('health goes late then unknown and back when renewals fail', async () => {
  const dir = tmpDir();
  const l = await lease.acquire(`file://${dir}/h`, { ttl: 3_000 });
  const events = recorder();
  l.onHealth((e) => events.push(e));
  const first = await events.next();
  assert.equal(first.health, 'healthy');
  assert.equal(first.reason ?? null, null);
  assert.equal(l.health, 'healthy');
  const locker = await holdRecordLock(dir, 'h');
  try {
    assert.equal((await events.next()).health, 'late');
    const unknown = await events.next();
    assert.equal(unknown.health, 'unknown');
    // Unknown when kill-after (ttl/3) + margin (ttl/10) is left: 1.3 s of 3 s.
    assert.ok(unknown.remainingMs <= 1_300, unknown.remainingMs);
    assert.ok(l.ensureHeld(0) > 0); // still held: ensureHeld keeps its meaning
  } finally {
    await locker.release();
  }
  assert.equal((await events.next()).health, 'healthy');
  await l.release();
});

it('health ends lost with its reason', async () => {
  const dir = tmpDir();
  const l = await lease.acquire(`file://${dir}/h`, { ttl: 3_000 });
  l.lost.catch(() => {});
  const events = recorder();
  l.onHealth((e) => events.push(e));
  const locker = await holdRecordLock(dir, 'h');
  try {
    const seen = [];
    for (let i = 0; i < 4; i++) seen.push(await events.next());
    assert.deepEqual(seen.map((e) => e.health), ['healthy', 'late', 'unknown', 'lost']);
    assert.equal(seen[3].reason, 'expired');
    assert.equal(seen[3].remainingMs, 0);
    assert.equal(l.health, 'lost');
  } finally {
    await locker.release();
  }
  await assert.rejects(l.release(), (e) => e.code === 'LEASE_LOST');
});

it('metrics count what happened and reach prom-client', async () => {
  const dir = tmpDir();
  const name = `observe-${process.pid}-${Date.now()}`;
  for (let i = 0; i < 3; i++) {
    const l = await lease.acquire(`file://${dir}/${name}`, { ttl: 5_000 });
    await l.release();
  }
  const families = Object.fromEntries(lease.metrics().map((f) => [f.name, f]));
  const value = (name, labels) => {
    const s = families[name].samples.find((x) => JSON.stringify(x.labels) === JSON.stringify(labels));
    return s ? (s.value ?? s.count) : 0;
  };
  // Labels come sorted by name.
  assert.equal(value('lease_acquisitions_total', { lease: name, outcome: 'acquired' }), 3);
  assert.equal(value('lease_hold_seconds', { lease: name }), 3);
  assert.ok(value('lease_store_requests_total', { kind: 'update', status: '200', store: 'file' }) >= 3);
  assert.match(lease.metricsText(), /# EOF\n$/);
  const client = require('prom-client');
  const registry = new client.Registry();
  require('../prometheus.js').register(registry);
  const text = await registry.metrics();
  assert.ok(text.includes(`lease_acquisitions_total{lease="${name}",outcome="acquired"} 3`), text);
  assert.ok(text.includes(`lease_hold_seconds_count{lease="${name}"} 3`), text);
  assert.ok(text.includes(`lease_hold_seconds_bucket{le="+Inf",lease="${name}"} 3`) ||
    text.includes(`lease_hold_seconds_bucket{lease="${name}",le="+Inf"} 3`), text);
});

it('status lists each tenure with how it ended', async () => {
  const u = `file://${tmpDir()}/s`;
  const first = await lease.acquire(u, { ttl: 5_000, label: 'first' });
  await first.release();
  const second = await lease.acquire(u, { ttl: 5_000, label: 'second' });
  second.lost.catch(() => {});
  breakLease(u);
  await assert.rejects(second.release(), (e) => e.code === 'LEASE_LOST'); // acknowledges it
  const third = await lease.acquire(u, { ttl: 5_000, label: 'third' });
  const s = await lease.status(u);
  await third.release();
  assert.deepEqual(
    s.history.map((t) => [t.holder.label, t.end]),
    [['second', 'broken'], ['first', 'released']],
  );
  assert.equal(s.history[1].epoch, first.epoch);
  assert.notEqual(s.history[0].by, null);
});
