#!/usr/bin/env node
// Regenerates index.d.ts with the napi-rs CLI (a devDependency: `npm install` in node/ first)
// from the addon's Rust sources and types/header.d.ts.
//
//   node scripts/types.js           write index.d.ts
//   node scripts/types.js --check   fail (exit 1, with a diff) if index.d.ts is out of date
//
// Builds the addon as scripts/build.js does (release, --target HOST, same target dir), into a
// temporary directory: it leaves lease.node alone.
'use strict';

const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const here = path.resolve(__dirname, '..');
const check = process.argv.includes('--check');
const triple =
  process.env.LEASE_NODE_TARGET || /^host: (.+)$/m.exec(execFileSync('rustc', ['-vV'], { encoding: 'utf8' }))[1];
const cli = path.join(here, 'node_modules', '@napi-rs', 'cli', 'dist', 'cli.js');
if (!fs.existsSync(cli)) {
  console.error('lease: the napi-rs CLI is not installed: run `npm install` in node/ first');
  process.exit(2);
}

const out = fs.mkdtempSync(path.join(os.tmpdir(), 'lease-node-types-'));
try {
  const r = spawnSync(
    process.execPath,
    [cli, 'build', '--release', '--target', triple, '-p', 'lease-node', '--output-dir', out, '--dts', 'index.d.ts'],
    { cwd: here, stdio: 'inherit', env: { ...process.env, NAPI_RS_NO_COLOR: '1' } },
  );
  if (r.status !== 0) {
    console.error(`lease: napi build failed (${r.status ?? r.signal})`);
    process.exit(1);
  }
  const fresh = fs.readFileSync(path.join(out, 'index.d.ts'), 'utf8');
  const committed = path.join(here, 'index.d.ts');
  const old = fs.existsSync(committed) ? fs.readFileSync(committed, 'utf8') : '';
  if (!check) {
    if (old !== fresh) fs.writeFileSync(committed, fresh);
    console.log(`lease: index.d.ts ${old === fresh ? 'unchanged' : 'written'}`);
  } else if (old !== fresh) {
    const freshPath = path.join(out, 'index.d.ts');
    spawnSync('diff', ['-u', committed, freshPath], { stdio: 'inherit' });
    console.error('lease: node/index.d.ts is out of date: run `node scripts/types.js` in node/ and commit it');
    process.exit(1);
  } else {
    console.log('lease: index.d.ts is up to date');
  }
} finally {
  fs.rmSync(out, { recursive: true, force: true });
}
