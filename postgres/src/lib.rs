//! Fencing at a PostgreSQL database: a lease holder's token checked and recorded inside the
//! holder's own transaction, so that the transaction commits only if no later holder of the
//! resource has been admitted, and a later holder's admission waits for (or refuses) an earlier
//! one's transaction still open.
//!
//! A lease tells a holder when it may act; a holder paused between its check and its write (a GC
//! pause, SIGSTOP, a frozen VM) still writes. Here the database refuses it:
//!
//! ```no_run
//! # async fn job(held: &lease::Lease, db: &mut tokio_postgres::Client) -> lease::Result<()> {
//! use std::time::Duration;
//!
//! let tx = db.transaction().await.map_err(lease_postgres::error)?;
//! // ErrorKind::Fenced (rolled back) once a newer holder of "jobs" was admitted; holds the
//! // resource's row lock until the transaction ends.
//! let opts = lease_postgres::FenceOptions::new().idle_timeout(Duration::from_secs(10));
//! lease_postgres::fence_with(&tx, "jobs", &held.token(), &opts).await?;
//! let n: i64 = tx
//!     .query_one("SELECT n FROM counters WHERE name = 'jobs'", &[])
//!     .await
//!     .map_err(lease_postgres::error)?
//!     .get(0);
//! tx.execute("UPDATE counters SET n = $1 WHERE name = 'jobs'", &[&(n + 1)])
//!     .await
//!     .map_err(lease_postgres::error)?;
//! tx.execute("INSERT INTO outbox (body) VALUES ($1)", &[&format!("jobs is now {}", n + 1)])
//!     .await
//!     .map_err(lease_postgres::error)?;
//! tx.commit().await.map_err(lease_postgres::error)?;
//! # Ok(()) }
//! ```
//!
//! The SQL (a table `lease_fence` and a function `lease_fence(resource, token, …)`) is
//! [`SCHEMA`], installed by [`migrate`] or by `psql -X -1 -f lease_fence.sql`. What it
//! guarantees, what it does not, and how a later holder's wait is bounded: docs/postgres.md.
//!
//! The helpers take the caller's transaction ([`fence`]) or connection ([`migrate`]); they
//! never open a connection of their own. A fence outside a transaction would protect nothing (its
//! row lock would end with its own statement), so [`fence`] takes a [`Transaction`] (deadpool's
//! and bb8's transactions deref to one).

use std::time::Duration;

use lease::{Error, ErrorKind, FencingToken, Result};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

/// The one SQL definition of database fencing (`postgres/lease_fence.sql`): the `lease_fence`
/// table and function. Idempotent; run it again after an upgrade.
pub const SCHEMA: &str = include_str!("../lease_fence.sql");

/// The SQLSTATE `lease_fence` raises when it refuses a token: a lower epoch, an equal epoch of
/// another holder, or a token of another lease. Mapped to [`ErrorKind::Fenced`].
pub const SQLSTATE_FENCED: &str = "LF001";
/// The SQLSTATE `lease_fence` raises for a malformed token or an empty resource name. Mapped to
/// [`ErrorKind::Invalid`].
pub const SQLSTATE_INVALID: &str = "LF002";

/// How [`fence_with`] waits and bounds the transaction it fences.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceOptions {
    lock_wait: Option<Duration>,
    idle_timeout: Option<Duration>,
}

impl FenceOptions {
    pub fn new() -> Self {
        FenceOptions::default()
    }

    /// Wait at most this long for an earlier holder's transaction that still holds the
    /// resource's row (default: the session's `lock_timeout`, usually forever); then
    /// [`ErrorKind::Timeout`]. `Duration::ZERO` tries once.
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = Some(wait);
        self
    }

    /// For the rest of this transaction, the server disconnects this session once it has been
    /// idle in the transaction this long (`idle_in_transaction_session_timeout`): a holder
    /// paused with the transaction open then loses it (rolled back, its row lock released for
    /// the next holder) instead of blocking the resource until it wakes.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }
}

/// Admit `token` for `resource` inside the caller's open transaction `tx`, or fail.
///
/// - [`ErrorKind::Fenced`]: a newer holder of the resource was admitted (its epoch is the
///   error's [`Error::epoch`]), another holder with the same epoch was, or another lease's
///   token fenced this resource. Roll back and stop acting as the holder.
/// - [`ErrorKind::Conflict`]: under REPEATABLE READ or SERIALIZABLE, another transaction
///   admitted a token since this one's snapshot (40001), or a deadlock (40P01): roll back and
///   run the transaction again.
/// - [`ErrorKind::Timeout`]: the [`FenceOptions::lock_wait`] (or the session's `lock_timeout`)
///   ran out while an earlier holder's transaction held the resource (55P03).
/// - [`ErrorKind::Store`]: `lease_fence` is not installed ([`migrate`]), or another database
///   error; [`ErrorKind::Unavailable`]: the connection failed. The driver's error is the
///   source.
///
/// Call it at the top level of the transaction (a savepoint rolled back releases the row lock),
/// before the reads and writes it protects.
pub async fn fence(tx: &Transaction<'_>, resource: &str, token: &FencingToken) -> Result<()> {
    fence_with(tx, resource, token, &FenceOptions::default()).await
}

/// [`fence`], with [`FenceOptions`].
pub async fn fence_with(
    tx: &Transaction<'_>,
    resource: &str,
    token: &FencingToken,
    opts: &FenceOptions,
) -> Result<()> {
    let token_text = token.to_string();
    let ms = |d: Option<Duration>| d.map(|d| format!("{} milliseconds", d.as_millis()));
    let (wait, idle) = (ms(opts.lock_wait), ms(opts.idle_timeout));
    tx.execute_typed(
        "SELECT lease_fence($1, $2, $3::text::interval, $4::text::interval)",
        &[
            (&resource, Type::TEXT),
            (&token_text, Type::TEXT),
            (&wait, Type::TEXT),
            (&idle, Type::TEXT),
        ],
    )
    .await
    .map_err(|e| error(e).with_lease(token.lease()))?;
    Ok(())
}

/// Install (or upgrade) the `lease_fence` table and function, in one transaction of its own on
/// `client`, in the first schema of its `search_path`. Safe to run from many processes at once.
pub async fn migrate(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await.map_err(error)?;
    tx.batch_execute(SCHEMA).await.map_err(error)?;
    tx.commit().await.map_err(error)
}

/// The library's error for a driver error, mapped as [`fence`] says: the fencing SQLSTATEs
/// (`LF001` → `Fenced`, `LF002` → `Invalid`), serialization failures and deadlocks
/// (`Conflict`), lock timeouts (`Timeout`), a missing `lease_fence` (`Store`, saying to
/// migrate), a failed or terminated connection (`Unavailable`: class 08, 57P01–57P03, 25P03
/// idle_in_transaction_session_timeout), any other database error (`Store`). The
/// driver's error is kept as the source. Use it on the other statements of a fenced
/// transaction too: a `COMMIT` that fails with a serialization failure is a `Conflict`.
pub fn error(e: tokio_postgres::Error) -> Error {
    let Some(db) = e.as_db_error() else {
        let kind = if e.is_closed() || e.code().is_none() {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Store
        };
        return Error::new(kind, format!("postgres: {e}")).with_source(e);
    };
    let (code, message, detail) = (db.code().code(), db.message(), db.detail());
    let (kind, message) = classify(code, message);
    let mut err = Error::new(kind, message);
    if let Some(epoch) = detail.and_then(admitted_epoch) {
        err = err.with_epoch(epoch);
    }
    err.with_source(e)
}

/// The kind and message for a database error's SQLSTATE and message: the one mapping every
/// binding's helper makes (python/lease/pg.py, node/pg.js, bindings/go/pgfence).
fn classify(code: &str, message: &str) -> (ErrorKind, String) {
    let kind = match code {
        SQLSTATE_FENCED => ErrorKind::Fenced,
        SQLSTATE_INVALID => ErrorKind::Invalid,
        // serialization_failure, deadlock_detected
        "40001" | "40P01" => {
            return (
                ErrorKind::Conflict,
                format!("{message} (SQLSTATE {code}): roll back and run the transaction again"),
            )
        }
        // lock_not_available: lock_timeout, or NOWAIT
        "55P03" => {
            return (
                ErrorKind::Timeout,
                format!(
                    "{message} (SQLSTATE {code}): an earlier holder's transaction still holds \
                     the resource; retry later"
                ),
            )
        }
        // connection_exception (08…), admin_shutdown, crash_shutdown, cannot_connect_now: the
        // session is gone (pg_terminate_backend, idle_in_transaction_session_timeout, a restart)
        c if c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "25P03") => {
            ErrorKind::Unavailable
        }
        // undefined_function, undefined_table
        "42883" | "42P01" if message.contains("lease_fence") => {
            return (
                ErrorKind::Store,
                format!(
                    "{message} (SQLSTATE {code}): lease_fence is not installed in this \
                     database: run lease_postgres::migrate or `psql -X -1 -f lease_fence.sql`"
                ),
            )
        }
        _ => ErrorKind::Store,
    };
    (kind, format!("{message} (SQLSTATE {code})"))
}

/// The epoch of the token a refusal names (`lease_fence`'s DETAIL: `admitted: TOKEN`).
fn admitted_epoch(detail: &str) -> Option<u64> {
    let token: FencingToken = detail.strip_prefix("admitted: ")?.parse().ok()?;
    Some(token.epoch())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_kinds() {
        let kind = |code| classify(code, "m").0;
        assert_eq!(kind("LF001"), ErrorKind::Fenced);
        assert_eq!(kind("LF002"), ErrorKind::Invalid);
        assert_eq!(kind("40001"), ErrorKind::Conflict);
        assert_eq!(kind("40P01"), ErrorKind::Conflict);
        assert_eq!(kind("55P03"), ErrorKind::Timeout);
        assert_eq!(kind("23505"), ErrorKind::Store);
        assert_eq!(kind("57P01"), ErrorKind::Unavailable);
        assert_eq!(kind("25P03"), ErrorKind::Unavailable);
        assert_eq!(kind("08006"), ErrorKind::Unavailable);
        let (k, m) = classify("42883", "function lease_fence(text) does not exist");
        assert_eq!(k, ErrorKind::Store);
        assert!(m.contains("migrate"), "{m}");
    }

    #[test]
    fn the_admitted_epoch_comes_from_the_detail() {
        assert_eq!(admitted_epoch("admitted: s3://b/k#a#42@ab12"), Some(42));
        assert_eq!(admitted_epoch("admitted: u#7"), Some(7));
        assert_eq!(admitted_epoch("something else"), None);
    }
}
