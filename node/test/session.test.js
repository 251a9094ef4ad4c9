// Shared sessions (issue 24; docs/protocol.md §10, "Shared sessions: one heartbeat for many
// grants"): many queued-lock grants held through one session, on the file store and on S3
// (moto); a holder killed with SIGKILL hands its locks over; the session's record deleted loses
// every grant; an aborted acquire leaves the lock's queue and the session; bad input rejects
// with typed errors. Mirrors python/tests/test_shared_session.py by name.
'use strict';

const assert = require('node:assert/strict');
const { execFile, spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { describe, it } = require('node:test');

const { lease, inCI, keyOf, storeBase, tmpDir, uid, until } = require('../test-support/helpers.js');

// A waiter polls the lock this often (moto has no kernel wake-up).
const POLL = 100;

const CHILD = path.join(__dirname, '..', 'test-support', 'session-child.js');

const skipMoto = !process.env.LEASE_TEST_S3_MOTO && !inCI() ? 'LEASE_TEST_S3_MOTO is not set' : false;
if (skipMoto) process.stderr.write(`\n!!! SKIPPING shared-session tests on moto: ${skipMoto}\n`);

/** `s3://bucket?query` + key -> `s3://bucket/key?query`. */
function s3Url(base, key) {
  const i = base.indexOf('?');
  return i < 0 ? `${base.replace(/\/+$/, '')}/${key}` : `${base.slice(0, i).replace(/\/+$/, '')}/${key}${base.slice(i)}`;
}

/** `n` fresh lock URLs in one store: one directory (file), or one bucket (moto). */
function lockUrls(store, name, n) {
  const tail = `node-${name}-${uid()}`;
  if (store === 'file') {
    const d = tmpDir();
    return Array.from({ length: n }, (_, i) => `file://${d}/${tail}-${i}`);
  }
  const base = storeBase(store);
  return Array.from({ length: n }, (_, i) => s3Url(base, `locks/${tail}/${i}`));
}

/** Whether `p` has settled, as a getter (for a bounded `until`). */
function settled(p) {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  return () => done;
}

for (const store of ['file', 'moto']) {
  const skip = store === 'moto' ? skipMoto : false;

  describe(`shared sessions [${store}]`, { skip }, () => {
    // --- 1. Many grants, one session.
    it('many grants on one session released one by one', async () => {
      const n = store === 'file' ? 200 : 50;
      const urls = lockUrls(store, 'many', n);
      const session = await lease.openSession(urls[0], { ttl: 10_000, label: 'node-many' });
      let rest;
      try {
        assert.ok(session.alive);
        assert.equal(session.attached, 0);
        assert.equal(session.ttl, 10_000);
        assert.match(session.sid, /^[0-9a-f]{32}$/);
        assert.ok(session.key.endsWith(`.lease-sessions/${session.sid}`), session.key);
        // All at once: attachments that wait together go into one session write.
        const grants = await Promise.all(urls.map((u) => session.acquire(u, { wait: 60_000, pollInterval: POLL })));
        assert.ok(grants.every((g) => g.held));
        assert.equal(session.attached, n);
        assert.equal(new Set(grants.map((g) => g.id)).size, n);
        assert.ok(grants.every((g) => g.id.startsWith(`${session.sid}.`)));
        assert.ok(grants.every((g) => g.token === `${g.url}#${g.epoch}@${g.id}` && g.grant.token === g.epoch));
        assert.ok(grants.every((g) => g.lostReason === null && g.lostKind === null));
        assert.deepEqual(grants[0].grant, { mode: 'exclusive', token: grants[0].epoch, scope: null, range: null, permits: null });
        assert.deepEqual(
          grants.map((g) => g.key),
          urls.map(keyOf),
        );
        // Others see the locks held: a plain queued request cannot be granted.
        assert.equal(await lease.tryAcquire(urls[n - 1], { ttl: 5000, queue: true }), null);

        const half = n / 2;
        for (const g of grants.slice(0, half)) {
          await g.release();
          assert.equal(g.held, false);
          await g.release(); // idempotent
        }
        rest = grants.slice(half);
        assert.deepEqual(
          rest.filter((g) => !g.held).map((g) => g.lostReason),
          [],
        );
        for (const g of rest) g.ensureHeld();
        assert.throws(() => grants[0].ensureHeld(), { code: 'LEASE_LOST', message: /released/ });
        // A released lock is free for others; a held one is not.
        const other = await lease.tryAcquire(urls[0], { ttl: 5000, queue: true });
        assert.notEqual(other, null);
        await other.release();
        assert.equal(await lease.tryAcquire(urls[n - 1], { ttl: 5000, queue: true }), null);
        assert.ok(session.alive);
      } finally {
        await session.close();
      }
      // Closing released the rest.
      assert.ok(session.closed && !session.alive);
      assert.ok(!rest.some((g) => g.held));
      // Released with the session, not lost: ensureHeld says so.
      assert.deepEqual([rest[0].lostReason, rest[0].lostKind], [null, null]);
      assert.throws(() => rest[0].ensureHeld(), { code: 'LEASE_LOST', message: /released when its session was closed/ });
      const free = await lease.tryAcquire(urls[n - 1], { ttl: 5000, queue: true });
      assert.notEqual(free, null);
      await free.release();
    });

    // --- 2. Kill -9 of the holder hands its locks over.
    it('kill -9 of the holder hands its locks over', async () => {
      const n = 50;
      const urls = lockUrls(store, 'killed', n);
      const child = spawn(process.execPath, [CHILD, 'hold', ...urls], {
        cwd: path.join(__dirname, '..'),
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const epochs = new Map();
      try {
        for await (const line of readline.createInterface({ input: child.stdout })) {
          if (line === 'all held') break;
          const [, i, epoch] = line.split(' ');
          epochs.set(Number(i), Number(epoch));
        }
        assert.equal(epochs.size, n, `the child held ${epochs.size} of ${n}`);
      } finally {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }
      // A sample of five, waited for at once (each waiter judges the dead session itself:
      // absent renewals for its ttl plus grace).
      const sample = [0, 10, 20, 30, 40];
      const got = await Promise.all(
        sample.map((i) => lease.acquire(urls[i], { ttl: 3000, queue: true, wait: 30_000, pollInterval: POLL })),
      );
      for (const [k, i] of sample.entries()) {
        assert.ok(got[k].epoch > epochs.get(i), `lock ${i}: epoch ${got[k].epoch} after the child's ${epochs.get(i)}`);
        await got[k].release();
      }
    });

    // --- Fenced operations of a shared grant, as a Lease's: its writes carry its token, and
    // once its holder is cut off (the session's record deleted) and another takes the lock,
    // its write is refused.
    it("a shared grant's fenced writes, and its stale write after a takeover is fenced", async () => {
      const [url] = lockUrls(store, 'fence', 1);
      const session = await lease.openSession(url, { ttl: 3000 });
      let next = null;
      try {
        const g = await session.acquire(url, { wait: 30_000, pollInterval: POLL });
        const v1 = await g.fencedPut('data', 'one');
        const read = await lease.fencedGet(url, { key: 'data' });
        assert.equal(read.data.toString(), 'one');
        assert.equal(read.epoch, g.epoch);
        assert.equal(read.holder, g.id);
        assert.equal(read.version, v1);
        const mine = await g._fencedGet('data');
        assert.equal(mine.version, v1);
        await g.fencedUpdate('data', (old) => `${old.data.toString()}+1`);
        assert.equal((await g.fencedRead('data')).data.toString(), 'one+1');
        await assert.rejects(g.fencedPut('data', 'x', { ifAbsent: true }), { code: 'LEASE_CONFLICT' });

        // Cut off: the session's record deleted; the grant is lost, another takes the lock.
        await deleteSessionRecord(store, url, session.key);
        await until(() => g.lostReason !== null, 15_000, 'the grant lost', 50);
        next = await lease.acquire(url, { ttl: 5000, queue: true, wait: 30_000, pollInterval: POLL });
        assert.ok(next.epoch > g.epoch);
        await next.fencedPut('data', 'two');
        await assert.rejects(g.fencedPut('data', 'stale'), (e) => {
          assert.equal(e.code, 'LEASE_FENCED', e.message);
          assert.equal(e.epoch, next.epoch);
          return true;
        });
        await assert.rejects(g.fencedUpdate('data', () => 'stale'), { code: 'LEASE_FENCED' });
        assert.equal((await lease.fencedGet(url, { key: 'data' })).data.toString(), 'two');
        await assert.rejects(g.release(), { code: 'LEASE_LOST' });
      } finally {
        if (next) await next.release();
        await session.close();
      }
    });
  });
}

/** Delete a session's record (a holder cut off from the store looks the same to others). */
async function deleteSessionRecord(store, lockUrl, sessionKey) {
  if (store === 'file') {
    fs.unlinkSync(path.join(path.dirname(new URL(lockUrl).pathname), sessionKey));
    return;
  }
  // moto, path-style: s3://BUCKET?endpoint=E&region=R&... -> DELETE E/BUCKET/KEY, signed
  // (AWS Signature Version 4) with the test credentials the library uses.
  const base = storeBase(store);
  const bucket = /^s3:\/\/([^/?]+)/.exec(base)[1];
  const query = new URLSearchParams(base.slice(base.indexOf('?') + 1));
  const endpoint = query.get('endpoint').replace(/\/+$/, '');
  const region = query.get('region') || 'us-east-1';
  const host = new URL(endpoint).host;
  const sha256 = (text) => crypto.createHash('sha256').update(text).digest('hex');
  const hmac = (k, text) => crypto.createHmac('sha256', k).update(text).digest();
  const amz = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '');
  const day = amz.slice(0, 8);
  const empty = sha256('');
  const keyPath = `/${bucket}/${sessionKey}`;
  const signed = 'host;x-amz-content-sha256;x-amz-date';
  const canonical = `DELETE\n${keyPath}\n\nhost:${host}\nx-amz-content-sha256:${empty}\nx-amz-date:${amz}\n\n${signed}\n${empty}`;
  const scope = `${day}/${region}/s3/aws4_request`;
  const toSign = `AWS4-HMAC-SHA256\n${amz}\n${scope}\n${sha256(canonical)}`;
  let k = Buffer.from(`AWS4${process.env.AWS_SECRET_ACCESS_KEY}`);
  for (const part of [day, region, 's3', 'aws4_request']) k = hmac(k, part);
  const signature = crypto.createHmac('sha256', k).update(toSign).digest('hex');
  const res = await fetch(`${endpoint}${keyPath}`, {
    method: 'DELETE',
    headers: {
      'x-amz-date': amz,
      'x-amz-content-sha256': empty,
      authorization: `AWS4-HMAC-SHA256 Credential=${process.env.AWS_ACCESS_KEY_ID}/${scope}, SignedHeaders=${signed}, Signature=${signature}`,
    },
  });
  assert.ok(res.ok, `DELETE ${sessionKey}: ${res.status}`);
}

describe('shared sessions [file]', () => {
  it('grants by key and by path, released by asyncDispose', async () => {
    const d = tmpDir();
    // The store's own directory opens a session on it; keys name locks in it.
    const session = await lease.openSession(`file://${d}`, { ttl: 5000 });
    assert.ok(session.store.startsWith('file://'), session.store);
    const a = await session.acquire('jobs/a');
    const b = await session.acquire(path.join(d, 'b'));
    assert.equal(a.url, `file://${d}/jobs/a`);
    assert.equal(a.key, 'jobs/a');
    assert.ok(a.held && b.held);
    assert.equal(session.attached, 2);
    await a[Symbol.asyncDispose]();
    assert.equal(a.held, false);
    assert.ok(b.held);
    await session[Symbol.asyncDispose]();
    assert.ok(session.closed && !b.held);
  });

  it('a shared grant beside a plain reader', async () => {
    const url = `file://${tmpDir()}/rw`;
    const session = await lease.openSession(url, { ttl: 5000 });
    const g = await session.acquire(url, { shared: true });
    assert.equal(g.grant.mode, 'shared');
    const r = await lease.acquire(url, { ttl: 5000, shared: true, wait: 10_000 });
    assert.ok(r.held && g.held);
    await r.release();
    await g.release();
    await session.close();
  });

  it("a shared grant's token names its entry and a gate fences it", async () => {
    const d = tmpDir();
    const gate = new lease.FencingGate();
    const session = await lease.openSession(`file://${d}`, { ttl: 5000 });
    try {
      const first = await session.acquire('jobs/a');
      const old = first.token;
      assert.equal(old, `file://${d}/jobs/a#${first.epoch}@${first.id}`);
      await gate.admit('orders/1', old);
      await first.release();
      const second = await session.acquire('jobs/a');
      assert.ok(second.epoch > first.epoch && second.id !== first.id);
      await gate.admit('orders/1', second.token);
      await assert.rejects(gate.admit('orders/1', old), { code: 'LEASE_FENCED' });
      await second.release();
    } finally {
      await session.close();
    }
  });

  it("a waiter's yield request reaches the shared grant it names", async () => {
    const d = tmpDir();
    const session = await lease.openSession(`file://${d}`, { ttl: 3000 });
    try {
      const a = await session.acquire('jobs/a');
      const b = await session.acquire('jobs/b');
      assert.equal(a.yieldRequested, null);
      const waiter = lease.acquire(`file://${d}/jobs/a`, {
        ttl: 3000, wait: 30_000, pollInterval: POLL, askYield: true, yieldReason: 'deploy',
      });
      await until(() => a.yieldRequested !== null, 15_000, 'the yield request', 50);
      assert.equal(a.yieldRequested.reason, 'deploy');
      assert.ok(a.held, 'a request is not a loss');
      assert.equal(b.yieldRequested, null);
      await a.release();
      const next = await waiter;
      assert.ok(next.held);
      await next.release();
    } finally {
      await session.close();
    }
  });

  it('a try or a bounded wait on a held lock leaves the session', async () => {
    const d = tmpDir();
    const url = `file://${d}/held`;
    const holder = await lease.acquire(url, { ttl: 5000, queue: true, label: 'holder' });
    const session = await lease.openSession(`file://${d}`, { ttl: 5000 });
    try {
      await assert.rejects(session.acquire('held', { wait: 0 }), { code: 'LEASE_HELD' });
      await assert.rejects(session.acquire('held', { wait: 300, pollInterval: POLL }), { code: 'LEASE_TIMEOUT' });
      await until(() => session.attached === 0, 15_000, 'the requests to leave the session', 50);
      assert.deepEqual((await lease.status(url)).waiting, []);
      assert.ok(session.alive);
    } finally {
      await session.close();
      await holder.release();
    }
  });

  // --- 3. The session's record deleted: every grant reports its loss.
  it('deleting the session record loses every grant', async () => {
    const urls = lockUrls('file', 'deleted', 20);
    const session = await lease.openSession(urls[0], { ttl: 3000 });
    const grants = await Promise.all(urls.map((u) => session.acquire(u, { wait: 30_000 })));
    assert.ok(grants.every((g) => g.held));
    const record = path.join(path.dirname(new URL(urls[0]).pathname), session.key);
    assert.ok(fs.statSync(record).isFile(), record);
    fs.unlinkSync(record);
    await until(() => grants.every((g) => g.lostReason !== null), 15_000, 'every grant lost', 50);
    for (const g of grants) {
      assert.equal(g.held, false);
      assert.equal(g.lostKind, 'session_deleted', g.lostReason);
      assert.throws(() => g.ensureHeld(), (e) => {
        assert.equal(e.code, 'LEASE_LOST');
        assert.equal(e.kind, 'lost');
        assert.equal(e.url, g.url);
        assert.match(e.message, /session's record was deleted/);
        return true;
      });
    }
    assert.equal(session.alive, false);
    assert.notEqual(session.lostReason, null);
    // A lost session takes no more grants: the core's LEASE_LOST.
    await assert.rejects(session.acquire(urls[0], { wait: 1000 }), { code: 'LEASE_LOST', message: /not held/ });
    // Releasing a lost grant reports the loss (work under it may have overlapped).
    await assert.rejects(grants[0].release(), { code: 'LEASE_LOST' });
    await assert.rejects(grants[1][Symbol.asyncDispose](), { code: 'LEASE_LOST' });
    // Released, it still says why it was lost.
    assert.equal(grants[0].lostKind, 'session_deleted');
    assert.throws(() => grants[0].ensureHeld(), { code: 'LEASE_LOST', message: /session's record was deleted/ });
    await session.close();
  });

  // --- 4. An aborted acquire leaves the lock's queue and the session.
  it('an aborted acquire leaves the queue and the session', async () => {
    const d = tmpDir();
    const url = `file://${d}/jobs/a`;
    const holder = await lease.acquire(url, { ttl: 5000, queue: true, label: 'holder' });
    const session = await lease.openSession(`file://${d}`, { ttl: 5000 });
    try {
      const ac = new AbortController();
      const p = session.acquire('jobs/a', { pollInterval: POLL, signal: ac.signal });
      const done = settled(p);
      await until(async () => ((await lease.status(url)).waiting ?? []).length > 0, 15_000, "the session's request to wait", 50);
      assert.equal(session.attached, 1);
      ac.abort(new Error('no longer wanted'));
      // Before: the abort was not passed on, and the request waited on, to be granted later.
      await until(done, 15_000, 'the aborted acquire to reject', 50);
      await assert.rejects(p, (e) => {
        assert.equal(e.name, 'AbortError');
        assert.equal(e.code, 'ABORT_ERR');
        assert.equal(e.cause.message, 'no longer wanted');
        return true;
      });
      // It left the queue and the session.
      await until(
        async () => ((await lease.status(url)).waiting ?? []).length === 0 && session.attached === 0,
        15_000,
        'the aborted request to leave',
        50,
      );
      // An already aborted signal rejects at once.
      await assert.rejects(session.acquire('jobs/a', { signal: AbortSignal.abort() }), { name: 'AbortError' });
    } finally {
      await session.close();
    }
    await holder.release();
    // Nobody was handed it.
    assert.ok(['free', 'released'].includes((await lease.status(url)).state));
  });

  // The end of a program closes the sessions it left open: the next holder need not wait out
  // the ttl (60 s, longer than the child may take), and the renewals do not keep it alive.
  for (const mode of ['end', 'exit']) {
    it(`a session left open is closed when the program ${mode === 'end' ? 'ends' : 'calls process.exit()'}`, async () => {
      const d = tmpDir();
      const url = `file://${d}/jobs/${mode}`;
      const stdout = await new Promise((resolve, reject) => {
        execFile(process.execPath, [CHILD, mode, url], { cwd: path.join(__dirname, '..'), encoding: 'utf8', timeout: 30_000 }, (err, out, errOut) =>
          err ? reject(Object.assign(err, { message: `${err.message}\nstderr: ${errOut}` })) : resolve(out),
        );
      });
      const { epoch, key } = JSON.parse(stdout.trim().split('\n').pop());
      const s = await lease.status(url);
      assert.ok(['free', 'released'].includes(s.state), JSON.stringify(s));
      assert.deepEqual([s.holders, s.waiting], [[], []]);
      assert.equal(fs.existsSync(path.join(d, key)), false, "the session's record is still there");
      const next = await lease.acquire(url, { ttl: 5000, queue: true, wait: 0 });
      assert.ok(next.epoch > epoch);
      await next.release();
    });
  }

  // --- 5. Bad input.
  const badSessionOptions = [
    [{ ttl: -1 }, 'LEASE_INVALID', /at least 0/],
    [{ ttl: 0 }, 'LEASE_INVALID', /ttl/],
    [{ ttl: 36 }, 'LEASE_INVALID', /milliseconds/],
    [{ ttl: '1000h' }, 'LEASE_INVALID', /ttl/],
    [{ ttl: '30' }, 'LEASE_INVALID', /unit/],
    [{ ttl: [1] }, 'ERR_INVALID_ARG_TYPE', /ttl/],
    [{ prefix: 'team-a' }, 'LEASE_INVALID', /prefix/],
    [{ prefix: 3 }, 'ERR_INVALID_ARG_TYPE', /prefix/],
    [{ label: 'x'.repeat(300) }, 'LEASE_INVALID', /label/],
    [{ lable: 'x' }, 'ERR_INVALID_ARG_TYPE', /Unknown option "lable"/],
  ];
  for (const [options, code, message] of badSessionOptions) {
    it(`bad session options: ${JSON.stringify(options).slice(0, 40)} -> ${code}`, async () => {
      await assert.rejects(lease.openSession(`file://${tmpDir()}/x`, options), { code, message });
    });
  }

  it('bad acquisitions through a session', async () => {
    const d = tmpDir();
    const session = await lease.openSession(`file://${d}/x`, { ttl: 5000 });
    // Another bucket, another directory, another kind of store.
    for (const other of [
      's3://another-bucket/locks/x?endpoint=http://127.0.0.1:1&region=us-east-1',
      `file://${d}/sub/x`,
      'memory://elsewhere/x',
    ]) {
      await assert.rejects(session.acquire(other), { code: 'LEASE_INVALID', message: /not in this session's store/ });
    }
    await assert.rejects(session.acquire('x', { ttl: 5000 }), { code: 'LEASE_INVALID', message: /the session's ttl applies/ });
    await assert.rejects(session.acquire('x', { data: '10.0.0.2' }), { code: 'LEASE_INVALID', message: /per-grant data/ });
    await assert.rejects(session.acquire('x', { wiat: 5000 }), { code: 'ERR_INVALID_ARG_TYPE', message: /Unknown option "wiat"/ });
    await assert.rejects(session.acquire('x', { queue: true }), { code: 'ERR_INVALID_ARG_TYPE', message: /always queued/ });
    await assert.rejects(session.acquire(7), { code: 'ERR_INVALID_ARG_TYPE', message: /"lock"/ });
    await assert.rejects(session.acquire('x', { permits: 2, scope: 'a', range: [0, 1] }), { code: 'LEASE_INVALID' });
    assert.equal(session.attached, 0);
    assert.ok(session.alive);
    await session.close();
    await session.close(); // idempotent
    await assert.rejects(session.acquire('x'), { code: 'LEASE_INVALID', message: /closed/ });
  });
});

describe('shared sessions [moto]', { skip: skipMoto }, () => {
  it('a session on another bucket than the lock', async () => {
    const base = storeBase('moto');
    const session = await lease.openSession(base, { ttl: 5000 });
    try {
      const query = base.includes('?') ? base.slice(base.indexOf('?')) : '';
      await assert.rejects(session.acquire(`s3://another-bucket-x/locks/x${query}`), {
        code: 'LEASE_INVALID',
        message: /not in this session's store/,
      });
      const g = await session.acquire(s3Url(base, `locks/node-session-${uid()}`));
      assert.ok(g.held);
      await g.release();
    } finally {
      await session.close();
    }
  });
});
