// A worker that runs its job only while it is the leader.
//
//   node examples/node/leader-worker.js LEASE_URL [--name NAME] [--steps N]
//
// Start several on the same LEASE_URL (s3://bucket/elections/compactor, a file path, …): one
// leads and works; the others wait. If the leader dies, another takes over after the ttl; if the
// leader loses its lease (store unreachable, an operator ran `lease break`), its `signal` aborts
// and it stops working at once. Each step checks the lease first and writes its result with a
// fenced write, so a stale leader's write is refused by the store itself.
//
// Needs the package: `npm install ./node` (in this repository), or `npm install /path/to/node`.
'use strict';

const { parseArgs } = require('node:util');
const { setTimeout: sleep } = require('node:timers/promises');
const lease = require('bucket-lease');

async function doStep(leadership, step) {
  // Real work goes here; `signal` cancels it the moment leadership is lost.
  await sleep(100, undefined, { signal: leadership.signal });
  // The result, stamped with this leader's epoch: a zombie leader's write is rejected.
  await leadership.fencedPut('results/leader-worker', `step ${step} by epoch ${leadership.epoch}`);
  console.log(`step ${step} at epoch ${leadership.epoch}`);
}

async function run(url, name, steps) {
  const election = new lease.Election(url, { ttl: 5_000, label: name, data: `${name}:8080` });
  const current = await election.leader();
  console.log(`${name}: leader now: ${current ? current.holder.label : 'nobody'}`);
  let done = 0;
  while (done < steps) {
    const leadership = await election.campaign(); // resolves once this worker leads
    console.log(`${name}: leading at epoch ${leadership.epoch}`);
    try {
      while (done < steps) {
        leadership.ensureHeld(1_000); // throws LEASE_LOST when it cannot
        await doStep(leadership, done);
        done += 1;
      }
    } catch (e) {
      if (e.code !== 'LEASE_LOST' && e.code !== 'LEASE_FENCED' && e.name !== 'AbortError') throw e;
      console.log(`${name}: lost leadership, stopping work: ${e.message}`);
    } finally {
      await election.resign().catch((e) => {
        if (e.code !== 'LEASE_LOST') throw e;
      });
    }
  }
  console.log(`${name}: did ${done} steps`);
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { name: { type: 'string', default: 'worker' }, steps: { type: 'string', default: '10' } },
});
if (positionals.length !== 1) {
  console.error('usage: leader-worker.js LEASE_URL [--name NAME] [--steps N]');
  process.exit(64);
}
run(positionals[0], values.name, Number(values.steps)).catch((e) => {
  console.error(e);
  process.exit(1);
});
