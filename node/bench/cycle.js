#!/usr/bin/env node
// Acquire/release cycle from Node vs Rust (lease-cycle-bench), and proper-lockfile.
//
//   node node/bench/cycle.js [--quick] [--rust PATH] [--rounds N] [--markdown]
//
// Measures, in one run on one machine, the cost of one acquire + release of an uncontended
// lease on memory:// and file:// from Node (`await (await lease.acquire(url)).release()`), the
// same loop in Rust ($LEASE_CYCLE_BENCH, built from tests/src/bin/cycle-bench.rs), and
// proper-lockfile's `release = await lock(path); await release()` on the same directory (a
// devDependency: `npm install` in node/). Each figure is the median of several alternating
// rounds, so drift of the machine hits both sides alike. Mirrors python/bench/cycle.py.
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { parseArgs } = require('node:util');

const lease = require('bucket-lease');

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    rust: { type: 'string', default: process.env.LEASE_CYCLE_BENCH },
    rounds: { type: 'string', default: '5' },
    markdown: { type: 'boolean', default: false },
  },
});

async function nodeCycle(url, n) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const l = await lease.acquire(url, { ttl: 30_000, wait: 10_000 });
    await l.release();
  }
  return Number(process.hrtime.bigint() - t0) / n;
}

async function lockfileCycle(file, n) {
  const lockfile = require('proper-lockfile');
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const release = await lockfile.lock(file, { realpath: false });
    await release();
  }
  return Number(process.hrtime.bigint() - t0) / n;
}

function rustCycle(rust, url, n) {
  const out = execFileSync(rust, [url, String(n), String(Math.max(1, Math.floor(n / 10)))], {
    encoding: 'utf8',
    timeout: 600_000,
  });
  return JSON.parse(out.trim().split('\n').pop()).ns_per_cycle;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function fmt(ns) {
  if (ns >= 1e6) return `${(ns / 1e6).toFixed(2)} ms`;
  if (ns >= 1e3) return `${(ns / 1e3).toFixed(2)} µs`;
  return `${ns.toFixed(0)} ns`;
}

async function main() {
  if (!args.rust) {
    console.error(
      'set LEASE_CYCLE_BENCH or pass --rust PATH (cargo build --release -p lease-systests --bin lease-cycle-bench)',
    );
    return 2;
  }
  const rounds = args.quick ? 1 : Number(args.rounds);
  const nMem = args.quick ? 200 : 20_000;
  const nFile = args.quick ? 20 : 1_000;
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'lease-bench-'));
  const results = {};
  try {
    const cases = [
      ['memory', `memory://bench/cycle-${process.pid}`, nMem],
      ['file', `file://${d}/cycle`, nFile],
    ];
    for (const [name, url, n] of cases) {
      await nodeCycle(url, Math.max(1, Math.floor(n / 10))); // warm up: runtime, store, client memo
      const rs = [];
      const js = [];
      for (let r = 0; r < rounds; r++) {
        rs.push(rustCycle(args.rust, url, n));
        js.push(await nodeCycle(url, n));
      }
      results[name] = { rust_ns: median(rs), node_ns: median(js), iterations: n };
    }
    const target = path.join(d, 'proper-lockfile-target');
    fs.writeFileSync(target, '');
    await lockfileCycle(target, Math.max(1, Math.floor(nFile / 10)));
    const pl = [];
    for (let r = 0; r < rounds; r++) pl.push(await lockfileCycle(target, nFile));
    results.file.proper_lockfile_ns = median(pl);
  } finally {
    fs.rmSync(d, { recursive: true, force: true });
  }
  for (const r of Object.values(results)) r.ratio = r.node_ns / r.rust_ns;
  console.log(JSON.stringify(results));
  if (args.markdown) {
    console.log();
    console.log('| store | Rust | Node `(await acquire()).release()` | ratio |');
    console.log('|---|---|---|---|');
    for (const [name, r] of Object.entries(results)) {
      console.log(`| ${name} | ${fmt(r.rust_ns)} | ${fmt(r.node_ns)} | ${r.ratio.toFixed(2)}× |`);
    }
    const f = results.file;
    console.log();
    console.log('| on one directory | per acquire + release |');
    console.log('|---|---|');
    console.log(`| proper-lockfile \`await (await lock(path))()\` | ${fmt(f.proper_lockfile_ns)} |`);
    console.log(`| lease \`await (await lease.acquire("file://…")).release()\` | ${fmt(f.node_ns)} |`);
    console.log(`| ratio | ${(f.node_ns / f.proper_lockfile_ns).toFixed(2)}× |`);
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
