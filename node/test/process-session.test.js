// The process's shared session (issue 24; docs/protocol.md §10, "Shared sessions", "The API":
// *Per-process default*): `acquireOnProcessSession(url, options)` takes a queued lock through
// one session per store and ttl of this process, opened on first use, released and deleted by
// itself one ttl after its last grant is released, and opened afresh by the next acquisition.
// On the file store and on S3 (moto); keys are unique (CI's stores are shared by every suite),
// and a test that counts on its session being its own uses a ttl no other test uses (the
// process's session of a store and ttl is shared by every test in this process). Mirrors
// python/tests/test_process_session.py by name.
'use strict';

const assert = require('node:assert/strict');
const { execFile, spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { describe, it } = require('node:test');

const { lease, inCI, storeBase, tmpDir, uid, until } = require('../test-support/helpers.js');

// A waiter polls the lock this often (moto has no kernel wake-up).
const POLL = 100;
const PACKAGE = path.join(__dirname, '..');

const skipMoto = !process.env.LEASE_TEST_S3_MOTO && !inCI() ? 'LEASE_TEST_S3_MOTO is not set' : false;
if (skipMoto) process.stderr.write(`\n!!! SKIPPING process-session tests on moto: ${skipMoto}\n`);

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

/** The session's id in a grant's token, `URL#EPOCH@SID.N`. */
function sidOf(g) {
  return g.token.slice(g.token.lastIndexOf('@') + 1).split('.')[0];
}

async function waiting(url) {
  return ((await lease.status(url)).waiting ?? []).length;
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

  describe(`the process's shared session [${store}]`, { skip }, () => {
    // --- 1. Two locks, one session.
    it('two locks share the process session and are released one by one', async () => {
      const [aUrl, bUrl, cUrl] = lockUrls(store, 'procsess-two', 3);
      const a = await lease.acquireOnProcessSession(aUrl, { ttl: 7000, wait: 30_000, pollInterval: POLL });
      const b = await lease.acquireOnProcessSession(bUrl, { ttl: 7000, wait: 30_000, pollInterval: POLL });
      try {
        assert.ok(a instanceof lease.SharedGrant && b instanceof lease.SharedGrant);
        assert.ok(a.held && b.held);
        // One session: the same SID in both tokens; two entries of it.
        assert.match(sidOf(a), /^[0-9a-f]{32}$/);
        assert.equal(sidOf(a), sidOf(b));
        assert.notEqual(a.id, b.id);
        assert.equal(a.token, `${a.url}#${a.epoch}@${a.id}`);
        // Others see both held.
        for (const url of [aUrl, bUrl]) assert.equal(await lease.tryAcquire(url, { ttl: 5000, queue: true }), null);
        // Another ttl is another session.
        const c = await lease.acquireOnProcessSession(cUrl, { ttl: 8000, wait: 30_000, pollInterval: POLL });
        assert.ok(c.held);
        assert.notEqual(sidOf(c), sidOf(a));
        await c.release();
        await a.release();
        assert.ok(!a.held && b.held);
        b.ensureHeld();
        assert.equal(await lease.tryAcquire(bUrl, { ttl: 5000, queue: true }), null);
        const got = await lease.tryAcquire(aUrl, { ttl: 5000, queue: true });
        assert.ok(got);
        await got.release();
      } finally {
        await a.release();
        await b.release();
      }
    });

    // --- 2. A hand-over through the process session.
    it('a second acquirer waits and is handed the lock', async () => {
      const [url] = lockUrls(store, 'procsess-handover', 1);
      const first = await lease.acquireOnProcessSession(url, { ttl: 5000, wait: 30_000, pollInterval: POLL });
      const second = lease.acquireOnProcessSession(url, { ttl: 5000, wait: 60_000, pollInterval: POLL });
      const done = settled(second);
      await until(async () => (await waiting(url)) === 1, 30_000, 'the second acquirer to wait', 50);
      assert.ok(!done() && first.held);
      await first.release();
      const g = await second;
      assert.ok(g.held);
      // The same process's session: another entry of one session, a later epoch.
      assert.equal(sidOf(g), sidOf(first));
      assert.notEqual(g.id, first.id);
      assert.ok(g.epoch > first.epoch);
      await g.release();
    });

    it('another process waits and is handed the lock', async () => {
      const [url] = lockUrls(store, 'procsess-process', 1);
      const first = await lease.acquireOnProcessSession(url, { ttl: 5000, wait: 30_000, pollInterval: POLL });
      const code = `
        const lease = require(${JSON.stringify(PACKAGE)});
        (async () => {
          const g = await lease.acquireOnProcessSession(process.argv[1], { ttl: 5000, wait: 60_000, pollInterval: 100 });
          console.log('held', g.epoch, g.token);
          await g.release();
          console.log('released');
        })();`;
      const child = spawn(process.execPath, ['-e', code, url], { stdio: ['ignore', 'pipe', 'inherit'] });
      try {
        const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
        await until(async () => (await waiting(url)) === 1, 60_000, 'the other process to wait', 50);
        assert.ok(first.held);
        await first.release();
        const [, epoch, token] = (await lines.next()).value.split(' ');
        assert.ok(Number(epoch) > first.epoch);
        assert.notEqual(sidOf({ token }), sidOf(first)); // its own process's session
        assert.equal((await lines.next()).value, 'released');
        const status = await new Promise((resolve) => child.on('exit', resolve));
        assert.equal(status, 0);
      } finally {
        child.kill('SIGKILL');
      }
    });
  });
}

describe("the process's shared session", () => {
  // --- 3. Bad input.
  it('bad acquisitions on the process session', async () => {
    const url = `file://${tmpDir()}/bad`;
    await assert.rejects(lease.acquireOnProcessSession(url, { data: '10.0.0.2' }), {
      code: 'LEASE_INVALID',
      message: /per-grant data/,
    });
    await assert.rejects(lease.acquireOnProcessSession(url, { queue: false }), {
      code: 'LEASE_INVALID',
      message: /always queued/,
    });
    await assert.rejects(lease.acquireOnProcessSession(url, { wiat: 5 }), {
      code: 'ERR_INVALID_ARG_TYPE',
      message: /Unknown option "wiat"/,
    });
    await assert.rejects(lease.acquireOnProcessSession(url, { preempt: 'never' }), {
      code: 'ERR_INVALID_ARG_TYPE',
      message: /Unknown option "preempt"/,
    });
    await assert.rejects(lease.acquireOnProcessSession(url, { ttl: 0 }), { code: 'LEASE_INVALID', message: /ttl/ });
    // Nothing was left waiting or held.
    const g = await lease.acquireOnProcessSession(url, { ttl: 5000, queue: true, wait: 0 });
    assert.ok(g.held);
    await g.release();
  });

  // --- 4. The idle release: one ttl after the last release, the record is gone.
  it('the process session is released one ttl after its last grant', async () => {
    const d = tmpDir();
    const ttl = 1500; // no other test's: this session is this test's alone
    const a = await lease.acquireOnProcessSession(`file://${d}/idle-a`, { ttl });
    const b = await lease.acquireOnProcessSession(`file://${d}/idle-b`, { ttl });
    const sid = sidOf(a);
    assert.equal(sidOf(b), sid);
    const record = path.join(d, '.lease-sessions', sid);
    assert.ok(fs.existsSync(record));
    await a.release();
    // Still attached (b): it stays past one ttl (no release decided while attached).
    const end = performance.now() + 2 * ttl;
    while (performance.now() < end) {
      assert.ok(fs.existsSync(record));
      await new Promise((r) => setTimeout(r, 100));
    }
    await b.release();
    await until(() => !fs.existsSync(record), 30_000, "the idle session's record to be deleted", 50);
    // The next acquisition opens a fresh session.
    const c = await lease.acquireOnProcessSession(`file://${d}/idle-a`, { ttl });
    try {
      assert.ok(c.held);
      assert.notEqual(sidOf(c), sid);
      assert.ok(fs.existsSync(path.join(d, '.lease-sessions', sidOf(c))));
    } finally {
      await c.release();
    }
  });

  // --- Cancellation.
  it('an aborted acquisition leaves the queue and the process session', async () => {
    const d = tmpDir();
    const url = `file://${d}/cancel`;
    const holder = await lease.acquire(url, { ttl: 5000, queue: true });
    const ac = new AbortController();
    const p = lease.acquireOnProcessSession(url, { ttl: 4700, pollInterval: POLL, signal: ac.signal });
    const done = settled(p);
    await until(async () => (await waiting(url)) > 0, 15_000, 'the request to wait', 50);
    ac.abort(new Error('no longer wanted'));
    await until(done, 15_000, 'the aborted acquisition to reject', 50);
    await assert.rejects(p, (e) => {
      assert.equal(e.name, 'AbortError');
      assert.equal(e.cause.message, 'no longer wanted');
      return true;
    });
    await until(async () => (await waiting(url)) === 0, 15_000, 'the aborted request to leave the queue', 50);
    await assert.rejects(lease.acquireOnProcessSession(url, { signal: AbortSignal.abort() }), { name: 'AbortError' });
    await holder.release();
    assert.ok(['free', 'released'].includes((await lease.status(url)).state)); // nobody was handed it
    // Nothing is attached to this ttl's session: its record goes one ttl later.
    const sessions = path.join(d, '.lease-sessions');
    await until(
      () => !fs.existsSync(sessions) || fs.readdirSync(sessions).length === 0,
      30_000,
      "the aborted request's session to be released",
      50,
    );
  });

  // A worker thread shares the process's session (one runtime, one client per store): its end
  // releases its grants and leaves the session, and the main thread's grants, alone.
  it("a worker thread's end releases its grants, not the process session", async () => {
    const d = tmpDir();
    const ttl = 4300; // this test's own session
    const a = await lease.acquireOnProcessSession(`file://${d}/main`, { ttl });
    try {
      const { Worker } = require('node:worker_threads');
      const code = `
        const { parentPort, workerData } = require('node:worker_threads');
        const lease = require(workerData.pkg);
        lease.acquireOnProcessSession(workerData.url, { ttl: workerData.ttl })
          .then((g) => parentPort.postMessage({ token: g.token, epoch: g.epoch }));`;
      const w = new Worker(code, { eval: true, workerData: { pkg: PACKAGE, url: `file://${d}/worker`, ttl } });
      const got = await new Promise((resolve, reject) => {
        w.once('message', resolve);
        w.once('error', reject);
      });
      assert.equal(sidOf(got), sidOf(a)); // one session for the whole process
      // The worker ends holding its grant: released, the lock free at once.
      await w.terminate();
      await until(
        async () => ['free', 'released'].includes((await lease.status(`file://${d}/worker`)).state),
        15_000,
        "the worker's grant to be released",
        50,
      );
      // The main thread's grant and the session are untouched.
      assert.ok(a.held);
      a.ensureHeld();
      assert.ok(fs.existsSync(path.join(d, '.lease-sessions', sidOf(a))));
      assert.equal(await lease.tryAcquire(`file://${d}/main`, { ttl: 5000, queue: true }), null);
    } finally {
      await a.release();
    }
  });

  // The end of a program releases the grants it took through the process's session: the next
  // holder need not wait out the ttl (60 s, longer than the child may take).
  for (const mode of ['end', 'exit']) {
    it(`grants on the process session are released when the program ${mode === 'end' ? 'ends' : 'calls process.exit()'}`, async () => {
      const d = tmpDir();
      const url = `file://${d}/jobs/${mode}`;
      const code = `
        const lease = require(${JSON.stringify(PACKAGE)});
        (async () => {
          const g = await lease.acquireOnProcessSession(process.argv[1], { ttl: 60_000 });
          console.log(JSON.stringify({ epoch: g.epoch }));
          if (process.argv[2] === 'exit') process.exit(0);
        })();`;
      const stdout = await new Promise((resolve, reject) => {
        execFile(process.execPath, ['-e', code, url, mode], { encoding: 'utf8', timeout: 30_000 }, (err, out, errOut) =>
          err ? reject(Object.assign(err, { message: `${err.message}\nstderr: ${errOut}` })) : resolve(out),
        );
      });
      const { epoch } = JSON.parse(stdout.trim().split('\n').pop());
      const s = await lease.status(url);
      assert.ok(['free', 'released'].includes(s.state), JSON.stringify(s));
      const next = await lease.acquire(url, { ttl: 5000, queue: true, wait: 0 });
      assert.ok(next.epoch > epoch);
      await next.release();
    });
  }
});
