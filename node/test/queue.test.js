// Queued locks (docs/protocol.md §10) from Node: shared readers and a writer in arrival order, a
// semaphore, byte ranges, the status of holders and waiters, try-once, option checks. On the
// file store and on S3 (moto). Mirrors python/tests/test_queue.py, smaller.
'use strict';

const assert = require('node:assert/strict');
const { describe, it } = require('node:test');

const { lease, inCI, makeUrl, sleep, until } = require('../test-support/helpers.js');

const TTL = 10_000;
const POLL = 100;

const labels = (ps) => (ps ?? []).map((p) => p.holder.label);

for (const store of ['file', 'moto']) {
  const skip = store === 'moto' && !process.env.LEASE_TEST_S3_MOTO && !inCI() ? 'LEASE_TEST_S3_MOTO is not set' : false;
  if (skip) process.stderr.write(`\n!!! SKIPPING queue tests on moto: ${skip}\n`);
  describe(`queued locks [${store}]`, { skip }, () => {
    // Issue 23: `wakeHints` says where a waiter can be woken; its queue entry, read through the
    // store, names a loopback address by default (and with 'loopback' or '127.0.0.1'), none with
    // 'off'.
    for (const hints of [undefined, 'loopback', '127.0.0.1', 'off']) {
      it(`wakeHints ${hints}: the waiter's entry ${hints === 'off' ? 'has no' : 'has a loopback'} wake address`, async () => {
        const u = makeUrl(store, 'wake');
        const holder = await lease.acquire(u, { ttl: TTL, queue: true, wait: 0, wakeHints: 'off' });
        const w = lease.acquire(u, { ttl: TTL, pollInterval: POLL, label: 'w', queue: true, wakeHints: hints });
        let wake;
        try {
          await until(async () => labels((await lease.status(u)).waiting).join() === 'w', 30_000, 'the waiter');
          const record = JSON.parse((await lease.fencedGet(u)).data.toString());
          assert.equal(record.queue.length, 1, JSON.stringify(record));
          wake = record.queue[0].wake;
        } finally {
          await holder.release();
        }
        await (await w).release();
        if (hints === 'off') assert.equal(wake, undefined);
        else assert.match(wake, /^udp:127\.0\.0\.1:\d+$/);
      });
    }

    it('shared readers, then a writer, then later readers wait', async () => {
      const u = makeUrl(store, 'rw');
      const opts = (label, o) => ({ ttl: TTL, pollInterval: POLL, label, ...o });
      const r1 = await lease.acquire(u, opts('r1', { shared: true }));
      const r2 = await lease.acquire(u, opts('r2', { shared: true, wait: 0 }));
      assert.deepEqual(r1.grant, { mode: 'shared', token: r1.epoch, scope: null, range: null, permits: null });
      assert.ok(r2.grant.token > r1.grant.token);

      let writer = null;
      const w = lease.acquire(u, opts('w', { queue: true })).then((l) => (writer = l));
      await until(async () => labels((await lease.status(u)).waiting).join() === 'w', 30_000, 'the writer to wait');
      let reader = null;
      const r3 = lease.acquire(u, opts('r3', { shared: true })).then((l) => (reader = l));
      await until(async () => labels((await lease.status(u)).waiting).join() === 'w,r3', 30_000, 'r3 to wait');
      const s = await lease.status(u);
      assert.deepEqual(labels(s.holders), ['r1', 'r2']);
      assert.deepEqual(s.holders.map((p) => [p.mode, p.token, p.scope, p.ttlMs]), [
        ['shared', r1.epoch, null, TTL],
        ['shared', r2.epoch, null, TTL],
      ]);
      assert.deepEqual(s.waiting.map((p) => [p.mode, p.token]), [['exclusive', null], ['shared', null]]);
      assert.equal(s.permits, null);

      await r1.release();
      await sleep(300);
      assert.equal(writer, null, 'the writer was granted beside a reader');
      await r2.release();
      await w;
      assert.equal(writer.grant.mode, 'exclusive');
      assert.ok(writer.epoch > r2.epoch);
      await sleep(300);
      assert.equal(reader, null, 'a reader was granted beside the writer');
      await writer.release();
      await r3;
      assert.ok(reader.epoch > writer.epoch);
      await reader.release();
      const after = await lease.status(u);
      assert.deepEqual([after.holders, after.waiting], [[], []]);
    });

    it('a higher priority waiter goes first, and a holder is not preempted', async () => {
      const u = makeUrl(store, 'priority');
      const opts = (label, o) => ({ ttl: TTL, pollInterval: POLL, label, ...o });
      const holder = await lease.acquire(u, opts('holder', { queue: true }));
      const order = [];
      const low = lease.acquire(u, opts('low', { queue: true })).then((l) => (order.push('low'), l));
      await until(async () => labels((await lease.status(u)).waiting).join() === 'low', 30_000, 'low to wait');
      const high = lease.acquire(u, opts('high', { priority: 5 })).then((l) => (order.push('high'), l));
      // Listed in the order they will be granted: the later, higher priority first.
      await until(async () => labels((await lease.status(u)).waiting).join() === 'high,low', 30_000, 'high to wait');
      assert.deepEqual(order, [], 'a priority preempted the holder');
      // Each waiter's priority, and how often it was passed over, as the status shows them.
      const standing = async () => (await lease.status(u)).waiting.map((w) => [w.priority, w.passed]);
      assert.deepEqual(await standing(), [[5, 0], [0, 0]]);
      await holder.release();
      const first = await high;
      assert.ok(first.epoch > holder.epoch);
      assert.deepEqual(labels((await lease.status(u)).waiting), ['low']);
      // The high one, joined later, went first: the low one was passed over once.
      assert.deepEqual(await standing(), [[0, 1]]);
      await first.release();
      const second = await low;
      assert.ok(second.epoch > first.epoch);
      assert.deepEqual(order, ['high', 'low']);
      await second.release();
    });

    // Issue 23, "Preemption of a queued lock"; mirrors python/tests/test_queue.py's
    // test_preempt_takes_a_queued_lock_at_once_ahead_of_the_waiters.
    it('preempt takes a queued lock at once, ahead of a waiter, and the holder loses it as preempted', async () => {
      const u = makeUrl(store, 'preempt');
      const holder = await lease.acquire(u, { ttl: 3000, pollInterval: POLL, label: 'old', queue: true });
      const lost = holder.lost.catch((e) => e);
      // A key of its own: the stores are shared with every suite (and 'data' beside the lock
      // would be another lease's object).
      const data = `node-preempt-${process.pid}-${Date.now()}-data`;
      await holder.fencedPut(data, 'old');
      let waiterGranted = false;
      const waiter = lease.acquire(u, { ttl: TTL, pollInterval: POLL, label: 'waiter', queue: true }).then((l) => ((waiterGranted = true), l));
      await until(async () => labels((await lease.status(u)).waiting).join() === 'waiter', 30_000, 'the waiter to wait');
      const taker = await lease.acquire(u, { ttl: TTL, wait: 0, label: 'new', queue: true, preempt: 'every-effect-fenced' });
      assert.ok(taker.epoch > holder.epoch);
      const s = await lease.status(u);
      assert.deepEqual([labels(s.holders), labels(s.waiting)], [['new'], ['waiter']]);
      await taker.fencedPut(data, 'new');
      // The old holder still believes until its next confirmation, but its write is refused.
      await assert.rejects(holder.fencedPut(data, 'stale'), { code: 'LEASE_FENCED' });
      const e = await lost;
      assert.equal(e.code, 'LEASE_LOST');
      assert.match(holder.lostReason, /preempted/);
      assert.equal(waiterGranted, false, 'the waiter waits for the preemptor');
      await taker.release();
      const w = await waiter;
      assert.ok(w.epoch > taker.epoch);
      await w.release();
    });

    it('a semaphore of 2 with 4 callers', async () => {
      const u = makeUrl(store, 'sem');
      let running = 0;
      let most = 0;
      const work = async (i) => {
        const l = await lease.acquire(u, { ttl: TTL, permits: 2, pollInterval: POLL, wait: 60_000, label: `s${i}` });
        assert.equal(l.grant.permits, 2);
        running++;
        most = Math.max(most, running);
        await sleep(200);
        running--;
        await l.release();
      };
      await Promise.all([0, 1, 2, 3].map(work));
      assert.equal(most, 2);
    });

    it('byte ranges and try-once', async () => {
      const u = makeUrl(store, 'ranges');
      const a = await lease.acquire(u, { ttl: TTL, range: [0, 100], wait: 0 });
      const b = await lease.tryAcquire(u, { ttl: TTL, range: [100, 200] });
      assert.deepEqual(b.grant.range, [100, 200]);
      await assert.rejects(lease.acquire(u, { ttl: TTL, range: [50, 150], wait: 0 }), { code: 'LEASE_HELD' });
      assert.equal(await lease.tryAcquire(u, { ttl: TTL, range: [199, 300] }), null);
      const s = await lease.status(u);
      assert.deepEqual(s.holders.map((p) => p.scope), [{ start: 0, end: 100 }, { start: 100, end: 200 }]);
      await a.release();
      await b.release();
      const p = await lease.acquire(u, { ttl: TTL, scope: 'tables/users', wait: 0 });
      assert.equal(p.grant.scope, 'tables/users');
      assert.equal(await lease.tryAcquire(u, { ttl: TTL, scope: 'tables' }), null);
      assert.deepEqual((await lease.status(u)).holders[0].scope, { path: 'tables/users' });
      await p.release();
    });

    // Issue 22: holders of disjoint ranges do not fence each other; readers fence what they
    // read, so a stale writer's write never lands under them.
    it('fencing per scope and for readers', async () => {
      const u = makeUrl(store, 'fence');
      // Keys beside the lock, unique to this run (moto's bucket is shared by every test).
      const [blob, data, none] = ['blob', 'data', 'none'].map((k) => `node-fence-${process.pid}-${Date.now()}-${k}`);
      const a = await lease.acquire(u, { ttl: TTL, range: [0, 100], wait: 0 });
      const b = await lease.acquire(u, { ttl: TTL, range: [100, 200], wait: 0 });
      assert.deepEqual(lease.parseToken(a.token), { lease: a.url, epoch: a.epoch, holder: a.holder.id, shared: false, scope: null, range: [0, 100] });
      await a.fencedUpdate(blob, (old) => `${old ? old.data : ''}a`);
      await b.fencedUpdate(blob, (old) => `${old ? old.data : ''}b`);
      await a.fencedUpdate(blob, (old) => `${old.data}a`); // not fenced by b's later token
      await a.release();
      await b.release();

      const writer = await lease.acquire(u, { ttl: TTL, queue: true, wait: 0 });
      await writer.fencedPut(data, 'v0');
      const seen = await writer.fencedRead(data); // an exclusive holder may fence-read too
      assert.equal(seen.data.toString(), 'v0');
      await writer.release(); // its grant ended; the object stays in its hands
      const readers = [];
      for (let i = 0; i < 2; i++) {
        const r = await lease.acquire(u, { ttl: TTL, shared: true, wait: 0 });
        assert.ok(r.token.endsWith(';shared'), r.token);
        assert.equal(lease.parseToken(r.token).shared, true);
        assert.equal((await r.fencedRead(data)).data.toString(), 'v0');
        assert.equal(await r.fencedRead(none), null);
        readers.push(r);
      }
      await assert.rejects(writer.fencedPut(data, 'v1', { ifVersion: seen.version }), { code: 'LEASE_FENCED', epoch: readers[1].epoch });
      await assert.rejects(writer.fencedPut(data, 'v1'), { code: 'LEASE_FENCED' });
      await assert.rejects(writer.fencedPut(none, 'x', { ifAbsent: true }), { code: 'LEASE_FENCED' });
      await assert.rejects(readers[0].fencedPut(data, 'x'), { code: 'LEASE_INVALID', message: /fenced_read/ });
      assert.equal((await readers[0].fencedRead(data)).data.toString(), 'v0');
      assert.equal((await lease.fencedGet(u, { key: none })), null);
      const gate = new lease.FencingGate();
      await gate.admit('doc', readers[0]);
      await assert.rejects(gate.admit('doc', writer.token), { code: 'LEASE_FENCED' });
      for (const r of readers) await r.release();
    });
  });
}

describe('queued lock options', () => {
  it('a plain lease has no grant and null queue keys', async () => {
    const u = makeUrl('file', 'plain');
    const l = await lease.acquire(u, { ttl: TTL });
    assert.equal(l.grant, null);
    const s = await lease.status(u);
    assert.deepEqual([s.permits, s.holders, s.waiting], [null, null, null]);
    await l.release();
  });

  it('an AbortSignal cancels a queued wait', async () => {
    const u = makeUrl('file', 'abort');
    const w = await lease.acquire(u, { ttl: TTL, queue: true });
    const ac = new AbortController();
    const p = lease.acquire(u, { ttl: TTL, shared: true, signal: ac.signal });
    await until(async () => (await lease.status(u)).waiting.length === 1, 30_000, 'the reader to wait');
    ac.abort();
    await assert.rejects(p, { name: 'AbortError' });
    await until(async () => (await lease.status(u)).waiting.length === 0, 30_000, 'the reader to leave');
    await w.release();
  });

  it('wrong types throw TypeError, bad values LEASE_INVALID', async () => {
    const u = makeUrl('file', 'bad');
    for (const o of [{ shared: 1 }, { queue: 'yes' }, { permits: '2' }, { scope: 5 }, { range: [1] }, { range: '0..4' }, { range: [0, '4'] }, { wakeHints: false }, { wakeHints: ['127.0.0.1'] }, { priority: '1' }]) {
      await assert.rejects(lease.acquire(u, { wait: 0, ...o }), TypeError, JSON.stringify(o));
      await assert.rejects(lease.tryAcquire(u, o), TypeError, JSON.stringify(o));
    }
    for (const o of [
      { permits: 0 },
      { permits: -1 },
      { permits: 1.5 },
      { permits: 65537 },
      { scope: '' },
      { scope: 'a/../b' },
      { range: [5, 1] },
      { range: [-1, 4] },
      { range: [0.5, 4] },
      { range: [0, 4], scope: 'a' },
      { shared: true, pollInterval: 0 },
      { queue: true, wakeHints: 'on-demand' },
      { queue: true, wakeHints: '127.0.0' },
      { queue: true, wakeHints: 'udp:127.0.0.1:9' },
      { queue: true, wakeHints: '' },
      { priority: 1.5 },
      { priority: 1e10 },
      { priority: -1e10 },
      { priority: NaN },
    ]) {
      await assert.rejects(lease.acquire(u, { wait: 0, ...o }), { code: 'LEASE_INVALID' }, JSON.stringify(o));
    }
    await assert.rejects(lease.tryAcquire(u, { wakeHints: 'nope' }), { code: 'LEASE_INVALID', message: /loopback/ });
  });

  // Issue 23: askYield/yieldReason (acquire only) and preempt; mirrors python/tests/test_queue.py's
  // test_bad_yield_and_preempt_options.
  it('bad yield and preempt options: TypeError for a wrong type, LEASE_INVALID naming the one value', async () => {
    const u = makeUrl('file', 'bad-yield');
    for (const o of [{ preempt: true }, { preempt: 1 }]) {
      for (const p of [lease.acquire(u, { wait: 0, ...o }), lease.tryAcquire(u, o)]) {
        await assert.rejects(p, { name: 'TypeError', message: /every-effect-fenced/ }, JSON.stringify(o));
      }
    }
    for (const o of [{ askYield: 'yes' }, { askYield: true, yieldReason: 5 }]) {
      await assert.rejects(lease.acquire(u, { wait: 0, ...o }), TypeError, JSON.stringify(o));
    }
    for (const o of [{ askYield: true }, { yieldReason: 'why' }]) {
      await assert.rejects(lease.tryAcquire(u, o), { name: 'TypeError', message: /Unknown option/ }, JSON.stringify(o));
    }
    for (const [o, says] of [
      [{ preempt: 'yes' }, /every-effect-fenced/],
      [{ preempt: 'Never ' }, /every-effect-fenced/],
      [{ preempt: 'every-effect' }, /believing/],
      [{ preempt: 'every-effect-fenced', shared: true }, /only an exclusive request/],
      [{ yieldReason: 'why' }, /set ask_yield/],
      [{ askYield: true, yieldReason: 'x'.repeat(257) }, /at most 256 bytes/],
    ]) {
      await assert.rejects(lease.acquire(u, { wait: 0, ...o }), { code: 'LEASE_INVALID', message: says }, JSON.stringify(o));
      if (!('askYield' in o) && !('yieldReason' in o)) {
        await assert.rejects(lease.tryAcquire(u, o), { code: 'LEASE_INVALID', message: says }, JSON.stringify(o));
      }
    }
    assert.equal((await lease.status(u)).state, 'free');
    assert.equal((await lease.status(u)).state, 'free');
  });
});

// Issue 23, "Yield on request": the holder learns it through `onYield` / `yieldRequest` /
// `yieldRequested`, keeps the lock, releases, and the waiter named by `to` gets it. Mirrors
// python/tests/test_queue.py's test_a_yield_request_reaches_the_holder_and_it_hands_over.
for (const store of ['file', 'moto']) {
  const skip = store === 'moto' && !process.env.LEASE_TEST_S3_MOTO && !inCI() ? 'LEASE_TEST_S3_MOTO is not set' : false;
  describe(`yield on request [${store}]`, { skip }, () => {
    it('a yield request reaches the holder and it hands over', async () => {
      const u = makeUrl(store, 'yield');
      const holder = await lease.acquire(u, { ttl: TTL, pollInterval: POLL, queue: true, label: 'holder' });
      assert.equal(holder.yieldRequested, null);
      const told = [];
      holder.onYield((y) => told.push(y));
      let waiter = null;
      const w = lease.acquire(u, { ttl: TTL, pollInterval: POLL, queue: true, label: 'waiter' }).then((l) => (waiter = l));
      await until(async () => labels((await lease.status(u)).waiting).join() === 'waiter', 30_000, 'the waiter');
      const waiterId = (await lease.status(u)).waiting[0].holder.id;

      const r = await lease.askYield(u, { to: waiterId.slice(0, 8), reason: 'deploy', by: 'op' });
      assert.deepEqual([r.tokens, r.by, r.to, r.reason], [[holder.epoch], 'op', waiterId, 'deploy']);
      const y = await holder.yieldRequest;
      assert.deepEqual([y.by, y.to, y.reason], ['op', waiterId, 'deploy']);
      await until(async () => told.length === 1, 30_000, 'onYield');
      assert.deepEqual([told[0].by, told[0].to, told[0].reason], ['op', waiterId, 'deploy']);
      assert.deepEqual(holder.yieldRequested, y);
      assert.equal(holder.held, true, 'a yield request is not a loss');
      assert.equal(waiter, null);

      await holder.release();
      const got = await w;
      assert.ok(got.epoch > holder.epoch);
      await got.release();
      assert.equal(told.length, 1);
    });

    // Mirrors python/tests/test_queue.py's
    // test_a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside.
    it('a waiter that asks to yield is handed the lock when the holder steps aside', async () => {
      const u = makeUrl(store, 'ask-yield');
      const holder = await lease.acquire(u, { ttl: TTL, pollInterval: POLL, queue: true, label: 'holder' });
      const told = [];
      holder.onYield((y) => told.push(y));
      let waiter = null;
      const w = lease
        .acquire(u, { ttl: TTL, pollInterval: POLL, label: 'waiter', askYield: true, yieldReason: 'deploy' })
        .then((l) => (waiter = l));
      const y = await holder.yieldRequest;
      const waiting = (await lease.status(u)).waiting;
      assert.deepEqual(labels(waiting), ['waiter']);
      const waiterId = waiting[0].holder.id;
      // The waiter asks for itself: it is both who asks and whom to hand the lock to.
      assert.deepEqual([y.by, y.to, y.reason], [waiterId, waiterId, 'deploy']);
      await until(async () => told.length === 1, 30_000, 'onYield');
      assert.deepEqual([told[0].by, told[0].to, told[0].reason], [waiterId, waiterId, 'deploy']);
      assert.equal(holder.held, true, 'a yield request is not a loss');
      assert.equal(waiter, null);
      await holder.release();
      const got = await w;
      assert.ok(got.grant !== null && got.epoch > holder.epoch);
      assert.equal(got.holder.id, waiterId);
      await got.release();
      assert.equal(told.length, 1);
    });

    it("askYield refuses a bad to, and asks a plain lease's holder without one", async () => {
      const u = makeUrl(store, 'yield-bad');
      const holder = await lease.acquire(u, { ttl: TTL, queue: true, wait: 0 });
      try {
        await assert.rejects(lease.askYield(u, { to: 'no-such-waiter' }), { code: 'LEASE_INVALID', message: /no-such-waiter/ });
        await assert.rejects(lease.askYield(u, { to: '' }), { code: 'LEASE_INVALID' });
        await assert.rejects(lease.askYield(u, { to: 3 }), TypeError);
        await assert.rejects(lease.askYield(u, { tto: 'x' }), TypeError);
      } finally {
        await holder.release();
      }
      const plain = makeUrl(store, 'yield-plain');
      const p = await lease.acquire(plain, { ttl: TTL });
      try {
        // A plain lease is asked through KEY.yield, without `to` (it has no waiters).
        await assert.rejects(lease.askYield(plain, { to: 'x' }), { code: 'LEASE_INVALID', message: /no waiters/ });
        const r = await lease.askYield(plain, { reason: 'deploy' });
        assert.deepEqual([r.tokens, r.to], [[p.epoch], undefined]);
      } finally {
        await p.release();
      }
    });
  });
}
