// The paused holder of fencing.test.js ("a zombie"): acquire, write, say "ready", then on each
// line from stdin try one more fenced write and print its outcome as JSON.
//
//   node zombie-child.js URL KEY
'use strict';

const readline = require('node:readline');
const lease = require('bucket-lease');

async function main() {
  const [url, key] = process.argv.slice(2);
  const l = await lease.acquire(url, { ttl: 1_000, label: 'zombie' });
  await l.fencedPut(key, `written by epoch ${l.epoch}`);
  console.log(JSON.stringify({ ready: true, epoch: l.epoch }));
  for await (const _line of readline.createInterface({ input: process.stdin })) {
    // No ensureHeld() here on purpose: this is the write of a holder that was paused between
    // its last check and its write. The store must refuse it.
    try {
      await l.fencedPut(key, 'ZOMBIE WRITE');
      console.log(JSON.stringify({ wrote: true }));
    } catch (e) {
      console.log(JSON.stringify({ wrote: false, code: e.code, epoch: e.epoch }));
    }
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
