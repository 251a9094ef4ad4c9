#!/usr/bin/env node
// Builds the native addon and puts it at node/lease.node. Run by `npm install` (the package's
// `install` script), so `npm install ./node` or `npm install /path/to/lease/node` works on a
// machine with a Rust toolchain and nothing else: it needs no npm packages, only `cargo`.
//
//   node scripts/build.js            cargo build --release --target HOST -p lease-node
//
// Environment:
//   CARGO_TARGET_DIR        where cargo builds (default: the workspace's target/); honoured as by cargo
//   LEASE_NODE_TARGET       the target triple (default: rustc's host triple). The build always
//                           passes --target, so it shares one release build of the core with
//                           the Python wheel and the C library built the same way.
//   LEASE_NODE_PROFILE      cargo profile (default release)
//   LEASE_NODE_SKIP_BUILD=1 do nothing (a lease.node is provided some other way)
//   CARGO                   the cargo binary (default `cargo` on PATH)
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = path.resolve(__dirname, '..');
const out = path.join(here, 'lease.node');
const cargo = process.env.CARGO || 'cargo';

function fail(message) {
  process.stderr.write(`lease: ${message}\n`);
  process.exit(1);
}

function run(cmd, args, opts = {}) {
  try {
    return execFileSync(cmd, args, { cwd: here, encoding: 'utf8', ...opts });
  } catch (e) {
    if (e.code === 'ENOENT') {
      fail(
        `\`${cmd}\` was not found. Building the lease addon needs a Rust toolchain ` +
          '(https://rustup.rs), stable, new enough for the workspace (see rust-version in Cargo.toml).',
      );
    }
    fail(`\`${cmd} ${args.join(' ')}\` failed${e.status != null ? ` (exit ${e.status})` : ''}`);
  }
}

function main() {
  if (process.env.LEASE_NODE_SKIP_BUILD === '1') {
    console.log('lease: LEASE_NODE_SKIP_BUILD=1, not building the addon');
    return;
  }
  const triple =
    process.env.LEASE_NODE_TARGET ||
    (/^host: (.+)$/m.exec(run('rustc', ['-vV'])) || [])[1] ||
    fail('cannot tell the host target from `rustc -vV`');
  const profile = process.env.LEASE_NODE_PROFILE || 'release';
  // The target dir as cargo sees it (CARGO_TARGET_DIR, .cargo/config.toml, or the workspace's).
  const meta = JSON.parse(
    run(cargo, ['metadata', '--no-deps', '--format-version', '1'], { maxBuffer: 64 << 20 }),
  );
  const targetDir = meta.target_directory;
  console.log(`lease: building the addon (cargo build --profile ${profile} --target ${triple})`);
  run(cargo, ['build', '--profile', profile, '--target', triple, '-p', 'lease-node'], {
    stdio: 'inherit',
  });
  const dir = profile === 'dev' ? 'debug' : profile;
  const lib = {
    darwin: 'liblease_node.dylib',
    win32: 'lease_node.dll',
  }[process.platform] || 'liblease_node.so';
  const built = path.join(targetDir, triple, dir, lib);
  if (!fs.existsSync(built)) fail(`cargo finished but ${built} is not there`);
  // Copy, then rename over: a process that has the old lease.node loaded keeps its mapping
  // intact (writing into the loaded file in place would crash it).
  const tmp = `${out}.${process.pid}.tmp`;
  fs.copyFileSync(built, tmp);
  fs.renameSync(tmp, out);
  console.log(`lease: ${path.relative(process.cwd(), out) || out} <- ${built}`);
}

main();
