// Children of processes.test.js that check how a process ends:
//   node exit-child.js held URL        acquire, print the epoch, and let the program end holding it
//   node exit-child.js released URL    acquire, release, end
//   node exit-child.js exit URL        acquire, then process.exit(0) while holding it
//   node exit-child.js worker URL      acquire and release in a worker thread, then end
'use strict';

const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const lease = require('bucket-lease');

async function inWorker() {
  const l = await lease.acquire(workerData.url, { label: 'worker' });
  parentPort.postMessage({ epoch: l.epoch, label: l.holder.label });
  if (workerData.release) await l.release();
}

async function main() {
  const [mode, url] = process.argv.slice(2);
  if (mode === 'held') {
    const l = await lease.acquire(url, { ttl: 60_000, label: 'ended-holding' });
    console.log(JSON.stringify({ epoch: l.epoch }));
    // Nothing else to do: the program ends although the lease is held (renewals do not keep
    // it alive), and the addon releases it on the way out.
  } else if (mode === 'released') {
    const l = await lease.acquire(url, { ttl: 60_000 });
    console.log(JSON.stringify({ epoch: l.epoch }));
    await l.release();
  } else if (mode === 'exit') {
    const l = await lease.acquire(url, { ttl: 60_000, label: 'process-exit' });
    console.log(JSON.stringify({ epoch: l.epoch }));
    process.exit(0);
  } else if (mode === 'worker' || mode === 'worker-held') {
    const w = new Worker(__filename, { workerData: { url, release: mode === 'worker' } });
    const msg = await new Promise((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    });
    const code = await new Promise((resolve) => w.once('exit', resolve));
    console.log(JSON.stringify({ ...msg, code }));
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

if (isMainThread) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  inWorker().catch((e) => {
    parentPort.postMessage({ error: String(e && e.stack) });
  });
}
