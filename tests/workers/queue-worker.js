// A Node worker of the queued-lock history test (tests/tests/queue_history.rs).
//
//   node queue-worker.js LOG SPEC
//
// Does exactly what `lease-queue-worker run LOG SPEC` does (tests/src/bin/queue-worker.rs has
// the SPEC's fields), with the Node package: acquire, act (a belief check each time), read or
// write the data, release, SPEC.iterations times, appending each event to LOG as a JSON line
// on CLOCK_MONOTONIC (process.hrtime.bigint, which every process of the machine shares;
// written as a string, since nanoseconds outgrow a double's exact integers).
//
// The package is LEASE_NODE_PACKAGE, else the repository's node/ (built: node/lease.node).
// Readers read through the grant's `Lease.fencedRead`, which fences what it read (issue 22
// item 5).
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const lease = require(process.env.LEASE_NODE_PACKAGE || path.join(__dirname, '..', '..', 'node'));

const now = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const [logPath, specJson] = process.argv.slice(2);
  const spec = JSON.parse(specJson);
  const name = spec.name;
  const log = (ev, fields = {}, t = now()) =>
    fs.appendFileSync(logPath, JSON.stringify({ t: String(t), w: name, ev, ...fields }) + '\n');

  log('start', { pid: process.pid, lang: 'node', gated: true });
  const options = {
    ttl: spec.ttl_ms,
    wait: spec.wait_ms ?? 120_000,
    pollInterval: spec.poll_ms,
    label: name,
    queue: Boolean(spec.queue),
  };
  if (spec.mode === 'shared' && spec.permits == null) options.shared = true;
  if (spec.permits != null) options.permits = spec.permits;
  if (spec.scope.startsWith('path:')) options.scope = spec.scope.slice('path:'.length);
  if (spec.scope.startsWith('range:')) options.range = spec.scope.slice('range:'.length).split('..').map(Number);
  const request = {};
  for (const k of ['lock', 'mode', 'scope', 'permits', 'ttl_ms', 'poll_ms']) request[k] = spec[k] ?? null;
  const actPause = spec.hold_ms / Math.max(spec.acts, 1);
  const ttlNs = BigInt(spec.ttl_ms) * 1_000_000n;

  // Every renewal of the current grant: a jump of its deadline, with its send time.
  let current = null;
  let lastDeadline = 0n;
  const watcher = setInterval(() => {
    if (current === null) {
      lastDeadline = 0n;
      return;
    }
    const t = now();
    const remaining = current.remaining();
    if (remaining > 0) {
      const deadline = t + BigInt(Math.round(remaining * 1e6));
      if (deadline > lastDeadline + 5_000_000n) log('renewed', { t_send: String(deadline - ttlNs) }, t);
      if (deadline > lastDeadline) lastDeadline = deadline;
    }
  }, 20);

  const read = async (held, key) => {
    try {
      const o = await held.fencedRead(key);
      return { value: o === null ? null : o.data.toString() };
    } catch (e) {
      return { error: e.message };
    }
  };
  const kind = (e) => (e && typeof e.code === 'string' ? e.code.replace(/^LEASE_/, '').toLowerCase() : String(e));

  if (spec.go) {
    // Warm: the first request (client, connection) before the clock runs; then the round's
    // start, which every worker's first request waits for.
    await lease.status(spec.url).catch(() => {});
    log('ready');
    const until = Date.now() + 120_000;
    while (!fs.existsSync(spec.go)) {
      if (Date.now() > until) throw new Error(`the round's start ${spec.go} never came`);
      await sleep(5);
    }
  }

  for (let i = 0; i < spec.iterations; i++) {
    log('request', request);
    let held;
    try {
      held = await lease.acquire(spec.url, options);
    } catch (e) {
      log('error', { kind: kind(e), message: e.message });
      await sleep(Math.max(spec.pause_ms ?? 0, 100));
      continue;
    }
    log('grant', { token: held.epoch, queued: held.grant !== null });
    current = held;
    let lost = false;
    for (let a = 0; a < spec.acts; a++) {
      const t = now();
      try {
        held.ensureHeld(0);
      } catch {
        log('lost', { reason: String(held.lostReason) });
        lost = true;
        break;
      }
      log('act', {}, t);
      if (spec.data && spec.role === 'reader') {
        log('read', { key: spec.data, ...(await read(held, spec.data)) });
      } else if (spec.data && spec.role === 'writer') {
        const value = `${name}:${held.epoch}:${i}:${a}`;
        const sent = now();
        let outcome = 'ok';
        try {
          await held.fencedPut(spec.data, value);
        } catch (e) {
          outcome = kind(e);
        }
        log('write', { key: spec.data, value, outcome, sent: String(sent), checked: true });
      }
      await sleep(actPause);
    }
    if (!lost) {
      const t = now();
      try {
        held.ensureHeld(0);
        log('end', {}, t);
      } catch {
        log('lost', { reason: 'at the end' });
      }
    }
    current = null;
    let outcome = 'ok';
    try {
      await held.release();
    } catch (e) {
      outcome = kind(e);
    }
    log('released', { outcome });
    await sleep(spec.pause_ms ?? 0);
  }
  clearInterval(watcher);
  log('done');
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
