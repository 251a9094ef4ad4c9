#!/usr/bin/env node
// The package's `install` script in a source checkout (`npm install ./node`, or
// `npm install /path/to/lease/node`): builds the addon from source with scripts/build.js
// unless a prebuilt one for this platform is installed (bucket-lease-linux-x64-gnu, …).
//
// The tarballs `scripts/dist` makes have no install script: there the platform package,
// an optional dependency, brings the addon, and index.js says what to do when it is missing.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const here = path.resolve(__dirname, '..');
const checkout = fs.existsSync(path.join(here, 'Cargo.toml')) && fs.existsSync(path.join(here, 'src'));

function prebuiltInstalled() {
  const key = `${process.platform}-${process.arch}`;
  const pkg = { 'linux-x64': 'bucket-lease-linux-x64-gnu' }[key];
  if (!pkg) return false;
  try {
    require.resolve(pkg, { paths: [here] });
    return true;
  } catch {
    return false;
  }
}

if (prebuiltInstalled()) {
  console.log('bucket-lease: using the prebuilt addon');
} else if (checkout) {
  require('./build.js');
} else {
  console.warn(
    'bucket-lease: no prebuilt addon for this platform and no source to build one from; ' +
      'require("bucket-lease") will say what to do',
  );
}
