// bucket-lease/pg: fencing at a PostgreSQL database with `pg` (node-postgres). A lease
// holder's token is checked and recorded inside the holder's own transaction (docs/postgres.md):
//
//   const { fence } = require('bucket-lease/pg');
//   await client.query('BEGIN');
//   await fence(client, 'jobs', l.token);  // rejects with code LEASE_FENCED once a newer holder was admitted
//   ... the transaction's reads and writes ...
//   await client.query('COMMIT');
//
// Plain JavaScript over the caller's client (a pg Client or a pool's client): it never opens a
// connection, and `pg` is an optional peer dependency. The SQL is lease_fence.sql beside this file.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

/** The one SQL definition of database fencing: the lease_fence table and function. */
const SCHEMA = fs.readFileSync(path.join(__dirname, 'lease_fence.sql'), 'utf8');

const FENCE = 'SELECT lease_fence($1, $2, $3::text::interval, $4::text::interval)';

function typeError(message) {
  const e = new TypeError(message);
  e.code = 'ERR_INVALID_ARG_TYPE';
  return e;
}

/** A lease error as the addon makes them: code, kind, retryable, url, holder, epoch; `cause`. */
function leaseError(code, kind, message, { url = null, epoch = null, cause } = {}) {
  const e = new Error(message, cause === undefined ? undefined : { cause });
  e.code = code;
  e.kind = kind;
  e.retryable = kind === 'timeout' || kind === 'unavailable' || kind === 'held';
  e.url = url;
  e.holder = null;
  e.epoch = epoch;
  return e;
}

function tokenText(token) {
  if (typeof token === 'string') return token;
  if (token && typeof token.token === 'string') return token.token;
  throw typeError(`The "token" argument must be a token string (URL#EPOCH@HOLDER) or a Lease, not ${token === null ? 'null' : typeof token}`);
}

function interval(ms, what) {
  if (ms === undefined || ms === null) return null;
  if (typeof ms !== 'number') throw typeError(`The "options.${what}" property must be a number of milliseconds, not ${typeof ms}`);
  if (!(ms >= 0)) throw leaseError('LEASE_INVALID', 'invalid', `options.${what} must be >= 0 milliseconds, not ${ms}`);
  return `${Math.round(ms)} milliseconds`;
}

function admittedEpoch(detail) {
  if (typeof detail !== 'string' || !detail.startsWith('admitted: ')) return null;
  const m = /#([0-9]+)(?:@[0-9A-Za-z]+)?$/.exec(detail);
  return m ? Number(m[1]) : null;
}

/**
 * The lease error for a `pg` error of a fenced transaction, or null when fencing maps none
 * (handle the driver's own then): LF001 LEASE_FENCED, LF002 LEASE_INVALID, 40001/40P01
 * LEASE_CONFLICT (run the transaction again), 55P03 LEASE_TIMEOUT, a missing lease_fence
 * LEASE_STORE. Use it on the other statements too (a COMMIT's serialization failure).
 */
function errorFrom(err, token) {
  const code = err && typeof err.code === 'string' ? err.code : null;
  if (!code || !/^[0-9A-Z]{5}$/.test(code)) return null;
  const url = typeof token === 'string' && token.includes('#') ? token.slice(0, token.lastIndexOf('#')) : null;
  const message = `${err.message} (SQLSTATE ${code})`;
  switch (code) {
    case 'LF001':
      return leaseError('LEASE_FENCED', 'fenced', message, { url, epoch: admittedEpoch(err.detail), cause: err });
    case 'LF002':
      return leaseError('LEASE_INVALID', 'invalid', message, { url, cause: err });
    case '40001':
    case '40P01':
      return leaseError('LEASE_CONFLICT', 'conflict', `${message}: roll back and run the transaction again`, { url, cause: err });
    case '55P03':
      return leaseError('LEASE_TIMEOUT', 'timeout', `${message}: an earlier holder's transaction still holds the resource; retry later`, { url, cause: err });
    case '42883':
    case '42P01':
      if (String(err.message).includes('lease_fence')) {
        return leaseError('LEASE_STORE', 'store', `${message}: lease_fence is not installed in this database: run migrate(client) or \`psql -X -1 -f lease_fence.sql\``, { url, cause: err });
      }
      return null;
    default:
      return null;
  }
}

/**
 * Admit `token` (a token string or a Lease) for `resource` in the transaction open on `client`,
 * or reject with code LEASE_FENCED. Holds the resource's row lock until the transaction ends.
 * `options.lockWait` (ms): wait at most this long for an earlier holder's open transaction, then
 * LEASE_TIMEOUT (0 tries once). `options.idleTimeout` (ms): the server ends this session once it
 * has been idle in this transaction that long (a paused holder cannot block the resource longer).
 * Call it after BEGIN, not inside a savepoint you may roll back.
 */
async function fence(client, resource, token, options = {}) {
  if (!client || typeof client.query !== 'function') throw typeError('The "client" argument must be a pg Client or pool client');
  if (typeof resource !== 'string') throw typeError(`The "resource" argument must be a string, not ${typeof resource}`);
  if (options === null || typeof options !== 'object') throw typeError('The "options" argument must be an object');
  for (const k of Object.keys(options)) {
    if (k !== 'lockWait' && k !== 'idleTimeout') throw typeError(`Unknown option "${k}" in fence() (known: lockWait, idleTimeout)`);
  }
  const t = tokenText(token);
  const params = [resource, t, interval(options.lockWait, 'lockWait'), interval(options.idleTimeout, 'idleTimeout')];
  try {
    await client.query(FENCE, params);
  } catch (err) {
    throw errorFrom(err, t) || err;
  }
  // Outside a transaction the row lock ended with the statement: it protected nothing. (pg
  // reports the status once the statement is done, so a BEGIN sent without awaiting it counts.)
  if (typeof client.getTransactionStatus === 'function' && client.getTransactionStatus() === 'I') {
    throw leaseError('LEASE_INVALID', 'invalid', 'fence() ran outside a transaction, so it protected nothing: call it after BEGIN, on the same client');
  }
}

/**
 * Install (or upgrade) the lease_fence table and function, in the first schema of the
 * client's search_path, in one transaction. Safe to run from many processes at once.
 */
async function migrate(client) {
  await client.query('BEGIN');
  try {
    await client.query(SCHEMA);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

module.exports = { SCHEMA, fence, migrate, errorFrom };
