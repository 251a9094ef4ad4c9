// A child of session.test.js: holds the queued locks URL… through one shared session, says so
// on stdout ("held I EPOCH" per lock, then "all held"), then waits to be killed (SIGKILL).
//   node session-child.js URL…
'use strict';

const lease = require('bucket-lease');

async function main() {
  const urls = process.argv.slice(2);
  const session = await lease.openSession(urls[0], { ttl: 3000, label: 'node-killed' });
  const grants = await Promise.all(urls.map((u) => session.acquire(u, { wait: 60_000, pollInterval: 100 })));
  if (!grants.every((g) => g.held)) throw new Error('a grant is not held');
  grants.forEach((g, i) => console.log(`held ${i} ${g.epoch}`));
  console.log('all held');
  // Kept alive until killed.
  setInterval(() => {}, 60_000);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
