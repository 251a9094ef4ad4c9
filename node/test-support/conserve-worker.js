// One worker of mixed-languages.test.js (Conserve's scenario: backups shared, GC exclusive).
// Appends "start|end WORKER KIND TOKEN NS" lines to HISTORY (O_APPEND; NS from the monotonic
// clock every process of the machine shares). A backup holds until the file GO exists (at most
// 60 s) and 200 ms more; the GC holds 300 ms. The end line is written while still holding.
//
//   node conserve-worker.js body HISTORY GO WORKER KIND       under `lease run` (LEASE_EPOCH)
//   node conserve-worker.js node URL HISTORY GO WORKER KIND   acquires itself (bucket-lease)
'use strict';

const fs = require('node:fs');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const line = (history, what, worker, kind, token) =>
  fs.appendFileSync(history, `${what} ${worker} ${kind} ${token} ${process.hrtime.bigint()}\n`);

async function hold(history, go, worker, kind, token) {
  line(history, 'start', worker, kind, token);
  if (kind === 'backup') {
    const end = Date.now() + 60_000;
    while (!fs.existsSync(go)) {
      if (Date.now() > end) throw new Error(`${worker}: ${go} did not appear within 60 s`);
      await sleep(20);
    }
    await sleep(200);
  } else {
    await sleep(300);
  }
  line(history, 'end', worker, kind, token);
}

async function main() {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'body') {
    const [history, go, worker, kind] = args;
    await hold(history, go, worker, kind, process.env.LEASE_EPOCH);
  } else if (mode === 'node') {
    const lease = require('bucket-lease');
    const [url, history, go, worker, kind] = args;
    const l = await lease.acquire(url, {
      ttl: 10_000,
      wait: 120_000,
      pollInterval: 100,
      label: worker,
      shared: kind === 'backup',
      queue: true,
    });
    await hold(history, go, worker, kind, l.epoch);
    await l.release();
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
