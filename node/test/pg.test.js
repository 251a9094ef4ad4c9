// bucket-lease/pg on a real PostgreSQL server (scripts/postgres.sh; LEASE_TEST_PG): the
// admission rule and its error codes, the waits, and the real-process histories
// (postgres/tests/history.py) with the Node worker (test-support/pg-worker.js).
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { describe, it, before, after } = require('node:test');

const DSN = process.env.LEASE_TEST_PG || '';
const CI = process.env.CI === 'true';
if (!DSN && CI) throw new Error('LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run)');
const L = 's3://bucket/locks/jobs';

describe('bucket-lease/pg', { skip: DSN ? false : 'LEASE_TEST_PG is not set (scripts/postgres.sh start)' }, () => {
  const { Client } = require('pg');
  const pgfence = require('../pg');
  const schema = `node_${process.pid}_${Date.now()}`;
  const clients = [];
  async function connect() {
    const c = new Client({ connectionString: DSN, options: `-c search_path=${schema}`, application_name: schema });
    c.on('error', () => {});
    await c.connect();
    clients.push(c);
    return c;
  }
  async function admit(c, resource, token, options) {
    await c.query('BEGIN');
    try {
      await pgfence.fence(c, resource, token, options);
      await c.query('COMMIT');
    } catch (e) {
      await c.query('ROLLBACK');
      throw e;
    }
  }

  before(async () => {
    const admin = await connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    await pgfence.migrate(admin);
    await pgfence.migrate(admin); // idempotent
  });
  after(async () => {
    await clients[0].query(`DROP SCHEMA ${schema} CASCADE`);
    for (const c of clients) await c.end();
  });

  it('admits by the gate rule and rejects with LEASE_FENCED', async () => {
    const c = await connect();
    await admit(c, 'jobs', `${L}#5@aa`);
    await admit(c, 'jobs', `${L}#5@aa`);
    await admit(c, 'jobs', { token: `${L}#6@bb` });
    await assert.rejects(admit(c, 'jobs', `${L}#5@aa`), (e) => {
      assert.equal(e.code, 'LEASE_FENCED');
      assert.equal(e.kind, 'fenced');
      assert.equal(e.epoch, 6);
      assert.equal(e.url, L);
      assert.equal(e.cause.code, 'LF001');
      return true;
    });
    await assert.rejects(admit(c, 'jobs', `${L}#6@cc`), { code: 'LEASE_FENCED', message: /another holder/ });
    await assert.rejects(admit(c, 'jobs', 's3://bucket/locks/other#99@aa'), { code: 'LEASE_FENCED' });
    await admit(c, 'jobs', `${L}#6`);
    await assert.rejects(admit(c, 'jobs', `${L}#6@cc`), { code: 'LEASE_FENCED' });
    for (const bad of ['x#y', '#1', `${L}#1@`]) {
      await assert.rejects(admit(c, 'jobs', bad), { code: 'LEASE_INVALID' });
    }
    // A queued lock's shared or scoped grant: refused, never read as a whole-lock token.
    for (const grant of [`${L}#9@aa;shared`, `${L}#9@aa;path=tables/users`, `${L}#9@aa;range=0..10`]) {
      await assert.rejects(admit(c, 'jobs', grant), { code: 'LEASE_INVALID', message: /shared or scoped grant/ });
    }
    await assert.rejects(pgfence.fence(c, 'jobs', `${L}#7@aa`), { code: 'LEASE_INVALID', message: /outside a transaction/ });
    await assert.rejects(pgfence.fence(c, 'jobs', 7), { code: 'ERR_INVALID_ARG_TYPE' });
    await assert.rejects(pgfence.fence(c, 'jobs', `${L}#7@aa`, { wait: 1 }), { code: 'ERR_INVALID_ARG_TYPE' });
  });

  it('bounds the wait (LEASE_TIMEOUT) and maps a serialization failure to LEASE_CONFLICT', async () => {
    const a = await connect();
    const b = await connect();
    await a.query('BEGIN');
    await pgfence.fence(a, 'w', `${L}#5@aa`);
    for (const lockWait of [0, 50]) {
      await b.query('BEGIN');
      await assert.rejects(pgfence.fence(b, 'w', `${L}#6@bb`, { lockWait }), (e) => {
        assert.equal(e.code, 'LEASE_TIMEOUT');
        assert.equal(e.retryable, true);
        return true;
      });
      await b.query('ROLLBACK');
    }
    await b.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const later = pgfence.fence(b, 'w', `${L}#6@bb`).then(() => null, (e) => e);
    for (let i = 0; ; i++) {
      const { rows } = await clients[0].query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1 AND query LIKE '%lease_fence%'",
        [schema],
      );
      if (rows[0].n > 0) break;
      assert.ok(i < 3000, 'no admission ever waited on the row lock');
      await new Promise((r) => setTimeout(r, 10));
    }
    await a.query('COMMIT');
    const e = await later;
    assert.equal(e && e.code, 'LEASE_CONFLICT');
    await b.query('ROLLBACK');
    await admit(b, 'w', `${L}#6@bb`);
  });

  it('says to migrate when lease_fence is missing', async () => {
    const c = new Client({ connectionString: DSN, options: '-c search_path=pg_catalog' });
    await c.connect();
    try {
      await c.query('BEGIN');
      await assert.rejects(pgfence.fence(c, 'x', `${L}#1@aa`), { code: 'LEASE_STORE', message: /migrate/ });
      await c.query('ROLLBACK');
    } finally {
      await c.end();
    }
  });

  it('the README example', async () => {
    // node/README.md's block, as written there (its URL and DATABASE_URL pointed here).
    const own = `${schema}_readme`; // the example installs lease_fence itself
    await clients[0].query(`CREATE SCHEMA ${own}`);
    const readme = require('node:fs').readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
    const start = readme.indexOf("```js\nconst lease = require('bucket-lease');\nconst { fence, migrate } = require('bucket-lease/pg');");
    assert.ok(start >= 0, 'the example is not in node/README.md');
    const code = readme.slice(start + 6, readme.indexOf('```', start + 6))
      .replace("require('bucket-lease/pg')", `require(${JSON.stringify(path.join(__dirname, '..', 'pg.js'))})`)
      .replace("require('bucket-lease')", `require(${JSON.stringify(path.join(__dirname, '..'))})`)
      .replace("'s3://my-bucket/locks/jobs'", JSON.stringify(`file://${require('node:os').tmpdir()}/pg-readme-${process.pid}/jobs`))
      .replace('process.env.DATABASE_URL', JSON.stringify(DSN))
      .replace('connectionString: ', `options: '-c search_path=${own}', connectionString: `);
    const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
    await new AsyncFunction('require', code)(require);
    const { rows } = await clients[0].query(`SELECT n FROM ${own}.counters WHERE name = 'jobs'`);
    assert.equal(Number(rows[0].n), 1);
    await clients[0].query(`DROP SCHEMA ${own} CASCADE`);
  });

  it('histories with the Node worker: zombies, the negative control, forged tokens, faults', () => {
    const root = path.resolve(__dirname, '..', '..');
    const worker = `${process.execPath} ${path.join(root, 'node', 'test-support', 'pg-worker.js')}`;
    const out = spawnSync('python3', [path.join(root, 'postgres', 'tests', 'history.py'), '--dsn', DSN, '--worker', worker], {
      encoding: 'utf8',
      timeout: 600_000,
    });
    console.log(out.stdout, out.stderr);
    assert.equal(out.status, 0, out.stdout + out.stderr);
  });
});
