//! The per-process default shared sessions (docs/protocol.md §10, "Shared sessions", "The API":
//! *Per-process default*; "The idle release and a racing attach"): one session per client,
//! prefix and ttl, opened on first use, released by itself after one ttl with nothing attached
//! and no leave pending; an attach it refuses (released or being released, lost, full) opens a
//! fresh one in its place.
//!
//! Reached through [`SharedSession::acquire_on_process_session`].
//! Tested in `default_session/tests.rs` on the memory store in simulated time.
//!
//! Keyed by the client (its `Io`, kept alive by the session it keys), not by the runtime
//! (tokio's runtime id needs `tokio_unstable`): a session whose runtime shut down has lost its
//! renewal task, refuses every attach (`NotHeld`), and the next acquisition opens a fresh one
//! on the caller's runtime; grants attached to it from another runtime are lost with it
//! (each reports it).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Attachment, SessionOptions, SharedGrant, SharedSession};
use crate::error::Result;
use crate::io::Io;
use crate::options::LeaseOptions;
use crate::per_process::PerProcess;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    /// The client's `Io` (its address: the session holds it, so it is not reused meanwhile).
    client: usize,
    prefix: String,
    ttl: Duration,
}

/// The current default session of one key; its lock serializes opening one (two first
/// acquisitions share one session), never an acquisition's wait.
type Current = Arc<tokio::sync::Mutex<Option<SharedSession>>>;

static DEFAULTS: PerProcess<Key, Current> = PerProcess::new();

/// Acquire the queued lock at `key` through the process's default session for `io`, `prefix`
/// and `opts.ttl`: attached to the current one, or to a fresh one when it refuses the attach
/// (its idle release decided, lost, full).
pub(crate) async fn acquire(
    io: &Arc<Io>,
    prefix: &str,
    key: &str,
    opts: &LeaseOptions,
    cancel: &CancellationToken,
) -> Result<SharedGrant> {
    let (session, attachment) = attach(io, prefix, key, opts).await?;
    session
        .acquire_attached(key, opts, cancel, Some(attachment))
        .await
}

/// The process's default session for `io`, `prefix` and `opts.ttl`, with a number attached for
/// the lock at `key`.
async fn attach(
    io: &Arc<Io>,
    prefix: &str,
    key: &str,
    opts: &LeaseOptions,
) -> Result<(SharedSession, Attachment)> {
    let id = Key {
        client: Arc::as_ptr(io) as usize,
        prefix: prefix.to_string(),
        ttl: opts.ttl,
    };
    let current = DEFAULTS.get_or_open(&id, || Ok(Current::default()))?;
    let mut current = current.lock().await;
    if let Some(session) = current.as_ref() {
        // Refused: its release is decided (idle), it is lost or closed, or full — a fresh one.
        if let Ok(attachment) = session.try_attach(key) {
            return Ok((session.clone(), attachment));
        }
    }
    // No label: the session is the process's, not one request's (its record names the host
    // and pid).
    let session_opts = SessionOptions::new(opts.ttl).prefix(prefix);
    let session = SharedSession::open_on_idle(io.clone(), session_opts, Some(opts.ttl)).await?;
    let attachment = session.attach(key)?;
    *current = Some(session.clone());
    Ok((session, attachment))
}

/// The current default session of `io`, `prefix` and `ttl` (tests).
#[cfg(test)]
fn current(io: &Arc<Io>, prefix: &str, ttl: Duration) -> Option<SharedSession> {
    let id = Key {
        client: Arc::as_ptr(io) as usize,
        prefix: prefix.to_string(),
        ttl,
    };
    let current = DEFAULTS.with(|m| m.get(&id).cloned())?;
    let current = current.try_lock().ok()?;
    current.clone()
}

#[cfg(test)]
mod tests;
