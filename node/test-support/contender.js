// One contender of processes.test.js: ROUNDS times, acquire the lease, read-increment-write the
// shared counter file, release, then append "EPOCH T0 T1 PID" (the interval lies inside the
// holding) to the history file.
//
//   node contender.js URL COUNTER HISTORY ROUNDS
'use strict';

const fs = require('node:fs');
const lease = require('bucket-lease');

const [url, counter, history, rounds] = process.argv.slice(2);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const nowNs = () => process.hrtime.bigint(); // monotonic, shared by processes of one machine

async function main() {
  for (let i = 0; i < Number(rounds); i++) {
    const l = await lease.acquire(url, { ttl: 2_000, wait: 120_000, label: `p${process.pid}` });
    const t0 = nowNs();
    l.ensureHeld(1_000);
    const n = Number(fs.readFileSync(counter, 'utf8') || '0');
    await sleep(2);
    const fd = fs.openSync(counter, 'w');
    fs.writeSync(fd, String(n + 1));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    l.ensureHeld();
    const t1 = nowNs();
    await l.release();
    fs.appendFileSync(history, `${l.epoch} ${t0} ${t1} ${process.pid}\n`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
