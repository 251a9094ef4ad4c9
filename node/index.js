// lease for Node: leases, leader election and fencing on object storage.
//
// This file is the thin JavaScript layer over the native addon (lease.node, built from src/ by
// scripts/build.js): it checks argument types (TypeError), turns AbortSignals into the addon's
// cancel tokens, and adds what only JavaScript can: `Symbol.asyncDispose`, `l.signal`,
// `l.lost`, async iterators. Everything else, every store request and every renewal, runs in
// the addon on its own threads. See README.md.
'use strict';

// Node 18.18+ / 20.4+ define it; TypeScript's `await using` looks it up by this name too.
Symbol.asyncDispose ??= Symbol.for('nodejs.asyncDispose');

const { setTimeout: sleep } = require('node:timers/promises');

// Prebuilt addons, one npm package per platform (the napi-rs convention): npm installs the one
// matching this machine as an optional dependency of bucket-lease (the others' `os`, `cpu` and
// `libc` fields do not match, so npm skips them). Keys are `${platform}-${arch}-${abi}`.
const PLATFORM_PACKAGES = {
  'linux-x64-gnu': 'bucket-lease-linux-x64-gnu',
};

function platformKey() {
  if (process.platform !== 'linux') return `${process.platform}-${process.arch}`;
  // glibc or musl: Node's own report names the glibc it runs on, and nothing on musl.
  const header = process.report?.getReport?.().header;
  const abi = header && header.glibcVersionRuntime ? 'gnu' : 'musl';
  return `linux-${process.arch}-${abi}`;
}

// The addon: ./lease.node when it was built from source in a checkout (`npm install ./node`
// runs cargo), else this platform's prebuilt package.
function loadAddon() {
  try {
    return require('./lease.node');
  } catch (e) {
    if (!(e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes('lease.node'))) throw e;
  }
  const key = platformKey();
  const pkg = PLATFORM_PACKAGES[key];
  if (pkg) {
    try {
      return require(pkg);
    } catch (e) {
      if (!(e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(pkg))) throw e;
    }
  }
  const known = Object.entries(PLATFORM_PACKAGES)
    .map(([k, p]) => `${p} (${k})`)
    .join(', ');
  const err = new Error(
    `bucket-lease: no native addon for this platform (${key}). ` +
      (pkg
        ? `Its prebuilt addon is the npm package ${pkg}, an optional dependency of bucket-lease ` +
          'that was not installed: install again without --omit=optional (or --no-optional), ' +
          `or add it: npm install ${pkg}. `
        : `Prebuilt addons exist for: ${known}. `) +
      'Or build it from a source checkout of lease: `npm install /path/to/lease/node` ' +
      '(its install script runs cargo; a Rust toolchain is all it needs).',
  );
  err.code = 'LEASE_NOT_BUILT';
  throw err;
}

const native = loadAddon();

const { Lease, Session, SharedGrant } = native;

// Leases this thread still holds are released when it ends, and its shared sessions still open
// closed: by the addon's cleanup hook at the end of the program or of a worker thread, and here
// on `process.exit()`, after which that hook does not run.
process.on('exit', () => native._releaseAll());

// --- Argument checks: wrong types throw TypeError (code ERR_INVALID_ARG_TYPE, as Node's own
// APIs); values of the right type that make no sense are the addon's LEASE_INVALID.

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return `an instance of ${v.constructor?.name ?? 'Object'}`;
  if (typeof v === 'function') return 'a function';
  return `type ${typeof v} (${String(v).slice(0, 40)})`;
}

function typeError(message) {
  const e = new TypeError(message);
  e.code = 'ERR_INVALID_ARG_TYPE';
  return e;
}

function checkUrl(url, what = 'url') {
  if (url instanceof URL) return url.href;
  if (typeof url !== 'string') {
    throw typeError(
      `The "${what}" argument must be a string (s3://…, file:///…, memory://…, a path or a name) or a URL, not ${describe(url)}`,
    );
  }
  return url;
}

function checkString(v, what) {
  if (typeof v !== 'string') throw typeError(`The "${what}" argument must be a string, not ${describe(v)}`);
  return v;
}

function checkOptionsObject(options, what) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw typeError(`The "${what}" argument must be an object, not ${describe(options)}`);
  }
  return options;
}

function checkKnown(options, known, what) {
  for (const k of Object.keys(options)) {
    if (!known.includes(k)) {
      throw typeError(`Unknown option "${k}" in ${what} (known: ${known.join(', ')})`);
    }
  }
}

function checkSignal(signal, what = 'options.signal') {
  if (signal === undefined || signal === null) return undefined;
  if (!(signal instanceof AbortSignal)) {
    throw typeError(`The "${what}" property must be an AbortSignal, not ${describe(signal)}`);
  }
  return signal;
}

const MS_OPTIONS = ['ttl', 'wait', 'pollInterval', 'grace', 'renewInterval', 'unavailableTimeout'];
const TEXT_OPTIONS = ['label', 'data'];

/** The addon's LeaseOptions from the user's options (types checked; `signal` split off). */
function leaseOptions(options, what, allowed) {
  const o = checkOptionsObject(options, 'options');
  checkKnown(o, allowed, what);
  const out = {};
  for (const k of MS_OPTIONS) {
    const v = o[k];
    if (v === undefined || v === null || !allowed.includes(k)) continue;
    if (typeof v !== 'number' && typeof v !== 'string') {
      throw typeError(
        `The "options.${k}" property must be a number of milliseconds or a string with its unit ('30s'), not ${describe(v)}`,
      );
    }
    out[k] = v;
  }
  for (const k of [...TEXT_OPTIONS, 'owner', 'wakeHints', 'yieldReason']) {
    const v = o[k];
    if (v === undefined || v === null || !allowed.includes(k)) continue;
    if (typeof v !== 'string') throw typeError(`The "options.${k}" property must be a string, not ${describe(v)}`);
    out[k] = v;
  }
  for (const k of [...FLAG_OPTIONS, 'askYield']) {
    const v = o[k];
    if (v === undefined || v === null || !allowed.includes(k)) continue;
    if (typeof v !== 'boolean') throw typeError(`The "options.${k}" property must be a boolean, not ${describe(v)}`);
    out[k] = v;
  }
  if (allowed.includes('permits') && o.permits !== undefined && o.permits !== null) {
    if (typeof o.permits !== 'number') {
      throw typeError(`The "options.permits" property must be a number, not ${describe(o.permits)}`);
    }
    out.permits = o.permits;
  }
  if (allowed.includes('priority') && o.priority !== undefined && o.priority !== null) {
    if (typeof o.priority !== 'number') {
      throw typeError(`The "options.priority" property must be a number, not ${describe(o.priority)}`);
    }
    out.priority = o.priority;
  }
  if (allowed.includes('preempt') && o.preempt !== undefined && o.preempt !== null) {
    // No boolean: the one value that preempts names what the caller asserts.
    if (typeof o.preempt !== 'string') {
      throw typeError(
        `The "options.preempt" property must be the string 'every-effect-fenced' (or 'never', the default), not ${describe(o.preempt)}: ` +
          'the one value that preempts asserts that every effect of every holder of this lease goes through fenced writes or a ' +
          "FencingGate. The preempted holder goes on believing it holds until its next renewal, so any unfenced effect may overlap the new holder's",
      );
    }
    out.preempt = o.preempt;
  }
  if (allowed.includes('scope') && o.scope !== undefined && o.scope !== null) {
    out.scope = checkString(o.scope, 'options.scope');
  }
  if (allowed.includes('range') && o.range !== undefined && o.range !== null) {
    const r = o.range;
    if (!Array.isArray(r) || r.length !== 2 || r.some((x) => typeof x !== 'number')) {
      throw typeError(
        `The "options.range" property must be [start, end], two numbers of bytes (the end excluded), not ${describe(r)}`,
      );
    }
    out.range = [r[0], r[1]];
  }
  return { opts: out, signal: allowed.includes('signal') ? checkSignal(o.signal) : undefined };
}

// Queued locks (docs/protocol.md §10): shared/exclusive, semaphores, path and byte-range scopes.
const FLAG_OPTIONS = ['shared', 'queue'];
const QUEUE_OPTIONS = [...FLAG_OPTIONS, 'permits', 'scope', 'range', 'wakeHints', 'priority'];
// A waiter that asks the holders in its way to yield (waits, so not tryAcquire's); preemption
// of a plain lease (docs/protocol.md §5).
const YIELD_OPTIONS = ['askYield', 'yieldReason'];
const ACQUIRE_OPTIONS = [...MS_OPTIONS, ...TEXT_OPTIONS, ...QUEUE_OPTIONS, ...YIELD_OPTIONS, 'preempt', 'owner', 'signal'];
const TRY_OPTIONS = ['ttl', 'pollInterval', 'grace', 'renewInterval', ...TEXT_OPTIONS, ...QUEUE_OPTIONS, 'preempt', 'owner'];

function abortError(signal) {
  const e = new Error('The operation was aborted');
  e.name = 'AbortError';
  e.code = 'ABORT_ERR';
  e.cause = signal.reason;
  return e;
}

// The calls waiting on each signal: one 'abort' listener per signal however many calls share it
// (no MaxListenersExceededWarning for 100 acquires on one signal).
const waiting = new WeakMap();

function track(signal, cancel) {
  let calls = waiting.get(signal);
  if (!calls) {
    calls = new Set();
    waiting.set(signal, calls);
    const set = calls;
    signal.addEventListener(
      'abort',
      () => {
        for (const c of set) native._cancel(c);
        set.clear();
      },
      { once: true },
    );
  }
  calls.add(cancel);
  return () => calls.delete(cancel);
}

/**
 * Run `call(cancelToken)` (a promise from the addon), cancelling it when `signal` aborts: the
 * promise then rejects with an AbortError whose `cause` is the signal's reason.
 */
async function cancellable(signal, call) {
  if (!signal) return call(null);
  if (signal.aborted) throw abortError(signal);
  const cancel = native._cancelToken();
  const untrack = track(signal, cancel);
  try {
    return await call(cancel);
  } catch (e) {
    if (e && e.code === 'ABORT_ERR' && signal.aborted) e.cause = signal.reason;
    throw e;
  } finally {
    untrack();
  }
}

// --- The module's functions.

async function acquire(url, options) {
  url = checkUrl(url);
  const { opts, signal } = leaseOptions(options, 'acquire()', ACQUIRE_OPTIONS);
  return cancellable(signal, (cancel) => native.acquire(url, opts, cancel));
}

async function tryAcquire(url, options) {
  url = checkUrl(url);
  const { opts } = leaseOptions(options, 'tryAcquire() (it never waits)', TRY_OPTIONS);
  return native.tryAcquire(url, opts);
}

async function status(url) {
  return native.status(checkUrl(url));
}

/** This process's lease metrics, the numbers every language shares (`bucket-lease/prometheus`
 * hands them to prom-client). */
function metrics() {
  return native.metrics();
}

/** This process's lease metrics in the Prometheus (OpenMetrics) text format. */
function metricsText() {
  return native.metricsText();
}

function watchOptions(options) {
  const o = checkOptionsObject(options, 'options');
  checkKnown(o, ['pollInterval', 'signal'], 'watch()');
  const out = {};
  if (o.pollInterval !== undefined && o.pollInterval !== null) {
    if (typeof o.pollInterval !== 'number') {
      throw typeError(`The "options.pollInterval" property must be a number of milliseconds, not ${describe(o.pollInterval)}`);
    }
    out.pollInterval = o.pollInterval;
  }
  return { opts: out, signal: checkSignal(o.signal) };
}

async function* iterate(next, source, signal) {
  for (;;) {
    yield await cancellable(signal, (cancel) => next(source, cancel));
  }
}

/** Yields the lease's status now, then each change; ends with an AbortError when `signal` aborts. */
function watch(url, options) {
  url = checkUrl(url);
  const { opts, signal } = watchOptions(options);
  if (signal?.aborted) throw abortError(signal);
  return iterate(native._watchNext, native.watch(url, opts), signal);
}

async function fencedGet(url, options) {
  url = checkUrl(url);
  const o = checkOptionsObject(options, 'options');
  checkKnown(o, ['key'], 'fencedGet()');
  const key = o.key === undefined || o.key === null ? null : checkString(o.key, 'options.key');
  return native.fencedGet(url, key);
}

/**
 * Ask the holders of the queued lock at `url` to step aside (docs/protocol.md §10, "Yield on
 * request"): `{ to, reason, by }`, each a string or absent.
 */
async function askYield(url, options) {
  url = checkUrl(url);
  const o = checkOptionsObject(options, 'options');
  checkKnown(o, ['to', 'reason', 'by'], 'askYield()');
  const out = {};
  for (const k of ['to', 'reason', 'by']) {
    if (o[k] !== undefined && o[k] !== null) out[k] = checkString(o[k], `options.${k}`);
  }
  return native.askYield(url, out);
}

/**
 * Parse a fencing token (`URL#EPOCH@HOLDER`, as `l.token` prints it, or `URL#EPOCH`) into
 * `{ lease, epoch, holder }` (`holder` null when the token names none).
 */
function parseToken(token) {
  return native.parseToken(checkString(token, 'token'));
}

// --- Lease: the addon's class, with what JavaScript adds.

const kLost = Symbol('lease.lost');

/** One registration of the addon's lost callback per lease, made on first use of signal/lost. */
function lostState(l) {
  let st = l[kLost];
  if (st) return st;
  const controller = new AbortController();
  let reject;
  const promise = new Promise((_, rej) => {
    reject = rej;
  });
  // Nobody has to observe `lost`: its rejection must never be an unhandled rejection.
  promise.catch(() => {});
  st = { controller, promise, fired: false };
  const fire = (err) => {
    if (st.fired) return;
    st.fired = true;
    controller.abort(err);
    reject(err);
  };
  Object.defineProperty(l, kLost, { value: st });
  if (l.lostReason !== null) {
    // Already lost: say so now, not on a later turn of the event loop.
    try {
      l.ensureHeld(0);
    } catch (err) {
      fire(err);
    }
  } else {
    l._onLost(fire);
  }
  return st;
}

function defineMethod(proto, name, value) {
  Object.defineProperty(proto, name, { value, writable: true, configurable: true, enumerable: false });
}

Object.defineProperty(Lease.prototype, 'signal', {
  configurable: true,
  get() {
    return lostState(this).controller.signal;
  },
});

const kYield = Symbol('lease.yieldRequest');

// A promise of the first yield request that names the lease's grant (it never rejects: a lease
// released or lost without being asked leaves it pending). One `onYield` registration per lease.
Object.defineProperty(Lease.prototype, 'yieldRequest', {
  configurable: true,
  get() {
    let p = this[kYield];
    if (p) return p;
    p = new Promise((resolve) => this.onYield(resolve));
    Object.defineProperty(this, kYield, { value: p });
    return p;
  },
});

Object.defineProperty(Lease.prototype, 'lost', {
  configurable: true,
  get() {
    return lostState(this).promise;
  },
});

const nativeEnsureHeld = Lease.prototype.ensureHeld;
defineMethod(Lease.prototype, 'ensureHeld', function ensureHeld(minRemaining) {
  if (minRemaining !== undefined && typeof minRemaining !== 'number') {
    throw typeError(`The "minRemaining" argument must be a number of milliseconds, not ${describe(minRemaining)}`);
  }
  return nativeEnsureHeld.call(this, minRemaining);
});

// The addon answers at once when it can (no thread hand-off), so its calls return either a
// value or a promise: the public methods are async functions, which always return a promise.
const nativeRelease = Lease.prototype.release;
defineMethod(Lease.prototype, 'release', async function release() {
  return nativeRelease.call(this);
});

const nativeRenew = Lease.prototype.renew;
defineMethod(Lease.prototype, 'renew', async function renew() {
  return nativeRenew.call(this);
});

const nativeSetTtl = Lease.prototype.setTtl;
defineMethod(Lease.prototype, 'setTtl', async function setTtl(ttl) {
  if (!((typeof ttl === 'number' && !Number.isNaN(ttl)) || typeof ttl === 'string')) {
    throw typeError(`The "ttl" argument must be a number of milliseconds or a string with its unit ('30s'), not ${describe(ttl)}`);
  }
  return nativeSetTtl.call(this, ttl);
});

const nativeSetData = Lease.prototype.setData;
defineMethod(Lease.prototype, 'setData', async function setData(data) {
  if (!(typeof data === 'string' || data === null || data === undefined)) {
    throw typeError(`The "data" argument must be a string or null, not ${describe(data)}`);
  }
  return nativeSetData.call(this, data ?? null);
});

function dataBytes(data) {
  if (typeof data === 'string') return Buffer.from(data, 'utf8');
  if (Buffer.isBuffer(data)) return data;
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return Buffer.from(data);
  throw typeError(`The "data" argument must be a string, a Buffer, a TypedArray or an ArrayBuffer, not ${describe(data)}`);
}

/** The addon's fencedPut options: `ifVersion` a string, `ifAbsent` a boolean, not both. */
function putOptions(options) {
  const o = checkOptionsObject(options, 'options');
  checkKnown(o, ['ifVersion', 'ifAbsent'], 'fencedPut()');
  const out = {};
  if (o.ifVersion !== undefined && o.ifVersion !== null) {
    out.ifVersion = checkString(o.ifVersion, 'options.ifVersion');
  }
  if (o.ifAbsent !== undefined && o.ifAbsent !== null) {
    if (typeof o.ifAbsent !== 'boolean') {
      throw typeError(`The "options.ifAbsent" property must be a boolean, not ${describe(o.ifAbsent)}`);
    }
    out.ifAbsent = o.ifAbsent;
  }
  if (out.ifVersion !== undefined && out.ifAbsent) {
    throw typeError('fencedPut() takes "options.ifVersion" or "options.ifAbsent", not both: an object cannot be at a version and absent');
  }
  return out;
}

// fencedUpdate: a read-modify-write that loses no update. It writes conditionally on the
// version it read (or on absence), and on LEASE_CONFLICT reads again and calls `fn` again, a
// bounded number of times with a short random pause, as the core's fenced_update does. In
// JavaScript, so `fn` runs on this thread, between awaits, never on the addon's threads.
// (An object, not constants, so the tests can make it give up sooner.)
const updatePolicy = { attempts: 32, firstPauseMs: 20, longestPauseMs: 1000 };

/** The error after too many conflicts: the key keeps changing, so the store is busy. */
function gaveUp(key, conflict) {
  const e = new Error(
    `${conflict.url ?? key} kept changing under a fenced update; gave up after ${updatePolicy.attempts} attempts (last: ${conflict.message})`,
    { cause: conflict },
  );
  e.code = 'LEASE_UNAVAILABLE';
  e.kind = 'unavailable';
  e.retryable = true;
  e.url = conflict.url ?? null;
  e.holder = null;
  e.epoch = conflict.epoch ?? null;
  return e;
}

// The fenced operations of a Lease and of a SharedGrant: the same checks and the same
// fencedUpdate over each one's native methods.
for (const Holder of [Lease, SharedGrant]) {
  const nativeFencedPut = Holder.prototype.fencedPut;
  defineMethod(Holder.prototype, 'fencedPut', async function fencedPut(key, data, options) {
    checkString(key, 'key');
    const bytes = dataBytes(data);
    return nativeFencedPut.call(this, key, bytes, putOptions(options));
  });

  defineMethod(Holder.prototype, 'fencedUpdate', async function fencedUpdate(key, fn) {
    checkString(key, 'key');
    if (typeof fn !== 'function') throw typeError(`The "fn" argument must be a function, not ${describe(fn)}`);
    let pause = updatePolicy.firstPauseMs;
    for (let attempt = 1; ; attempt++) {
      const old = await this._fencedGet(key);
      const bytes = dataBytes(await fn(old));
      const expect = old === null ? { ifAbsent: true } : { ifVersion: old.version };
      try {
        return await nativeFencedPut.call(this, key, bytes, expect);
      } catch (e) {
        if (!e || e.code !== 'LEASE_CONFLICT') throw e;
        if (attempt >= updatePolicy.attempts) throw gaveUp(key, e);
        await sleep(pause * (0.5 + Math.random() / 2));
        pause = Math.min(pause * 2, updatePolicy.longestPauseMs);
      }
    }
  });

  const nativeFencedRead = Holder.prototype.fencedRead;
  defineMethod(Holder.prototype, 'fencedRead', async function fencedRead(key) {
    return nativeFencedRead.call(this, checkString(key, 'key'));
  });

  const nativeFencedDelete = Holder.prototype.fencedDelete;
  defineMethod(Holder.prototype, 'fencedDelete', async function fencedDelete(key) {
    return nativeFencedDelete.call(this, checkString(key, 'key'));
  });
}

defineMethod(Lease.prototype, Symbol.asyncDispose, function asyncDispose() {
  return this.release();
});

// --- Shared sessions (docs/protocol.md §10, "Shared sessions: one heartbeat for many grants").

const SESSION_OPTIONS = ['ttl', 'label', 'prefix'];
// What Session.acquire takes: acquire()'s options that apply to a grant on a session. `ttl` and
// `data` go down to be refused with LEASE_INVALID (the session's ttl applies; its record is the
// process's); a grant on a session is always queued, so `queue` is no option.
const SESSION_ACQUIRE_OPTIONS = [
  'ttl',
  'wait',
  'pollInterval',
  'unavailableTimeout',
  'label',
  'data',
  'shared',
  'permits',
  'scope',
  'range',
  'wakeHints',
  'priority',
  'askYield',
  'yieldReason',
  'signal',
];

/**
 * Open a shared session on the store of `url` (a lock URL in it, the store's URL, or its
 * directory): `{ ttl, label, prefix }`. Resolves to a Session once its first record is written.
 */
async function openSession(url, options) {
  url = checkUrl(url);
  const o = checkOptionsObject(options, 'options');
  checkKnown(o, SESSION_OPTIONS, 'openSession()');
  const out = {};
  if (o.ttl !== undefined && o.ttl !== null) {
    if (typeof o.ttl !== 'number' && typeof o.ttl !== 'string') {
      throw typeError(
        `The "options.ttl" property must be a number of milliseconds or a string with its unit ('30s'), not ${describe(o.ttl)}`,
      );
    }
    out.ttl = o.ttl;
  }
  for (const k of ['label', 'prefix']) {
    if (o[k] !== undefined && o[k] !== null) out[k] = checkString(o[k], `options.${k}`);
  }
  return native.openSession(url, out);
}

// What acquireOnProcessSession takes: Session.acquire's options, the ttl that chooses the
// session, and `queue` (implied: `false` goes down to be refused with LEASE_INVALID). `data`
// goes down to be refused too.
const PROCESS_SESSION_OPTIONS = [...SESSION_ACQUIRE_OPTIONS, 'queue'];

/**
 * Acquire the queued lock at `url` through the process's shared session for its store and
 * `options.ttl` (one session record, one heartbeat for every grant taken this way; released by
 * itself one ttl after its last grant). Resolves to a SharedGrant; `options.signal` cancels a
 * waiting request (it leaves the queue and the session).
 */
async function acquireOnProcessSession(url, options) {
  url = checkUrl(url);
  const { opts, signal } = leaseOptions(options, 'acquireOnProcessSession()', PROCESS_SESSION_OPTIONS);
  return cancellable(signal, (cancel) => native.acquireOnProcessSession(url, opts, cancel));
}

const nativeSessionAcquire = Session.prototype.acquire;
defineMethod(Session.prototype, 'acquire', async function acquire(lock, options) {
  lock = checkUrl(lock, 'lock');
  if (options && typeof options === 'object' && 'queue' in options) {
    throw typeError('Unknown option "queue" in Session.acquire(): a grant on a session is always queued');
  }
  const { opts, signal } = leaseOptions(options, 'Session.acquire()', SESSION_ACQUIRE_OPTIONS);
  return cancellable(signal, (cancel) => nativeSessionAcquire.call(this, lock, opts, cancel));
});

const nativeSessionClose = Session.prototype.close;
defineMethod(Session.prototype, 'close', async function close() {
  return nativeSessionClose.call(this);
});

defineMethod(Session.prototype, Symbol.asyncDispose, function asyncDispose() {
  return this.close();
});

const nativeGrantRelease = SharedGrant.prototype.release;
defineMethod(SharedGrant.prototype, 'release', async function release() {
  return nativeGrantRelease.call(this);
});

defineMethod(SharedGrant.prototype, Symbol.asyncDispose, function asyncDispose() {
  return this.release();
});

// --- Election.

const ELECTION_OPTIONS = [...MS_OPTIONS, ...TEXT_OPTIONS];

class Election {
  #e;

  /**
   * One participant in a leader election on the lease at `url`. `options` as for acquire()
   * (`wait` bounds each campaign; `data` is published while this participant leads).
   */
  constructor(url, options) {
    url = checkUrl(url);
    const { opts } = leaseOptions(options, 'new Election()', ELECTION_OPTIONS);
    this.#e = new native.Election(url, opts);
  }

  /** Resolves with the lease once this participant leads. */
  async campaign(options) {
    const o = checkOptionsObject(options, 'options');
    checkKnown(o, ['signal'], 'campaign()');
    const signal = checkSignal(o.signal);
    return cancellable(signal, (cancel) => this.#e.campaign(cancel));
  }

  /** Stop leading (release the lease); does nothing when not leading. */
  async resign() {
    return this.#e.resign();
  }

  /** Who leads now: `{ holder, epoch, data }`, or null when nobody does. */
  async leader() {
    return this.#e.leader();
  }

  get isLeader() {
    return this.#e.isLeader;
  }

  /** Yields the leader now (or null), then each change of leader or epoch. */
  observe(options) {
    const { opts, signal } = watchOptions(options);
    if (signal?.aborted) throw abortError(signal);
    return iterate(native._leaderNext, this.#e.observe(opts), signal);
  }
}

// --- FencingGate.

class FencingGate {
  #g;

  /**
   * Admit or refuse fencing tokens for resources outside the store. `new FencingGate()` keeps
   * what it admitted in this object's memory (it guards one process; other processes and
   * gates have their own); `new FencingGate(storeUrl, { prefix })` keeps one small object per
   * resource under `prefix` (default "fencing") in a store, so a fleet of services shares it.
   */
  constructor(store, options) {
    const o = checkOptionsObject(options, 'options');
    checkKnown(o, ['prefix'], 'new FencingGate()');
    const prefix = o.prefix === undefined || o.prefix === null ? null : checkString(o.prefix, 'options.prefix');
    if (store === undefined || store === null) {
      if (prefix !== null) throw typeError('"options.prefix" is only for a FencingGate kept in a store: pass the store URL too');
      this.#g = new native.FencingGate(null, {});
    } else {
      this.#g = new native.FencingGate(checkUrl(store, 'store'), { prefix: prefix ?? undefined });
    }
  }

  /**
   * Admit `token` (a Lease, or its `token` text `URL#EPOCH@HOLDER`) for `resource`,
   * remembering its epoch; rejects with LEASE_FENCED when a higher epoch, the same epoch of
   * another holder, or another lease was admitted.
   */
  async admit(resource, token) {
    checkString(resource, 'resource');
    let text;
    if (token instanceof Lease) text = token.token;
    else if (typeof token === 'string') text = token;
    else throw typeError(`The "token" argument must be a Lease or a token string (URL#EPOCH@HOLDER), not ${describe(token)}`);
    return this.#g.admit(resource, text);
  }

  /** "in memory", or "in STORE under PREFIX/". */
  get description() {
    return this.#g.description;
  }
}

/** The stable `code` of each kind of error, for comparisons: `e.code === codes.HELD`. */
const codes = Object.freeze({
  HELD: 'LEASE_HELD',
  TIMEOUT: 'LEASE_TIMEOUT',
  ABORTED: 'ABORT_ERR',
  LOST: 'LEASE_LOST',
  FENCED: 'LEASE_FENCED',
  CONFLICT: 'LEASE_CONFLICT',
  UNAVAILABLE: 'LEASE_UNAVAILABLE',
  INVALID: 'LEASE_INVALID',
  STORE: 'LEASE_STORE',
  CORRUPT: 'LEASE_CORRUPT',
  INTERNAL: 'LEASE_INTERNAL',
  QUEUE_FULL: 'LEASE_QUEUE_FULL',
  UNSUPPORTED: 'LEASE_UNSUPPORTED',
});

module.exports = {
  VERSION: native.VERSION,
  version: native.VERSION,
  acquire,
  tryAcquire,
  status,
  askYield,
  metrics,
  metricsText,
  watch,
  fencedGet,
  parseToken,
  openSession,
  acquireOnProcessSession,
  Election,
  FencingGate,
  Lease,
  Session,
  SharedGrant,
  codes,
  // Tests only.
  _native: native,
  _updatePolicy: updatePolicy,
};
