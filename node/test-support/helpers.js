// Shared by node/test/*.test.js: fresh lease URLs on each store (a temporary directory, and the
// servers of scripts/stores.sh: moto, fake-gcs-server, Azurite), `lease break` through the CLI,
// and the store matrix.
//
// Store URLs come from the environment contract of scripts/stores.sh:
// LEASE_TEST_S3_MOTO=s3://BUCKET?endpoint=…&region=…&path_style=true, LEASE_TEST_GCS_FAKE=gs://…,
// LEASE_TEST_AZURE_AZURITE=az://…. The binding has no code of its own for any of them (the core's
// URL registry opens them all). With CI=true a missing server fails its store's tests;
// elsewhere they are skipped, loudly.
'use strict';

const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { describe, after } = require('node:test');

const lease = require('bucket-lease');

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

/** Store kind -> the variable holding its base URL. */
const SERVERS = { moto: 'LEASE_TEST_S3_MOTO', gcs: 'LEASE_TEST_GCS_FAKE', azure: 'LEASE_TEST_AZURE_AZURITE' };

/** `s3://bucket?query` + key -> `s3://bucket/key?query` (the same for gs:// and az://). */
function s3Url(base, key) {
  const i = base.indexOf('?');
  const head = i < 0 ? base : base.slice(0, i);
  const query = i < 0 ? '' : base.slice(i);
  return `${head.replace(/\/+$/, '')}/${key}${query}`;
}

function uid() {
  return crypto.randomBytes(6).toString('hex');
}

/** The base URL of the server for `store` ('moto', 'gcs', 'azure'): a store URL, no key. */
function storeBase(store) {
  const base = process.env[SERVERS[store]];
  if (!base) throw new Error(`${SERVERS[store]} is not set`);
  return base;
}

/** A fresh lease URL on `store` ('file', 'memory', 'moto', 'gcs', 'azure'). */
function makeUrl(store, name = 't') {
  const key = `node-${name.replace(/[^A-Za-z0-9_-]+/g, '-').slice(0, 40)}-${uid()}`;
  if (store === 'file') return `file://${tmpDir()}/${key}`;
  if (store === 'memory') return `memory://node-test/${key}`;
  if (store in SERVERS) return s3Url(storeBase(store), `locks/${key}`);
  throw new Error(`unknown store ${store}`);
}

const missing = (store) =>
  `${SERVERS[store]} is not set: run the Node tests through scripts/test-node.sh to test on ${store}`;

/**
 * `describe` the same suite once per store: `fn(store, url)` where `url(name)` makes a fresh
 * lease URL on it. Without a store's server its suite is skipped (loudly), or fails under CI.
 */
function eachStore(title, fn) {
  for (const store of ['file', 'moto', 'gcs', 'azure']) {
    const name = `${title} [${store}]`;
    if (store in SERVERS && !process.env[SERVERS[store]]) {
      if (inCI()) {
        describe(name, () => {
          require('node:test').it('has a server to test on', () => {
            throw new Error(`${missing(store)} (CI=true: every store's tests must run)`);
          });
        });
      } else {
        process.stderr.write(`\n!!! SKIPPING STORE TESTS (${name}): ${missing(store)}\n`);
        describe(name, { skip: `!!! ${missing(store)}` }, () => {});
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
/** The lease's key in its store: after the bucket (S3, GCS), account and container (Azure), or directory (file). */
function keyOf(url) {
  const head = url.split('?')[0];
  const [scheme, path] = head.split('://');
  if (scheme === 's3' || scheme === 'gs') return path.split('/').slice(1).join('/');
  if (scheme === 'az' || scheme === 'azure') return path.split('/').slice(2).join('/');
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
  storeBase,
  eachStore,
  leaseBin,
  breakLease,
  keyOf,
  sleep,
  until,
  uid,
  ROOT: path.resolve(__dirname, '..', '..'),
};
