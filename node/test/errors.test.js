// One test per error kind (the mapping lives in node/src/error.rs), and bad input: mirrors
// python/tests/test_errors.py.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { describe, it } = require('node:test');

const { lease, makeUrl, tmpDir, leaseBin } = require('../test-support/helpers.js');

const CODES = {
  held: 'LEASE_HELD',
  timeout: 'LEASE_TIMEOUT',
  cancelled: 'ABORT_ERR',
  lost: 'LEASE_LOST',
  fenced: 'LEASE_FENCED',
  conflict: 'LEASE_CONFLICT',
  unavailable: 'LEASE_UNAVAILABLE',
  invalid: 'LEASE_INVALID',
  store: 'LEASE_STORE',
  corrupt: 'LEASE_CORRUPT',
  internal: 'LEASE_INTERNAL',
  queue_full: 'LEASE_QUEUE_FULL',
  unsupported: 'LEASE_UNSUPPORTED',
};

describe('each kind maps to its code', () => {
  for (const [kind, code] of Object.entries(CODES)) {
    it(kind, () => {
      const e = lease._native._errorForKind(kind, `a ${kind} error`, 'memory://x/y', 7, 'abcd');
      assert.ok(e instanceof Error);
      assert.equal(e.code, code);
      assert.equal(e.kind, kind);
      assert.equal(e.message, `a ${kind} error`);
      assert.equal(e.url, 'memory://x/y');
      assert.equal(e.epoch, 7);
      assert.equal(e.holder.id, 'abcd');
      assert.equal(e.retryable, ['held', 'timeout', 'unavailable', 'queue_full'].includes(kind));
      assert.equal(e.name, kind === 'cancelled' ? 'AbortError' : 'Error');
      assert.ok(Object.values(lease.codes).includes(code));
    });
  }
  it('every core kind has its own code', () => {
    // A kind the core adds must get its code here (and in node/src/errors.rs), not fall back
    // to the bare LEASE_ERROR.
    const kinds = lease._native._errorKinds();
    assert.deepEqual([...kinds].sort(), Object.keys(CODES).sort());
    for (const kind of kinds) {
      const e = lease._native._errorForKind(kind, 'x');
      assert.notEqual(e.code, 'LEASE_ERROR', kind);
      assert.ok(Object.values(lease.codes).includes(e.code), kind);
    }
  });
  it('without details', () => {
    const e = lease._native._errorForKind('timeout', 'waited');
    assert.equal(e.url, null);
    assert.equal(e.epoch, null);
    assert.equal(e.holder, null);
  });
});

// The kinds public calls produce, provoked for real.

it('held for real', async () => {
  const url = makeUrl('file', 'held');
  const l = await lease.acquire(url);
  await assert.rejects(lease.acquire(url, { wait: 0 }), { code: 'LEASE_HELD' });
  await l.release();
});

it('timeout for real', async () => {
  const url = makeUrl('file', 'timeout');
  const l = await lease.acquire(url);
  await assert.rejects(lease.acquire(url, { wait: 50 }), { code: 'LEASE_TIMEOUT' });
  await l.release();
});

it('lost for real', async () => {
  const l = await lease.acquire(makeUrl('file', 'lost'));
  await l.release();
  assert.throws(() => l.ensureHeld(), { code: 'LEASE_LOST' });
});

it('a missing directory is created, as for bare names (issue 16)', async () => {
  const dir = path.join(tmpDir(), 'no/such/dir');
  assert.equal(await lease.fencedGet(`file://${dir}/x`), null);
  assert.equal(fs.existsSync(dir), false, 'a read created the directory');
  const l = await lease.acquire(`file://${dir}/x`, { wait: 0 });
  assert.ok(fs.statSync(path.join(dir, 'x')).isFile());
  await l.release();
});

it('a path through a regular file is refused, naming it', async () => {
  const file = path.join(tmpDir(), 'plain');
  fs.writeFileSync(file, 'x');
  await assert.rejects(lease.acquire(`file://${file}/sub/x`, { wait: 0 }), (e) => {
    assert.ok(['LEASE_STORE', 'LEASE_INVALID'].includes(e.code), e.code);
    assert.equal(e.retryable, false);
    assert.match(e.message, /plain/);
    return true;
  });
});

it('store error for an unreadable directory', { skip: process.getuid?.() === 0 && 'root reads everything' }, async () => {
  const d = path.join(tmpDir(), 'locked');
  fs.mkdirSync(d, { mode: 0o000 });
  try {
    await assert.rejects(lease.status(`file://${d}/x`), { code: 'LEASE_STORE' });
  } finally {
    fs.chmodSync(d, 0o700);
  }
});

it('unavailable for an unreachable s3 endpoint', async () => {
  // Credentials for the SDK, in a child so this process's environment stays as it is.
  const script = `
    const lease = require('bucket-lease');
    lease.status('s3://nobucket/x?endpoint=http://127.0.0.1:9&region=us-east-1&path_style=true')
      .then(() => { console.log('resolved?!'); process.exit(1); },
            (e) => { console.log(JSON.stringify({ code: e.code, retryable: e.retryable, url: e.url })); });`;
  const out = execFileSync(process.execPath, ['-e', script], {
    cwd: path.join(__dirname, '..'),
    env: { ...process.env, AWS_ACCESS_KEY_ID: 'x', AWS_SECRET_ACCESS_KEY: 'y', AWS_EC2_METADATA_DISABLED: 'true' },
    encoding: 'utf8',
    timeout: 120_000,
  });
  const e = JSON.parse(out.trim().split('\n').pop());
  assert.equal(e.code, 'LEASE_UNAVAILABLE');
  assert.equal(e.retryable, true);
  assert.notEqual(e.url, null);
});

it('invalid for a bad url', async () => {
  await assert.rejects(lease.acquire('ftp://bucket/x'), (e) => {
    assert.equal(e.code, 'LEASE_INVALID');
    assert.match(e.message, /ftp:\/\/bucket\/x/);
    assert.match(e.message, /unsupported scheme/);
    return true;
  });
});

it('a mistyped url is refused with the fix, not made a local lock (issue 28)', async () => {
  for (const [typo, fix] of [
    ['s3:/bucket/x', 's3://bucket/x'],
    ['gs:/b/x', 'gs://b/x'],
    ['file:/tmp/x', 'file:///tmp/x'],
  ]) {
    await assert.rejects(lease.acquire(typo, { wait: 0 }), (e) => {
      assert.equal(e.code, 'LEASE_INVALID');
      assert.ok(e.message.includes(`did you mean "${fix}"`), e.message);
      return true;
    });
  }
});

it('a holder without a label is named by its process (issue 28)', async () => {
  const url = makeUrl('file', 'nolabel');
  const l = await lease.acquire(url);
  try {
    await assert.rejects(lease.acquire(url, { wait: 0 }), (e) => {
      assert.equal(e.code, 'LEASE_HELD');
      assert.ok(e.message.includes('a node process (id '), e.message);
      assert.ok(e.message.includes(`pid ${process.pid}`), e.message);
      return true;
    });
  } finally {
    await l.release();
  }
});

it('fenced for real is in fencing.test.js; corrupt for a corrupt record', async () => {
  const d = tmpDir();
  fs.writeFileSync(path.join(d, 'bad'), '{not json');
  const s = await lease.status(`file://${d}/bad`);
  assert.equal(s.state, 'corrupt');
  assert.equal(typeof s.detail, 'string');
});

// Bad input: TypeError for the wrong type, LEASE_INVALID for a bad value, clear messages.

const BAD_TYPES = [
  [{ ttl: {} }, /"options.ttl" property must be a number of milliseconds or a string with its unit \('30s'\), not an instance of Object/],
  [{ ttl: true }, /not type boolean/],
  [{ ttl: [1] }, /not an array/],
  [{ ttl: 10n }, /not type bigint/],
  [{ wait: null, unavailableTimeout: false }, /"options.unavailableTimeout" property must be a number/],
  [{ label: 5 }, /"options.label" property must be a string, not type number/],
  [{ data: Buffer.from('x') }, /"options.data" property must be a string/],
  [{ signal: {} }, /"options.signal" property must be an AbortSignal/],
  [{ timeout: 5 }, /Unknown option "timeout"/],
];

describe('wrong types reject with TypeError', () => {
  for (const [opts, message] of BAD_TYPES) {
    it(JSON.stringify(opts, (_, v) => (typeof v === 'bigint' ? `${v}n` : v)), async () => {
      await assert.rejects(lease.acquire(makeUrl('file', 't'), opts), (e) => {
        assert.ok(e instanceof TypeError, e);
        assert.equal(e.code, 'ERR_INVALID_ARG_TYPE');
        assert.match(e.message, message);
        return true;
      });
    });
  }
  it('options that are not an object', async () => {
    await assert.rejects(lease.acquire(makeUrl('file', 't'), 30_000), TypeError);
    await assert.rejects(lease.acquire(makeUrl('file', 't'), 'x'), TypeError);
  });
});

describe('wrong url types reject with TypeError', () => {
  for (const url of [undefined, null, 42, Buffer.from('file:///tmp/x'), ['x'], {}]) {
    it(String(url), async () => {
      await assert.rejects(lease.acquire(url), { name: 'TypeError', message: /"url" argument must be a string/ });
      await assert.rejects(lease.status(url), TypeError);
      await assert.rejects(lease.tryAcquire(url), TypeError);
      assert.throws(() => lease.watch(url), TypeError);
      assert.throws(() => new lease.Election(url), TypeError);
    });
  }
});

const BAD_VALUES = [
  [{ ttl: -1 }, /ttl must be a finite number of milliseconds, at least 0/],
  [{ ttl: NaN }, /finite/],
  [{ ttl: Infinity }, /finite/],
  [{ ttl: 1e300 }, /too large/],
  [{ ttl: 0 }, /ttl 0ms is out of range/],
  // Most likely meant as seconds: the message says so.
  [{ ttl: 10 }, /ttl is in milliseconds \(10000 for 10 s\)/],
  [{ ttl: 365 * 24 * 3600 * 1000 }, /out of range/],
  [{ wait: -500 }, /wait must be a finite number/],
  [{ wait: NaN }, /wait must be a finite number/],
  [{ label: 'a\nb' }, /label must be at most/],
  [{ label: 'x'.repeat(300) }, /label must be at most/],
  [{ data: 'x'.repeat(20000) }, /at most/],
];

describe('bad values reject with LEASE_INVALID', () => {
  for (const [opts, message] of BAD_VALUES) {
    it(JSON.stringify(opts).slice(0, 60), async () => {
      await assert.rejects(lease.acquire(makeUrl('file', 'v'), opts), (e) => {
        assert.equal(e.code, 'LEASE_INVALID', e.message);
        assert.match(e.message, message);
        return true;
      });
    });
  }
});

describe('bad urls reject with LEASE_INVALID', () => {
  for (const url of ['', 'ftp://b/x', 'gs://B/x', 'az://account', 's3://B/x', 's3://bucket', 'file://relative/x', 'memory://ns', 's3://bucket/a//b', 'a\0b', '/']) {
    it(JSON.stringify(url), async () => {
      await assert.rejects(lease.acquire(url, { wait: 0 }), { code: 'LEASE_INVALID' });
      await assert.rejects(lease.status(url), { code: 'LEASE_INVALID' });
    });
  }
});

it('bad input elsewhere', async () => {
  const url = makeUrl('file', 'e');
  await assert.rejects(lease.tryAcquire(url, { ttl: '1' }), { code: 'LEASE_INVALID', message: /needs a unit/ });
  await assert.rejects(lease.tryAcquire(url, { wait: 0 }), { name: 'TypeError', message: /Unknown option "wait"/ });
  assert.throws(() => lease.watch(url, { pollInterval: -1 }), { code: 'LEASE_INVALID' });
  assert.throws(() => lease.watch(url, { pollInterval: '1' }), TypeError);
  assert.throws(() => lease.watch(url, { signal: 'x' }), TypeError);
  assert.throws(() => new lease.Election(url, { ttl: '1' }), { code: 'LEASE_INVALID' });
  assert.throws(() => new lease.Election(url, { ttl: 1 }), { code: 'LEASE_INVALID' });
  const l = await lease.acquire(url);
  try {
    assert.throws(() => l.ensureHeld('5'), TypeError);
    assert.throws(() => l.ensureHeld(-5), { code: 'LEASE_INVALID' });
    assert.throws(() => lease.parseToken(5), TypeError);
    assert.throws(() => lease.parseToken('no token'), { code: 'LEASE_INVALID' });
    const e = new lease.Election(url);
    await assert.rejects(e.campaign({ signal: 5 }), TypeError);
    await assert.rejects(e.campaign('x'), TypeError);
  } finally {
    await l.release();
  }
});

it('wait: Infinity and wait: undefined wait as long as it takes', async () => {
  const url = makeUrl('file', 'inf');
  const l = await lease.acquire(url);
  const a = lease.acquire(url, { wait: Infinity });
  const b = lease.acquire(url, { wait: undefined });
  await new Promise((r) => setTimeout(r, 200));
  await l.release();
  const first = await Promise.race([a, b]);
  await first.release();
  const second = await (first === (await a) ? b : a);
  await second.release();
  assert.ok(second.epoch > first.epoch);
});

it('cli reads what node wrote', async () => {
  const url = makeUrl('file', 'cli');
  const l = await lease.acquire(url, { label: 'from-node' });
  try {
    const out = execFileSync(leaseBin(), ['status', url, '--json'], { encoding: 'utf8', timeout: 60_000 });
    const s = JSON.parse(out);
    assert.equal(s.state, 'held');
    assert.equal(s.epoch, l.epoch);
    assert.equal(s.holder.label, 'from-node');
    // The same shape as status(), in snake_case.
    const mine = await lease.status(url);
    assert.equal(mine.ttlMs, s.ttl_ms);
    assert.equal(mine.holder.id, s.holder.id);
  } finally {
    await l.release();
  }
});

// Durations: numbers are milliseconds (as setTimeout's), strings carry their unit ('30s'), so a
// number in the wrong unit is hard to pass unnoticed.
describe('durations', () => {
  it('strings with a unit', async () => {
    const l = await lease.acquire(makeUrl('file', 'dur'), { ttl: '12s', wait: '1m30s' });
    try {
      assert.equal(l.ttl, 12_000);
    } finally {
      await l.release();
    }
  });
  it('a number in a string is refused, with the fix in the message', async () => {
    await assert.rejects(lease.acquire(makeUrl('file', 'dur'), { ttl: '30000' }), {
      code: 'LEASE_INVALID',
      message: /30000ms, 30000s/,
    });
    await assert.rejects(lease.acquire(makeUrl('file', 'dur'), { wait: 'soon' }), {
      code: 'LEASE_INVALID',
      message: /invalid duration/,
    });
  });
  it('a ttl written in seconds by mistake is refused, with the fix in the message', async () => {
    await assert.rejects(lease.acquire(makeUrl('file', 'dur'), { ttl: 30 }), {
      code: 'LEASE_INVALID',
      message: /ttl is in milliseconds \(30000 for 30 s\)/,
    });
  });
});

it('an unreachable store ends a wait with LEASE_UNAVAILABLE', async () => {
  // A port nothing listens on (no credential lookup leaves the machine: anonymous).
  const net = require('node:net');
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = srv.address().port;
  await new Promise((resolve) => srv.close(resolve));
  const url = `gs://bucket/job?endpoint=http://127.0.0.1:${port}&anonymous=true`;
  for (const options of [{ wait: 2_000 }, { unavailableTimeout: '2s' }]) {
    const start = performance.now();
    await assert.rejects(lease.acquire(url, options), (e) => {
      assert.equal(e.code, 'LEASE_UNAVAILABLE', e.message);
      assert.doesNotMatch(e.message, /outcome of/);
      return true;
    });
    const took = performance.now() - start;
    assert.ok(took >= 1_900 && took < 9_000, `${JSON.stringify(options)}: ${took} ms`);
  }
});
