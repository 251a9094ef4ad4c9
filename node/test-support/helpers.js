// Shared by node/test/*.test.js: fresh lease URLs on each store (a temporary directory, and the
// moto S3 server of scripts/s3-servers.sh), `lease break` through the CLI, and the store matrix.
//
// S3 URLs come from the environment contract of scripts/s3-servers.sh:
// LEASE_TEST_S3_MOTO=s3://BUCKET?endpoint=…&region=…&path_style=true. With CI=true a missing
// server fails the S3 tests; elsewhere they are skipped, loudly.
'use strict';

const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { describe, after } = require('node:test');

const lease = require('lease');

const inCI = () => (process.env.CI || '').toLowerCase() === 'true';

/** Seconds of slack for things that happen "within the ttl" on a slow, shared machine. */
const MARGIN = 3000;

let tmpRoot;
function tmpDir() {
  if (!tmpRoot) {
    tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'lease-node-test-'));
    process.on('exit', () => fs.rmSync(tmpRoot, { recursive: true, force: true }));
  }
  const d = fs.mkdtempSync(path.join(tmpRoot, 'd-'));
  return d;
}

/** `s3://bucket?query` + key -> `s3://bucket/key?query`. */
function s3Url(base, key) {
  const i = base.indexOf('?');
  const head = i < 0 ? base : base.slice(0, i);
  const query = i < 0 ? '' : base.slice(i);
  return `${head.replace(/\/+$/, '')}/${key}${query}`;
}

function uid() {
  return crypto.randomBytes(6).toString('hex');
}

/** A fresh lease URL on `store` ('file', 'memory', 'moto'). */
function makeUrl(store, name = 't') {
  const key = `node-${name.replace(/[^A-Za-z0-9_-]+/g, '-').slice(0, 40)}-${uid()}`;
  if (store === 'file') return `file://${tmpDir()}/${key}`;
  if (store === 'memory') return `memory://node-test/${key}`;
  if (store === 'moto') {
    const base = process.env.LEASE_TEST_S3_MOTO;
    if (!base) throw new Error('LEASE_TEST_S3_MOTO is not set');
    return s3Url(base, `locks/${key}`);
  }
  throw new Error(`unknown store ${store}`);
}

const S3_MISSING =
  'LEASE_TEST_S3_MOTO is not set: run the Node tests through scripts/test-node.sh to test on S3 (moto)';

/**
 * `describe` the same suite once per store: `fn(store, url)` where `url(name)` makes a fresh
 * lease URL on it. Without a moto server the S3 suite is skipped (loudly), or fails under CI.
 */
function eachStore(title, fn) {
  for (const store of ['file', 'moto']) {
    const name = `${title} [${store}]`;
    if (store === 'moto' && !process.env.LEASE_TEST_S3_MOTO) {
      if (inCI()) {
        describe(name, () => {
          require('node:test').it('has an S3 server to test on', () => {
            throw new Error(`${S3_MISSING} (CI=true: S3 tests must run)`);
          });
        });
      } else {
        process.stderr.write(`\n!!! SKIPPING S3 TESTS (${name}): ${S3_MISSING}\n`);
        describe(name, { skip: `!!! ${S3_MISSING}` }, () => {});
      }
      continue;
    }
    describe(name, () => fn(store, (n) => makeUrl(store, n)));
  }
}

function leaseBin() {
  const bin = process.env.LEASE_BIN;
  if (!bin || !fs.existsSync(bin)) {
    throw new Error('LEASE_BIN (the built `lease` CLI) is not set: run scripts/test-node.sh');
  }
  return bin;
}

/**
 * `lease break URL --yes`, as an operator would. By default the break waits out the holder;
 * `{ allowTwoHolders: true }` lets the next holder in at once while the broken one may still
 * believe it holds (what a zombie test needs, and what fencing makes safe).
 */
function breakLease(url, { allowTwoHolders = false } = {}) {
  const args = ['break', url, '--yes', ...(allowTwoHolders ? ['--allow-two-holders'] : [])];
  execFileSync(leaseBin(), args, { stdio: 'pipe', timeout: 60_000 });
}

/** The lease's key in its store: the path after the bucket (S3) or directory (file). */
function keyOf(url) {
  const head = url.split('?')[0];
  if (head.startsWith('s3://')) return head.slice('s3://'.length).split('/').slice(1).join('/');
  return head.slice(head.lastIndexOf('/') + 1);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolve once `pred()` is true, checking every `every` ms, or reject after `timeout` ms. */
async function until(pred, timeout, what = 'condition', every = 10) {
  const end = performance.now() + timeout;
  for (;;) {
    if (await pred()) return;
    if (performance.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await sleep(every);
  }
}

module.exports = {
  lease,
  MARGIN,
  inCI,
  tmpDir,
  makeUrl,
  eachStore,
  leaseBin,
  breakLease,
  keyOf,
  sleep,
  until,
  uid,
  ROOT: path.resolve(__dirname, '..', '..'),
};
