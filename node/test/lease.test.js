// The Lease API on each store (file, and S3 on moto): mirrors python/tests/test_lease.py and
// test_async.py by name where the two languages meet.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');
const { it } = require('node:test');

const { lease, MARGIN, eachStore, breakLease, sleep, until, makeUrl } = require('../test-support/helpers.js');

eachStore('lease', (store, url) => {
  it('dispose releases (await using)', async () => {
    const u = url('dispose');
    const l = await lease.acquire(u, { ttl: 30_000, label: 'disposer' });
    assert.equal(typeof l.epoch, 'number');
    assert.ok(l.epoch >= 1);
    assert.equal(l.held, true);
    assert.equal(typeof l[Symbol.asyncDispose], 'function');
    // What `await using l = …` does at the end of its block (Node 20 needs a flag or
    // TypeScript for the syntax itself).
    await l[Symbol.asyncDispose]();
    assert.equal(l.held, false);
    assert.equal(l.remaining(), 0);
    const s = await lease.status(u);
    assert.equal(s.state, 'released');
    assert.equal(s.epoch, l.epoch);
    assert.equal(s.holder.label, 'disposer');
    // The next holder gets it at once, at a higher epoch.
    const next = await lease.acquire(u, { wait: 0 });
    assert.ok(next.epoch > l.epoch);
    await next.release();
  });

  it('release is idempotent', async () => {
    const l = await lease.acquire(url('idem'));
    await l.release();
    await l.release();
    await l[Symbol.asyncDispose]();
  });

  it('tryAcquire returns null while held', async () => {
    const u = url('try');
    const first = await lease.tryAcquire(u, { ttl: 30_000 });
    assert.ok(first instanceof lease.Lease);
    assert.equal(await lease.tryAcquire(u, { ttl: 30_000 }), null);
    await first.release();
    const again = await lease.tryAcquire(u);
    assert.ok(again instanceof lease.Lease);
    assert.ok(again.epoch > first.epoch);
    await again.release();
  });

  it('wait zero rejects held with the holder', async () => {
    const u = url('held');
    const l = await lease.acquire(u, { label: 'the-holder' });
    try {
      await assert.rejects(lease.acquire(u, { wait: 0 }), (e) => {
        assert.ok(e instanceof Error);
        assert.equal(e.code, 'LEASE_HELD');
        assert.equal(e.kind, 'held');
        assert.equal(e.holder.label, 'the-holder');
        assert.equal(e.holder.id, l.holder.id);
        assert.equal(e.epoch, l.epoch);
        return true;
      });
    } finally {
      await l.release();
    }
  });

  it('timeout rejects LEASE_TIMEOUT after about the requested time', async () => {
    const u = url('timeout');
    const l = await lease.acquire(u);
    try {
      const t0 = performance.now();
      await assert.rejects(lease.acquire(u, { wait: 300 }), { code: 'LEASE_TIMEOUT', name: 'Error' });
      // Not before the wait ran out (no upper bound: a slow machine only makes it later).
      assert.ok(performance.now() - t0 >= 290, `rejected after ${performance.now() - t0} ms`);
    } finally {
      await l.release();
    }
  });

  it('a waiter gets the lease when released', async () => {
    const u = url('waiter');
    const l = await lease.acquire(u);
    const waiting = lease.acquire(u, { wait: 30_000, label: 'waiter' });
    await sleep(200);
    await l.release();
    const w = await waiting;
    assert.equal(w.holder.label, 'waiter');
    assert.ok(w.epoch > l.epoch);
    await w.release();
  });

  it('epochs strictly increase', async () => {
    const u = url('epochs');
    const seen = [];
    for (let i = 0; i < 4; i++) {
      const l = await lease.acquire(u);
      seen.push(l.epoch);
      await l.release();
    }
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], String(seen));
  });

  it('renewal keeps the lease held', async () => {
    const l = await lease.acquire(url('renew'), { ttl: 600 });
    try {
      await sleep(1500); // 2.5 ttls
      assert.equal(l.held, true);
      assert.ok(l.ensureHeld(0) > 0);
      const left = await l.renew();
      assert.ok(left > 0 && left <= 600, String(left));
      assert.equal(l.ttl, 600);
    } finally {
      await l.release();
    }
  });

  it('setTtl and setData change a held lease (issue 28)', async () => {
    const u = url('change');
    const l = await lease.acquire(u, { ttl: 30_000, data: '10.0.0.1:80' });
    try {
      const left = await l.setTtl('1m');
      assert.ok(left > 59_000 && left <= 60_000, String(left));
      assert.equal(l.ttl, 60_000);
      assert.equal((await lease.status(u)).ttlMs, 60_000);
      await l.setData('10.0.0.2:80');
      assert.equal((await lease.status(u)).data, '10.0.0.2:80');
      await l.setData(null);
      assert.equal((await lease.status(u)).data, null);
      await assert.rejects(l.setTtl(10), (e) => e.code === 'LEASE_INVALID' && /out of range/.test(e.message));
      await assert.rejects(l.setTtl({}), TypeError);
      await assert.rejects(l.setData(5), TypeError);
    } finally {
      await l.release();
    }
    await assert.rejects(l.setTtl(30_000), (e) => e.code === 'LEASE_LOST');
  });

  it('an owner does not wait for what it holds (issue 28)', async () => {
    const u = url('owner');
    const l = await lease.acquire(u, { ttl: 30_000, owner: 'job 7' });
    try {
      // The same owner rejects at once (a wait would end in LEASE_TIMEOUT); no owner waits.
      await assert.rejects(
        lease.acquire(u, { owner: 'job 7', wait: 5_000 }),
        (e) => e.code === 'LEASE_HELD' && /would wait for itself/.test(e.message),
      );
      await assert.rejects(lease.acquire(u, { wait: 300 }), { code: 'LEASE_TIMEOUT' });
      await assert.rejects(lease.acquire(u, { owner: 7 }), TypeError);
    } finally {
      await l.release();
    }
  });

  it('renewals go on while the event loop is blocked', async () => {
    const u = url('blocked');
    // ttl 3 s, not less: status() judges expiry from the store's clock, whose timestamps have
    // 1 s resolution on S3, so with a sub-second ttl a live lease could read as 'expired'.
    const l = await lease.acquire(u, { ttl: 3000 });
    try {
      const before = (await lease.status(u)).renewedAt;
      // Block this thread past the ttl: renewals run on the library's own threads.
      const end = performance.now() + 3500;
      while (performance.now() < end);
      assert.equal(l.held, true, 'still held after the event loop was blocked past the ttl');
      assert.ok(l.remaining() > 0);
      const s = await lease.status(u);
      assert.equal(s.state, 'held');
      assert.equal(s.holder.id, l.holder.id);
      assert.notEqual(s.renewedAt, before, 'renewed meanwhile');
    } finally {
      await l.release();
    }
  });

  it('remaining and ensureHeld min', async () => {
    const l = await lease.acquire(url('remaining'), { ttl: 10_000 });
    try {
      const r = l.remaining();
      assert.ok(r > 5_000 && r <= 10_000, String(r));
      assert.ok(l.ensureHeld() > 0);
      assert.ok(l.ensureHeld(1_000) > 1_000);
      assert.throws(() => l.ensureHeld(20_000), { code: 'LEASE_LOST' });
      assert.equal(l.token, `${l.url}#${l.epoch}@${l.holder.id}`);
      assert.deepEqual(lease.parseToken(l.token), { lease: l.url, epoch: l.epoch, holder: l.holder.id, shared: false, scope: null, range: null });
    } finally {
      await l.release();
    }
    assert.throws(() => l.ensureHeld(), { code: 'LEASE_LOST' });
  });

  it('lost after break aborts l.signal and rejects l.lost', async () => {
    const u = url('lost');
    const l = await lease.acquire(u, { ttl: 1500 });
    const signal = l.signal;
    const lost = l.lost;
    assert.equal(signal.aborted, false);
    let events = 0;
    signal.addEventListener('abort', () => events++);
    breakLease(u);
    // The holder learns at its next renewal (every ttl/3).
    await assert.rejects(
      Promise.race([lost, sleep(1500 + MARGIN).then(() => 'not lost in time')]),
      (e) => {
        assert.equal(e.code, 'LEASE_LOST');
        assert.equal(e.url, l.url);
        assert.equal(e.epoch, l.epoch);
        assert.match(e.holder.label, /^lease break/);
        return true;
      },
    );
    await until(() => signal.aborted, MARGIN, 'signal to abort');
    assert.equal(signal.reason.code, 'LEASE_LOST');
    assert.equal(events, 1);
    assert.equal(l.held, false);
    assert.equal(l.remaining(), 0);
    assert.match(l.lostReason, /broken/);
    assert.throws(() => l.ensureHeld(), { code: 'LEASE_LOST', message: /lost/ });
    await assert.rejects(l.release(), { code: 'LEASE_LOST' });
    await assert.rejects(l[Symbol.asyncDispose](), { code: 'LEASE_LOST' });
    // Looked at only after the loss: already aborted and rejected.
    const late = await lease.acquire(u, { wait: 10_000 });
    await late.release();
    assert.equal(l.signal, signal);
  });

  // Issue 23; mirrors python/tests/test_lease.py's
  // test_preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted.
  it('preempt takes a live lease at once and the holder loses it as preempted', async () => {
    const u = url('preempt');
    const holder = await lease.acquire(u, { ttl: 3000, label: 'old' });
    const reasons = [];
    holder.onHealth((e) => {
      if (e.health === 'lost') reasons.push(e.reason);
    });
    const lost = holder.lost.catch((e) => e);
    // Without the mode: held.
    await assert.rejects(lease.acquire(u, { ttl: 3000, wait: 0 }), { code: 'LEASE_HELD' });
    // With it: at once, though it may not wait (wait 0, far less than the holder's ttl).
    const taker = await lease.acquire(u, { ttl: 3000, wait: 0, label: 'new', preempt: 'every-effect-fenced' });
    assert.ok(taker.epoch > holder.epoch);
    const s = await lease.status(u);
    assert.deepEqual([s.holder.label, s.epoch], ['new', taker.epoch]);
    // The old holder learns it at its next renewal (every ttl/3).
    const e = await lost;
    assert.equal(e.code, 'LEASE_LOST');
    await until(() => reasons.length === 1, 30_000, 'the lost health event');
    assert.deepEqual(reasons, ['preempted']);
    assert.equal(holder.held, false);
    assert.match(holder.lostReason, /preempted/);
    await assert.rejects(holder.release(), { code: 'LEASE_LOST' });
    assert.equal(taker.held, true);
    await taker.release();
  });

  it('a lost promise nobody observes is not an unhandled rejection', async () => {
    const u = url('unobserved');
    const l = await lease.acquire(u, { ttl: 1500 });
    void l.lost; // created, never awaited
    const unhandled = [];
    const onUnhandled = (r) => unhandled.push(r);
    process.on('unhandledRejection', onUnhandled);
    try {
      breakLease(u);
      await until(() => l.signal.aborted, 1500 + MARGIN, 'the loss');
      await sleep(50);
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('abort of a waiting acquire returns within 100 ms', async () => {
    const u = url('abort');
    const holder = await lease.acquire(u, { label: 'holder' });
    try {
      const ac = new AbortController();
      const waiting = lease.acquire(u, { signal: ac.signal, label: 'waiter' });
      await sleep(300);
      const t0 = performance.now();
      ac.abort();
      await assert.rejects(waiting, (e) => {
        assert.equal(e.name, 'AbortError');
        assert.equal(e.code, 'ABORT_ERR');
        assert.equal(e.cause, ac.signal.reason);
        return true;
      });
      const took = performance.now() - t0;
      // The one timed assertion the issue names (measured here in ~1-5 ms; 100 ms leaves
      // room for a loaded machine).
      assert.ok(took <= 100, `the aborted acquire took ${took.toFixed(1)} ms to reject`);
      // An already aborted signal rejects without trying.
      await assert.rejects(lease.acquire(u, { signal: AbortSignal.abort() }), { name: 'AbortError' });
    } finally {
      await holder.release();
    }
    // The cancelled waiter did not take the lease afterwards.
    await sleep(300);
    const s = await lease.status(u);
    assert.equal(s.state, 'released');
    assert.equal(s.holder.label, 'holder');
  });

  it('the event loop stays responsive while 100 acquires wait', async () => {
    const u = url('loop');
    const holder = await lease.acquire(u);
    const ac = new AbortController();
    const waits = [];
    for (let i = 0; i < 100; i++) waits.push(lease.acquire(u, { signal: ac.signal }).catch((e) => e));
    const gaps = [];
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      gaps.push(now - last);
      last = now;
    }, 10);
    await sleep(1000);
    clearInterval(timer);
    ac.abort();
    const results = await Promise.all(waits);
    await holder.release();
    assert.ok(results.every((e) => e.name === 'AbortError'), 'every waiter was aborted');
    // A 10 ms timer over one second: a blocked loop would fire a handful of times.
    assert.ok(gaps.length >= 50, `the timer fired ${gaps.length} times in 1 s`);
    const sorted = [...gaps].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    assert.ok(median < 30, `median gap ${median.toFixed(1)} ms (timer every 10 ms)`);
  });

  it('break waits out a holder that cannot hear of it', async () => {
    // Issue 11 item 3: the holder is paused (SIGSTOP) and learns nothing of the break, so
    // nobody may take the lease before its deadline has surely passed.
    const u = url('break-wait');
    const script = `
      const lease = require('bucket-lease');
      lease.acquire(process.argv[1], { ttl: 2000, label: 'victim' }).then((l) => {
        console.log(JSON.stringify({ epoch: l.epoch }));
        process.kill(process.pid, 'SIGSTOP');
      });`;
    const child = spawn(process.execPath, ['-e', script, u], {
      cwd: path.join(__dirname, '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
      const { epoch: victimEpoch } = JSON.parse((await lines.next()).value);
      const t0 = performance.now();
      breakLease(u);
      const s = await lease.status(u);
      assert.equal(s.state, 'broken');
      assert.ok(s.epoch > victimEpoch);
      assert.match(s.holder.label, /^lease break/);
      assert.ok(s.expiresInMs > 0);
      assert.equal(await lease.tryAcquire(u), null);
      const l = await lease.acquire(u, { ttl: 5000, wait: 30_000 });
      const took = performance.now() - t0;
      try {
        assert.ok(l.epoch > s.epoch);
      } finally {
        await l.release();
      }
      // Not before the broken holder's ttl (2 s) could have run out; within ttl + grace
      // (1 s) + resolution (1 s on S3) + polling, with margin.
      assert.ok(took >= 2000 && took < 2000 + 1000 + 1000 + MARGIN, `took ${took.toFixed(0)} ms`);
    } finally {
      child.kill('SIGKILL');
      await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', resolve)));
    }
  });

  it('a broken holder that releases lets the next one in at once', async () => {
    const u = url('break-ack');
    const l = await lease.acquire(u, { ttl: 30_000 });
    breakLease(u);
    assert.equal((await lease.status(u)).state, 'broken');
    await assert.rejects(l.release(), { code: 'LEASE_LOST', message: /broken/ });
    const t0 = performance.now();
    const after = await lease.acquire(u, { ttl: 30_000, wait: 10_000 });
    try {
      assert.ok(after.epoch > l.epoch);
      assert.ok(performance.now() - t0 < MARGIN);
    } finally {
      await after.release();
    }
  });

  it('status of a free lease and the json shape', async () => {
    const u = url('status');
    const free = await lease.status(u);
    assert.equal(free.state, 'free');
    assert.equal(free.epoch ?? null, null);
    const l = await lease.acquire(u, { ttl: 20_000, label: 'st', data: 'payload' });
    try {
      const s = await lease.status(u);
      assert.equal(s.state, 'held');
      assert.equal(s.epoch, l.epoch);
      assert.equal(s.ttlMs, 20_000);
      assert.equal(s.data, 'payload');
      assert.equal(s.holder.label, 'st');
      assert.equal(s.holder.pid, process.pid);
      assert.equal(typeof s.holder.host, 'string');
      assert.match(s.holder.client, /\(node\)$/);
      // The time until a waiter may take over: ttl + grace (2 s at this ttl) + the clock's
      // resolution (1 s on S3) after the last write, which was just now.
      assert.ok(s.expiresInMs > 20_000 && s.expiresInMs <= 20_000 + 2_000 + 1_000, String(s.expiresInMs));
      assert.equal(typeof s.acquiredAt, 'string');
    } finally {
      await l.release();
    }
  });

  it('watch reports changes', async () => {
    const u = url('watch');
    const ac = new AbortController();
    const seen = [];
    const done = (async () => {
      try {
        for await (const s of lease.watch(u, { pollInterval: 100, signal: ac.signal })) {
          // The record a first take creates, released and acquired by nobody, before its take
          // (docs/protocol.md §5): seen only when a poll falls between the two.
          if (s.state === 'released' && s.acquiredAt === null) continue;
          seen.push(s.state);
          if (s.state === 'released') break;
        }
        return 'ended';
      } catch (e) {
        return e;
      }
    })();
    await until(() => seen.length >= 1, MARGIN, 'the first status');
    const l = await lease.acquire(u);
    await until(() => seen.includes('held'), MARGIN, 'held');
    await l.release();
    assert.equal(await done, 'ended');
    assert.deepEqual(seen, ['free', 'held', 'released']);
    // Aborting ends an iteration with an AbortError.
    const it2 = lease.watch(u, { pollInterval: 100, signal: ac.signal });
    assert.equal((await it2.next()).value.state, 'released');
    const pending = it2.next();
    ac.abort();
    await assert.rejects(pending, { name: 'AbortError' });
  });

  it('election', async () => {
    const u = url('election');
    const a = new lease.Election(u, { ttl: 5_000, label: 'node-a', data: 'addr-a' });
    const b = new lease.Election(u, { ttl: 5_000, label: 'node-b' });
    assert.equal(await a.leader(), null);
    const la = await a.campaign();
    assert.equal(a.isLeader, true);
    const leader = await b.leader();
    assert.equal(leader.holder.label, 'node-a');
    assert.equal(leader.epoch, la.epoch);
    assert.equal(leader.data, 'addr-a');
    const ac = new AbortController();
    const observed = [];
    const observing = (async () => {
      try {
        for await (const l of b.observe({ pollInterval: 100, signal: ac.signal })) {
          observed.push(l && l.holder.label);
        }
      } catch (e) {
        return e;
      }
    })();
    const bCampaign = b.campaign();
    await sleep(200);
    await a.resign();
    assert.equal(a.isLeader, false);
    const lb = await bCampaign;
    assert.ok(lb.epoch > la.epoch);
    assert.equal(b.isLeader, true);
    await until(() => observed.includes('node-b'), MARGIN, 'node-b observed');
    ac.abort();
    assert.equal((await observing).name, 'AbortError');
    assert.equal(observed[0], 'node-a');
    await b.resign();
    // A campaign can be aborted while waiting.
    const c = new lease.Election(u, { label: 'c' });
    const hold = await lease.acquire(u);
    const ac2 = new AbortController();
    const waiting = c.campaign({ signal: ac2.signal });
    await sleep(100);
    ac2.abort();
    await assert.rejects(waiting, { name: 'AbortError' });
    await hold.release();
  });
});

it('a file URL object and a plain path are lease urls', async () => {
  const u = makeUrl('file', 'url-object');
  const asUrl = new URL(u);
  const path = asUrl.pathname;
  const l = await lease.acquire(asUrl, { ttl: 5_000 });
  try {
    assert.equal(l.url, u);
    assert.equal(await lease.tryAcquire(path), null);
    assert.equal((await lease.status(asUrl)).holder.id, l.holder.id);
  } finally {
    await l.release();
  }
});

it('memory store works in process', async () => {
  const u = makeUrl('memory', 'mem');
  const l = await lease.acquire(u, { ttl: 1000 });
  assert.equal(await lease.tryAcquire(u), null);
  await l.release();
  assert.equal((await lease.status(u)).state, 'released');
});

it('ESM import gives the same module', async () => {
  const esm = await import('bucket-lease');
  assert.equal(esm.acquire, lease.acquire);
  assert.equal(esm.Lease, lease.Lease);
  assert.equal(esm.default, lease);
  assert.equal(esm.version, lease.version);
});
