// Fencing the store enforces, through the Node API, on each store (file, and S3 on moto): zombie
// writes are rejected after a takeover, objects carry their writer's epoch, the gate admits by
// the highest epoch. Mirrors python/tests/test_fencing.py.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');
const { it } = require('node:test');

const { lease, eachStore, breakLease, keyOf, makeUrl, tmpDir, uid } = require('../test-support/helpers.js');

const dataKey = () => `node-data/${uid()}`;

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
    breakLease(u);
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
      await assert.rejects(zombie.fencedDelete(key), { code: 'LEASE_FENCED' });
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

  it('fencedDelete', async () => {
    // The test servers' URLs say conditional_delete=true (moto honours If-Match on
    // DeleteObject); the file store always has it.
    const u = url('delete');
    const key = dataKey();
    const l = await lease.acquire(u, { ttl: 30_000 });
    try {
      await l.fencedPut(key, 'x');
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
      // The lease's own record is not a data object.
      await assert.rejects(l.fencedPut(keyOf(l.url), 'x'), { code: 'LEASE_INVALID' });
      await assert.rejects(lease.fencedGet(u, { key: 5 }), TypeError);
      await assert.rejects(lease.fencedGet(u, { kye: 'x' }), TypeError);
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
    const storeUrl = store === 'file' ? `file://${tmpDir()}` : process.env.LEASE_TEST_S3_MOTO;
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
  assert.throws(() => new lease.FencingGate('gs://nope'), { code: 'LEASE_INVALID' });
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
