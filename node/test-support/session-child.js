// Children of session.test.js, holding queued locks through one shared session:
//   node session-child.js hold URL…   hold every URL, say so on stdout ("held I EPOCH" per lock,
//                                     then "all held"), then wait to be killed (SIGKILL)
//   node session-child.js end URL     hold URL, print { epoch, key } and let the program end
//                                     with the session open
//   node session-child.js exit URL    the same, then process.exit(0) with the session open
'use strict';

const lease = require('bucket-lease');

async function main() {
  const [mode, ...urls] = process.argv.slice(2);
  const session = await lease.openSession(urls[0], { ttl: mode === 'hold' ? 3000 : 60_000, label: `node-${mode}` });
  const grants = await Promise.all(urls.map((u) => session.acquire(u, { wait: 60_000, pollInterval: 100 })));
  if (!grants.every((g) => g.held)) throw new Error('a grant is not held');
  if (mode === 'hold') {
    grants.forEach((g, i) => console.log(`held ${i} ${g.epoch}`));
    console.log('all held');
    // Kept alive until killed.
    setInterval(() => {}, 60_000);
    return;
  }
  console.log(JSON.stringify({ epoch: grants[0].epoch, key: session.key }));
  // Nothing else to do: the session's renewals do not keep the program alive, and the addon
  // closes the session on the way out (its grants released, its record deleted).
  if (mode === 'exit') process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
