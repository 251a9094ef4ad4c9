// Real processes and threads: 8 contenders with a shared counter, how a process holding a lease
// ends, worker_threads. Mirrors python/tests/test_processes.py by name where it applies.
'use strict';

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { it } = require('node:test');

const { lease, eachStore, makeUrl, tmpDir } = require('../test-support/helpers.js');

const SUPPORT = path.join(__dirname, '..', 'test-support');
const PROCS = 8;
const ROUNDS = 5;

/** Run `node test-support/SCRIPT args…`; resolves with stdout, rejects on a non-zero exit. */
function runNode(script, args, timeout = 300_000) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    execFile(
      process.execPath,
      [path.join(SUPPORT, script), ...args],
      { cwd: path.join(__dirname, '..'), encoding: 'utf8', timeout },
      (err, stdout, stderr) => {
        if (err) {
          err.message += `\nstdout: ${stdout}\nstderr: ${stderr}`;
          reject(err);
        } else {
          resolve({ stdout, stderr, ms: performance.now() - started });
        }
      },
    );
  });
}

const lastJson = (stdout) => JSON.parse(stdout.trim().split('\n').pop());

eachStore('processes', (store, url) => {
  it('contending processes', async () => {
    const u = url('contend');
    const d = tmpDir();
    const counter = path.join(d, 'counter');
    const history = path.join(d, 'history');
    fs.writeFileSync(counter, '0');
    fs.writeFileSync(history, '');
    assert.equal((await lease.status(u)).state, 'free');
    const procs = [];
    for (let i = 0; i < PROCS; i++) procs.push(runNode('contender.js', [u, counter, history, String(ROUNDS)]));
    await Promise.all(procs);
    const rows = fs
      .readFileSync(history, 'utf8')
      .trim()
      .split('\n')
      .map((line) => {
        const [epoch, t0, t1, pid] = line.split(' ');
        return { epoch: Number(epoch), t0: BigInt(t0), t1: BigInt(t1), pid: Number(pid) };
      });
    assert.equal(rows.length, PROCS * ROUNDS);
    assert.equal(Number(fs.readFileSync(counter, 'utf8')), PROCS * ROUNDS);
    rows.sort((a, b) => (a.t0 < b.t0 ? -1 : a.t0 > b.t0 ? 1 : 0));
    for (let i = 1; i < rows.length; i++) {
      const [a, b] = [rows[i - 1], rows[i]];
      assert.ok(a.t1 <= b.t0, `overlapping holds: ${JSON.stringify([a, b], (_, v) => String(v))}`);
      assert.ok(a.epoch < b.epoch, `epochs do not increase: ${a.epoch} then ${b.epoch}`);
    }
    assert.equal(new Set(rows.map((r) => r.pid)).size, PROCS);
  });
});

it('a held lease does not keep the process alive, and is released at exit', async () => {
  const u = makeUrl('file', 'exit-held');
  // A 60 s ttl renewed every 20 s: a process kept alive by its renewals would time out here.
  const { stdout } = await runNode('exit-child.js', ['held', u], 30_000);
  const { epoch } = lastJson(stdout);
  const s = await lease.status(u);
  assert.equal(s.state, 'released');
  assert.equal(s.epoch, epoch);
  assert.equal(s.holder.label, 'ended-holding');
});

it('the process exits cleanly after release', async () => {
  const u = makeUrl('file', 'exit-released');
  const { stdout, stderr } = await runNode('exit-child.js', ['released', u], 30_000);
  assert.equal(stderr, '');
  const s = await lease.status(u);
  assert.equal(s.state, 'released');
  assert.equal(s.epoch, lastJson(stdout).epoch);
});

it('process.exit() while holding releases the lease', async () => {
  const u = makeUrl('file', 'process-exit');
  const { stdout } = await runNode('exit-child.js', ['exit', u], 30_000);
  const s = await lease.status(u);
  assert.equal(s.state, 'released');
  assert.equal(s.epoch, lastJson(stdout).epoch);
});

it('works from worker_threads', async () => {
  const u = makeUrl('file', 'worker');
  const { stdout } = await runNode('exit-child.js', ['worker', u], 30_000);
  const msg = lastJson(stdout);
  assert.equal(msg.code, 0);
  assert.equal(msg.label, 'worker');
  const s = await lease.status(u);
  assert.equal(s.state, 'released');
  assert.equal(s.epoch, msg.epoch);
});

it('a worker that ends holding a lease releases it; the main thread goes on', async () => {
  const u = makeUrl('file', 'worker-held');
  const w = new Worker(path.join(SUPPORT, 'exit-child.js'), { workerData: { url: u, release: false } });
  const msg = await new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  });
  assert.equal(msg.error, undefined, msg.error);
  assert.equal(await new Promise((resolve) => w.once('exit', resolve)), 0);
  const s = await lease.status(u);
  assert.equal(s.state, 'released');
  assert.equal(s.epoch, msg.epoch);
  // This thread's library still works after a worker's environment ended.
  const l = await lease.acquire(u, { wait: 0 });
  assert.ok(l.epoch > msg.epoch);
  await l.release();
});

it('workers and the main thread contend for one lease', async () => {
  const u = makeUrl('file', 'threads');
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    const lease = require(workerData.pkg);
    (async () => {
      const epochs = [];
      for (let i = 0; i < 5; i++) {
        const l = await lease.acquire(workerData.url, { wait: 60_000 });
        epochs.push(l.epoch);
        await l.release();
      }
      parentPort.postMessage(epochs);
    })().catch((e) => parentPort.postMessage(String(e.stack)));`;
  const workers = [0, 1, 2].map(
    () =>
      new Promise((resolve, reject) => {
        const w = new Worker(code, { eval: true, workerData: { url: u, pkg: path.join(__dirname, '..') } });
        w.once('message', resolve);
        w.once('error', reject);
      }),
  );
  const mine = [];
  for (let i = 0; i < 5; i++) {
    const l = await lease.acquire(u, { wait: 60_000 });
    mine.push(l.epoch);
    await l.release();
  }
  const all = [mine, ...(await Promise.all(workers))];
  for (const e of all) assert.ok(Array.isArray(e), String(e));
  const flat = all.flat();
  assert.equal(new Set(flat).size, 20, 'every acquisition got its own epoch');
});
