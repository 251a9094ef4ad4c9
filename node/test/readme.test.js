// Every ```js block of README.md and node/README.md runs as written: its s3:// URLs point at a
// file store in a temp dir, and the names a fragment uses without declaring them (`url`, `l`,
// `signal`, `csv`, `token`) are given first. Each block runs in a child process of its own, in
// an async function (the blocks use top-level await). A block that cannot run here is marked
// `<!-- docs-test: skip (reason) -->` on the line before it, and the reason is required.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { describe, it } = require('node:test');

const NODE_DIR = path.resolve(__dirname, '..');
const PACKAGE = require(path.join(NODE_DIR, 'package.json')).name;
const READMES = {
  'README.md': path.join(NODE_DIR, '..', 'README.md'),
  'node/README.md': path.join(NODE_DIR, 'README.md'),
};

/** The ```js blocks of a markdown file: { line, code, skip } (skip: the marker's reason). */
function blocks(file) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] !== '```js') continue;
    const marker = /^<!-- docs-test: skip \((.+)\) -->$/.exec(lines[i - 1] || '');
    const end = lines.indexOf('```', i + 1);
    out.push({ line: i + 1, code: lines.slice(i + 1, end).join('\n'), skip: marker && marker[1] });
    i = end;
  }
  return out;
}

/** What a fragment may use without declaring it; `__lease` is the package, loaded first. */
const GIVEN = {
  url: (dir) => `const url = 'file://${dir}/given-lease';`,
  l: () => 'const l = await __lease.acquire(url, { ttl: 30_000 });',
  signal: () => 'const signal = AbortSignal.timeout(60_000);',
  csv: () => "const csv = 'day,jobs\\n2026-11-24,42\\n';",
  token: () => "const token = (await __lease.acquire(url + '-gate', { ttl: 30_000 })).token;",
};

function program(code, dir) {
  const main = JSON.stringify(require.resolve(NODE_DIR));
  const body = code
    .replaceAll(`require('${PACKAGE}')`, `require(${main})`)
    // The key's path stays: a file store creates the lease's directory (issue 16).
    .replace(/'s3:\/\/(?:my-)?bucket\/([^'?]+)'/g, (_, key) => `'file://${dir}/${key}'`)
    .replace(/'s3:\/\/(?:my-)?bucket\?[^']*'/g, `'file://${dir}'`);
  // Names used as variables: comments and property accesses (`l.signal`) left out.
  const code_only = body.replace(/\/\/.*$/gm, '');
  const declares = (name) => new RegExp(`\\b(const|let|var)\\s+${name}\\b`).test(code_only);
  const uses = (name) => new RegExp(`(?<![.\\w])${name}\\b`).test(code_only);
  const needed = Object.keys(GIVEN).filter((name) => uses(name) && !declares(name));
  if (needed.some((n) => n === 'l' || n === 'token') && !needed.includes('url') && !declares('url')) {
    needed.unshift('url');
  }
  needed.sort((a, b) => (b === 'url') - (a === 'url'));
  return [
    '(async () => {',
    `const __lease = require(${main});`,
    ...(declares('lease') ? [] : ['const lease = __lease;']),
    ...needed.map((name) => GIVEN[name](dir)),
    body,
    '})().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });',
  ].join('\n');
}

describe('README code blocks run as written', () => {
  for (const [name, file] of Object.entries(READMES)) {
    const found = blocks(file);
    it(`${name} has js blocks`, () => assert.ok(found.length > 0));
    for (const b of found) {
      it(`${name} line ${b.line}`, { skip: b.skip || false }, () => {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lease-readme-'));
        try {
          const script = path.join(dir, 'block.js');
          fs.writeFileSync(script, program(b.code, dir));
          const r = spawnSync(process.execPath, [script], { encoding: 'utf8', timeout: 60_000 });
          assert.equal(r.status, 0, `${name}:${b.line} failed:\n${r.stderr}\n--- as run:\n${fs.readFileSync(script, 'utf8')}`);
        } finally {
          fs.rmSync(dir, { recursive: true, force: true });
        }
      });
    }
  }
});
