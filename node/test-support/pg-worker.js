// The Node worker of the real-process histories (postgres/tests/history.py; the protocol is in
// postgres/examples/history_worker.rs): a lease holder running read-modify-write transactions on
// a counter, fenced by bucket-lease/pg, printing what happened to each.
//   node pg-worker.js DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE
'use strict';

const { Client } = require('pg');
const lease = require('..');
const { fence } = require('../pg');

const say = (line) => process.stdout.write(line + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const envMs = (name) => (process.env[name] ? Number(process.env[name]) : null);

function pause(at, wanted, op) {
  if (op === 1 && at === wanted) {
    say(`paused ${at}`);
    process.kill(process.pid, 'SIGSTOP');
  }
}

async function main() {
  const [dsn, url, resource, name, opsArg, at, fencing] = process.argv.slice(2);
  const ops = Number(opsArg);
  const think = envMs('LEASE_PG_THINK_MS') || 0;
  const idle = envMs('LEASE_PG_IDLE_TIMEOUT_MS');
  let held = null;
  let token = process.env.LEASE_PG_TOKEN;
  if (!token) {
    held = await lease.acquire(url, { ttl: envMs('LEASE_PG_TTL_MS') || 1000, wait: null });
    token = held.token;
  }
  const epoch = lease.parseToken(token).epoch;
  say(`holding ${epoch} ${token}`);
  const client = new Client({ connectionString: dsn });
  client.on('error', () => {}); // a terminated session: the next query reports it
  await client.connect();
  for (let i = 1; i <= ops; i++) {
    const op = `${name}-${i}`;
    if (held) {
      try {
        held.ensureHeld(100);
      } catch {
        say(`lost ${op}`);
        process.exit(5);
      }
    }
    let read;
    try {
      await sleep(think);
      await client.query('BEGIN');
      pause(at, 'before-fence', i);
      if (fencing === 'fence') await fence(client, resource, token, idle ? { idleTimeout: idle } : {});
      read = Number((await client.query('SELECT n FROM pg_counter WHERE id = $1', [resource])).rows[0].n);
      pause(at, 'after-read', i);
      await sleep(think / 2);
      await client.query('UPDATE pg_counter SET n = $1 WHERE id = $2', [read + 1, resource]);
      await client.query(
        'INSERT INTO pg_history (op, worker, epoch, read_n, resource) VALUES ($1, $2, $3::text::numeric, $4, $5)',
        [op, name, String(epoch), read, resource],
      );
      pause(at, 'before-commit', i);
      await client.query('COMMIT');
    } catch (e) {
      if (e.code === 'LEASE_FENCED') {
        say(`fenced ${op} ${e.epoch ?? 0}`);
        process.exit(3);
      }
      say(`error ${op} ${e.kind || e.code || e.name} ${String(e.message).split('\n')[0]}`);
      process.exit(4);
    }
    say(`ack ${op} ${read} ${epoch}`);
  }
  if (held) await held.release();
  await client.end();
  say('done');
}

main().catch((e) => {
  say(`error setup ${e.code || e.name} ${String(e.message).split('\n')[0]}`);
  process.exit(4);
});
