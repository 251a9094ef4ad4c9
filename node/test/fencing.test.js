// Fencing the store enforces, through the Node API, on each store (file, and S3 on moto): zombie
// writes are rejected after a takeover, objects carry their writer's epoch and holder,
// version-conditional writes refuse a changed object (LEASE_CONFLICT) and fencedUpdate loses no
// update, the gate admits by the highest epoch, tokens name their holder. Mirrors
// python/tests/test_fencing.py.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');
const { it } = require('node:test');

const { lease, eachStore, breakLease, keyOf, makeUrl, sleep, storeBase, tmpDir, uid } = require('../test-support/helpers.js');

const dataKey = () => `node-data/${uid()}`;

// What the core says when a conditional fenced write's outcome is unknown.
const OUTCOME_UNKNOWN = 'the outcome of a fenced write';

/** One increment of a counter kept as decimal text (absent: 0). */
const counter = (obj) => String(obj === null ? 1 : Number(obj.data.toString()) + 1);

eachStore('fencing', (store, url) => {
  it('fencedPut stamps the epoch and fencedGet reads it', async () => {
    const u = url('stamp');
    const key = dataKey();
    assert.equal(await lease.fencedGet(u, { key }), null);
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      const v1 = await l.fencedPut(key, Buffer.from('one'));
      assert.equal(typeof v1, 'string');
      let got = await lease.fencedGet(u, { key });
      assert.ok(Buffer.isBuffer(got.data));
      assert.equal(got.data.toString(), 'one');
      assert.equal(got.epoch, l.epoch);
      assert.equal(got.version, v1);
      assert.equal(got.lease, l.url);
      assert.equal(got.holder, l.holder.id);
      const v2 = await l.fencedPut(key, 'two \u00e9'); // a string is written as UTF-8
      assert.notEqual(v2, v1);
      got = await lease.fencedGet(u, { key });
      assert.equal(got.data.toString('utf8'), 'two \u00e9');
      assert.equal(got.version, v2);
      // A Uint8Array view writes exactly its bytes.
      const big = new Uint8Array([0, 1, 2, 3, 4, 5]);
      await l.fencedPut(key, big.subarray(2, 5));
      got = await lease.fencedGet(u, { key });
      assert.deepEqual([...got.data], [2, 3, 4]);
      // The object's own URL reads it too.
      assert.ok(got.url.includes(key));
      const byUrl = await lease.fencedGet(got.url);
      assert.equal(byUrl.version, got.version);
    } finally {
      await l.release();
    }
  });

  it('a zombie write after break and takeover rejects LEASE_FENCED', async () => {
    const u = url('zombie');
    const key = dataKey();
    const zombie = await lease.acquire(u, { ttl: 30_000, label: 'zombie' });
    await zombie.fencedPut(key, 'old holder');
    breakLease(u, { allowTwoHolders: true });
    const newer = await lease.acquire(u, { ttl: 30_000, wait: 10_000, label: 'newer' });
    try {
      assert.ok(newer.epoch > zombie.epoch);
      await newer.fencedPut(key, 'newer holder');
      await assert.rejects(zombie.fencedPut(key, 'ZOMBIE'), (e) => {
        assert.ok(e instanceof Error);
        assert.equal(e.code, 'LEASE_FENCED');
        assert.equal(e.kind, 'fenced');
        assert.equal(e.epoch, newer.epoch);
        return true;
      });
      // Where deletes are conditional (not fake-gcs-server: see 'fencedDelete').
      if (store !== 'gcs') await assert.rejects(zombie.fencedDelete(key), { code: 'LEASE_FENCED' });
    } finally {
      await newer.release();
    }
    const got = await lease.fencedGet(u, { key });
    assert.equal(got.data.toString(), 'newer holder');
    assert.equal(got.epoch, newer.epoch);
    await assert.rejects(zombie.release(), { code: 'LEASE_LOST' });
  });

  it('a zombie paused with SIGSTOP past its ttl is refused by the store', async () => {
    const u = url('sigstop');
    const key = dataKey();
    const child = spawn(process.execPath, [path.join(__dirname, '..', 'test-support', 'zombie-child.js'), u, key], {
      cwd: path.join(__dirname, '..'),
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const next = async () => JSON.parse((await lines.next()).value);
    try {
      const { ready, epoch: zombieEpoch } = await next();
      assert.equal(ready, true);
      child.kill('SIGSTOP'); // paused: it renews nothing from now on
      // Another process takes over once the zombie's ttl (1 s) and grace have passed.
      const newer = await lease.acquire(u, { ttl: 30_000, wait: 30_000, label: 'newer' });
      try {
        assert.ok(newer.epoch > zombieEpoch);
        await newer.fencedPut(key, 'newer holder');
        child.kill('SIGCONT');
        child.stdin.write('write\n'); // it wakes up and writes at once
        const outcome = await next();
        assert.deepEqual(outcome, { wrote: false, code: 'LEASE_FENCED', epoch: newer.epoch });
      } finally {
        await newer.release();
      }
      const got = await lease.fencedGet(u, { key });
      assert.equal(got.data.toString(), 'newer holder');
      assert.equal(got.epoch, newer.epoch);
    } finally {
      child.kill('SIGCONT');
      child.stdin.end();
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)));
    }
  });

  it('a put conditional on an old version rejects LEASE_CONFLICT', async () => {
    // Issue 11 item 6: a holder (epoch n) paused between read and write lands its write while
    // the next holder (n + 1) has read the same value; the newer holder's write, conditional
    // on the version it read, must not land on top of it.
    const u = url('conflict');
    const key = dataKey();
    const old = await lease.acquire(u, { ttl: 30_000, label: 'old' });
    await old.fencedPut(key, '5');
    await old.release(); // the lease moves on; old's handle still writes, as a paused holder would
    const newer = await lease.acquire(u, { ttl: 30_000, wait: 10_000, label: 'new' });
    try {
      assert.ok(newer.epoch > old.epoch);
      const read = await lease.fencedGet(u, { key });
      assert.equal(read.data.toString(), '5');
      assert.equal(read.epoch, old.epoch);
      await old.fencedPut(key, '6'); // lands: nobody with a higher epoch has written yet
      await assert.rejects(newer.fencedPut(key, '6', { ifVersion: read.version }), (e) => {
        assert.ok(e instanceof Error);
        assert.equal(e.code, 'LEASE_CONFLICT');
        assert.equal(e.code, lease.codes.CONFLICT);
        assert.equal(e.kind, 'conflict');
        assert.equal(e.retryable, false);
        assert.match(e.message, /changed since/);
        return true;
      });
      const got = await lease.fencedGet(u, { key });
      assert.equal(got.data.toString(), '6'); // nothing lost
      assert.equal(got.epoch, old.epoch);
      // An object that exists is not absent.
      await assert.rejects(newer.fencedPut(key, 'x', { ifAbsent: true }), { code: 'LEASE_CONFLICT', message: /created since/ });
      // Read again, decide again.
      const v = await newer.fencedPut(key, '7', { ifVersion: got.version });
      const again = await lease.fencedGet(u, { key });
      assert.equal(again.data.toString(), '7');
      assert.equal(again.version, v);
      assert.equal(again.epoch, newer.epoch);
      assert.equal(again.holder, newer.holder.id);
      // Once a newer epoch has written, the older holder is fenced, with or without the
      // current version.
      await assert.rejects(old.fencedPut(key, '8', { ifVersion: v }), { code: 'LEASE_FENCED', epoch: newer.epoch });
      await assert.rejects(old.fencedPut(key, '8'), { code: 'LEASE_FENCED' });
      await assert.rejects(old.fencedUpdate(key, counter), { code: 'LEASE_FENCED' });
    } finally {
      await newer.release();
    }
  });

  it('a plain put after fencedGet is not atomic', async () => {
    // What ifVersion is for (and what the README warns about): the same interleaving with a
    // plain put silently loses the other writer's update.
    const u = url('not-atomic');
    const key = dataKey();
    const old = await lease.acquire(u, { ttl: 30_000 });
    await old.fencedPut(key, '5');
    await old.release();
    const newer = await lease.acquire(u, { ttl: 30_000, wait: 10_000 });
    try {
      const read = await lease.fencedGet(u, { key });
      await old.fencedPut(key, counter(read)); // 6
      await newer.fencedPut(key, counter(read)); // also 6: one increment lost
      assert.equal((await lease.fencedGet(u, { key })).data.toString(), '6');
    } finally {
      await newer.release();
    }
  });

  it('ifAbsent creates once', async () => {
    const u = url('absent');
    const key = dataKey();
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      const v = await l.fencedPut(key, 'first', { ifAbsent: true });
      await assert.rejects(l.fencedPut(key, 'second', { ifAbsent: true }), { code: 'LEASE_CONFLICT' });
      const got = await lease.fencedGet(u, { key });
      assert.equal(got.data.toString(), 'first');
      assert.equal(got.version, v);
      // A version of an object deleted since conflicts too (where deletes are conditional).
      if (store === 'gcs') return;
      assert.equal(await l.fencedDelete(key), true);
      await assert.rejects(l.fencedPut(key, 'third', { ifVersion: v }), { code: 'LEASE_CONFLICT', message: /deleted since/ });
    } finally {
      await l.release();
    }
  });

  it('fencedUpdate from concurrent calls loses no increment', async () => {
    const u = url('update');
    const key = dataKey();
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      let calls = 0;
      let done = 0; // acknowledged updates
      const unknown = [];
      const sync = (obj) => {
        calls++;
        return counter(obj);
      };
      const later = async (obj) => {
        calls++;
        await sleep(1);
        return Buffer.from(counter(obj));
      };
      // Functions returning a string or a promise of a Buffer, 4 chains of 5 on one lease.
      const chain = async (fn) => {
        try {
          for (let i = 0; i < 5; i++) {
            await l.fencedUpdate(key, fn);
            done++;
          }
        } catch (e) {
          if (e.code !== 'LEASE_UNAVAILABLE' || !e.message.includes(OUTCOME_UNKNOWN)) throw e;
          unknown.push(e);
        }
      };
      await Promise.all([chain(sync), chain(later), chain(sync), chain(later)]);
      const got = await lease.fencedGet(u, { key });
      // Every acknowledged increment counted once; a write of unknown outcome at most once.
      const value = Number(got.data.toString());
      assert.ok(done <= value && value <= done + unknown.length, `${value} after ${done} acknowledged`);
      assert.equal(got.epoch, l.epoch);
      assert.equal(got.holder, l.holder.id);
      assert.ok(calls >= done);
      // With no faults injected, a 412 is a definitive answer: every update lands.
      assert.deepEqual(unknown, []);
      assert.equal(value, 20);
      // It resolves to the new version.
      const v = await l.fencedUpdate(key, counter);
      assert.equal((await lease.fencedGet(u, { key })).version, v);
    } finally {
      await l.release();
    }
  });

  it('fencedUpdate from worker threads loses no increment', async () => {
    // Each worker thread takes the lease in turn; each update reads and writes conditionally
    // on a version another thread's lease wrote.
    const u = url('update-workers');
    const key = dataKey();
    const { Worker } = require('node:worker_threads');
    const code = `
      const { workerData } = require('node:worker_threads');
      const lease = require(workerData.pkg);
      (async () => {
        for (let i = 0; i < 3; i++) {
          const l = await lease.acquire(workerData.url, { ttl: 30_000, wait: 60_000 });
          await l.fencedUpdate(workerData.key, (o) => String(o === null ? 1 : Number(o.data.toString()) + 1));
          await l.release();
        }
      })().catch((e) => { console.error(e); process.exitCode = 1; });`;
    const exits = [];
    for (let i = 0; i < 3; i++) {
      const w = new Worker(code, { eval: true, workerData: { url: u, key, pkg: path.join(__dirname, '..') } });
      exits.push(new Promise((resolve, reject) => {
        w.once('error', reject);
        w.once('exit', resolve);
      }));
    }
    assert.deepEqual(await Promise.all(exits), [0, 0, 0]);
    assert.equal((await lease.fencedGet(u, { key })).data.toString(), '9');
  });

  it('fencedUpdate gives up after bounded attempts', async () => {
    const u = url('update-busy');
    const key = dataKey();
    const policy = lease._updatePolicy;
    const saved = { ...policy };
    policy.attempts = 3;
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      await l.fencedPut(key, '0');
      let calls = 0;
      // Someone writes between every read and write: every attempt conflicts.
      const meddle = async () => {
        calls++;
        await l.fencedPut(key, `noise ${calls}`);
        return 'mine';
      };
      await assert.rejects(l.fencedUpdate(key, meddle), (e) => {
        assert.equal(e.code, 'LEASE_UNAVAILABLE');
        assert.equal(e.retryable, true);
        assert.match(e.message, /kept changing/);
        assert.equal(e.cause.code, 'LEASE_CONFLICT');
        return true;
      });
      assert.equal(calls, 3);
      assert.equal((await lease.fencedGet(u, { key })).data.toString(), 'noise 3');
      // An error thrown by the function passes through, and nothing is written.
      const other = dataKey();
      await assert.rejects(l.fencedUpdate(other, () => { throw new RangeError('no'); }), RangeError);
      await assert.rejects(l.fencedUpdate(other, async () => Promise.reject(new RangeError('no'))), RangeError);
      assert.equal(await lease.fencedGet(u, { key: other }), null);
    } finally {
      Object.assign(policy, saved);
      await l.release();
    }
  });

  it('fencedDelete', async () => {
    // moto's URL says conditional_delete=true (it honours If-Match on DeleteObject); the file
    // store and Azure always have it. fake-gcs-server ignores ifGenerationMatch on delete, so a
    // custom GCS endpoint has it off and the library refuses rather than delete unfenced.
    const u = url('delete');
    const key = dataKey();
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      await l.fencedPut(key, 'x');
      if (store === 'gcs') {
        await assert.rejects(l.fencedDelete(key), { code: 'LEASE_STORE', message: /no conditional delete/ });
        assert.notEqual(await lease.fencedGet(u, { key }), null);
        return;
      }
      assert.equal(await l.fencedDelete(key), true);
      assert.equal(await lease.fencedGet(u, { key }), null);
      assert.equal(await l.fencedDelete(key), false);
    } finally {
      await l.release();
    }
  });

  if (store === 'moto') {
    it('fencedDelete is refused where deletes are not conditional', async () => {
      const plain = url('plain-delete').replace('&conditional_delete=true', '');
      assert.ok(!plain.includes('conditional_delete'));
      const key = dataKey();
      const l = await lease.acquire(plain, { ttl: 30_000 });
      try {
        await l.fencedPut(key, 'x');
        await assert.rejects(l.fencedDelete(key), { code: 'LEASE_STORE', message: /no conditional delete/ });
        assert.notEqual(await lease.fencedGet(plain, { key }), null);
      } finally {
        await l.release();
      }
    });
  }

  it('the lease record and bad arguments are refused', async () => {
    const u = url('bad');
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      await assert.rejects(l.fencedPut(Buffer.from('key'), 'x'), { name: 'TypeError', message: /"key" argument must be a string/ });
      await assert.rejects(l.fencedPut(dataKey(), 12), { name: 'TypeError', message: /"data" argument must be/ });
      await assert.rejects(l.fencedPut(dataKey()), TypeError);
      await assert.rejects(l.fencedDelete(5), TypeError);
      await assert.rejects(l.fencedPut('', 'x'), { code: 'LEASE_INVALID' });
      // The lease's own record is not a data object (keys are read from the lease's directory:
      // the record is '/KEY', or its own name).
      await assert.rejects(l.fencedPut(`/${keyOf(l.url)}`, 'x'), { code: 'LEASE_INVALID' });
      await assert.rejects(l.fencedPut(`./${keyOf(l.url).split('/').pop()}`, 'x'), { code: 'LEASE_INVALID' });
      await assert.rejects(lease.fencedGet(u, { key: 5 }), TypeError);
      await assert.rejects(lease.fencedGet(u, { kye: 'x' }), TypeError);
      // fencedPut's options, fencedUpdate's function.
      const k = dataKey();
      await assert.rejects(l.fencedPut(k, 'x', { ifVersion: 'abc', ifAbsent: true }), { name: 'TypeError', message: /not both/ });
      await assert.rejects(l.fencedPut(k, 'x', { ifVersion: 5 }), { name: 'TypeError', message: /"options.ifVersion"/ });
      await assert.rejects(l.fencedPut(k, 'x', { ifAbsent: 1 }), { name: 'TypeError', message: /"options.ifAbsent" property must be a boolean/ });
      await assert.rejects(l.fencedPut(k, 'x', { ifversion: 'a' }), { name: 'TypeError', message: /Unknown option "ifversion"/ });
      await assert.rejects(l.fencedPut(k, 'x', 'abc'), TypeError);
      await assert.rejects(l.fencedPut(k, 'x', { ifVersion: '' }), { code: 'LEASE_INVALID', message: /ifVersion is empty/ });
      await assert.rejects(l.fencedUpdate(k, 'x'), { name: 'TypeError', message: /"fn" argument must be a function/ });
      await assert.rejects(l.fencedUpdate(k, () => 12), { name: 'TypeError', message: /"data" argument/ });
      assert.equal(await lease.fencedGet(u, { key: k }), null); // nothing was written
      await l.fencedPut(k, 'plain', { ifVersion: undefined, ifAbsent: false });
    } finally {
      await l.release();
    }
  });

  it('tokens name their holder', async () => {
    const l = await lease.acquire(url('token'), { ttl: 30_000 });
    try {
      assert.equal(l.token, `${l.url}#${l.epoch}@${l.holder.id}`);
      assert.deepEqual(lease.parseToken(l.token), { lease: l.url, epoch: l.epoch, holder: l.holder.id, shared: false, scope: null, range: null });
    } finally {
      await l.release();
    }
    // A token without a holder (built by hand from LEASE_EPOCH) still parses.
    assert.deepEqual(lease.parseToken('s3://b/locks/a#b#7'), { lease: 's3://b/locks/a#b', epoch: 7, holder: null, shared: false, scope: null, range: null });
    // A queued lock's shared or scoped grant says so.
    assert.deepEqual(lease.parseToken('s3://b/l#7@ab;shared;path=t/u%20v'), { lease: 's3://b/l', epoch: 7, holder: 'ab', shared: true, scope: 't/u v', range: null });
    assert.deepEqual(lease.parseToken('s3://b/l#7@ab;range=0..4096').range, [0, 4096]);
    for (const bad of ['', 'x', 'x#', '#7', 'x#-1', 'x#7@', 'x#7@a-b', 'x#seven', 'x#7@ab;readers', 'x#7@ab;range=4..4']) {
      assert.throws(() => lease.parseToken(bad), { code: 'LEASE_INVALID' }, bad);
    }
  });

  it('gate refuses another holder with the same epoch', async () => {
    // Issue 11 item 2: two holders must never both be admitted with equal tokens.
    const gate = new lease.FencingGate();
    const l = await lease.acquire(url('gate-holder'), { ttl: 30_000 });
    try {
      await gate.admit('orders/1', l);
      const t = lease.parseToken(l.token);
      const impostor = `${t.lease}#${t.epoch}@${'0'.repeat(t.holder.length)}`;
      await assert.rejects(gate.admit('orders/1', impostor), { code: 'LEASE_FENCED', message: /another holder/ });
      await gate.admit('orders/1', l.token); // the admitted holder still is
    } finally {
      await l.release();
    }
  });

  it('gate in memory admits by the highest epoch', async () => {
    const u = url('gate');
    const gate = new lease.FencingGate();
    assert.equal(gate.description, 'in memory');
    const first = await lease.acquire(u, { ttl: 30_000 });
    await gate.admit('orders/42', first);
    await gate.admit('orders/42', first.token); // the same epoch again is fine
    const old = first.token;
    await first.release();
    const second = await lease.acquire(u, { ttl: 30_000 });
    try {
      await gate.admit('orders/42', second);
      await assert.rejects(gate.admit('orders/42', old), (e) => {
        assert.equal(e.code, 'LEASE_FENCED');
        assert.equal(e.epoch, second.epoch);
        return true;
      });
      await gate.admit('orders/43', old); // resources are independent
    } finally {
      await second.release();
    }
    await assert.rejects(gate.admit('orders/42', 'not a token'), { code: 'LEASE_INVALID' });
    await assert.rejects(gate.admit('orders/42', 7), TypeError);
    await assert.rejects(gate.admit(42, old), TypeError);
  });

  it('gate in a store is shared', async () => {
    const u = url('shared-gate');
    const storeUrl = store === 'file' ? `file://${tmpDir()}` : storeBase(store);
    const prefix = `gates-${uid()}`;
    const a = new lease.FencingGate(storeUrl, { prefix });
    const b = new lease.FencingGate(storeUrl, { prefix });
    assert.match(a.description, new RegExp(`under ${prefix}/$`));
    const first = await lease.acquire(u, { ttl: 30_000 });
    const old = first.token;
    await first.release();
    const second = await lease.acquire(u, { ttl: 30_000 });
    try {
      await a.admit('db/row-1', second);
      // Another gate on the same store and prefix (another service) refuses the older token.
      await assert.rejects(b.admit('db/row-1', old), { code: 'LEASE_FENCED' });
      await b.admit('db/row-1', second.token);
    } finally {
      await second.release();
    }
  });
});

it('FencingGate bad arguments', () => {
  assert.throws(() => new lease.FencingGate(5), TypeError);
  assert.throws(() => new lease.FencingGate(null, { prefix: 'x' }), TypeError);
  assert.throws(() => new lease.FencingGate(`file://${tmpDir()}`, { prefix: 5 }), TypeError);
  assert.throws(() => new lease.FencingGate('ftp://nope'), { code: 'LEASE_INVALID' });
  assert.throws(() => new lease.FencingGate(`file://${tmpDir()}`, { prefix: '' }), { code: 'LEASE_INVALID' });
});

it('a stale holder cannot overwrite a newer epoch (memory store)', async () => {
  const u = makeUrl('memory', 'fenced');
  const key = dataKey();
  const old = await lease.acquire(u, { ttl: 30_000 });
  await old.fencedPut(key, 'a');
  // Fencing checks the store, not the holder's own view: a holder that released (or, as
  // above, one that does not know it lost the lease) writes with its old epoch and is refused.
  await old.release();
  const newer = await lease.acquire(u, { ttl: 30_000 });
  await newer.fencedPut(key, 'b');
  await assert.rejects(old.fencedPut(key, 'c'), { code: 'LEASE_FENCED' });
  await newer.release();
});
