//! Acquiring: the one place that says how an acquisition goes (docs/protocol.md §5 and §10).
//!
//! 1. Check the options and derive the timings.
//! 2. A request that needs a queued lock (shared, permits, a scope, or `queue`) waits in the
//!    lock's queue: [`queue::acquire`].
//! 3. Any other request acquires the lease ([`acquirer::run`]); if the key turns out to hold a
//!    queued lock's record, it waits in that lock's queue instead, with the read it made.
//!
//! `acquirer` drives the lease's [`Acquirer`](crate::protocol::acquire::Acquirer), `queue` the
//! queued lock's [`Waiter`](crate::protocol::queue::waiter::Waiter) (which begins its session
//! with `acquirer`); neither calls back here.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::acquirer::{self, Acquired};
use crate::duration::format_duration;
use crate::error::{Error, Result};
use crate::io::Io;
use crate::lease::Lease;
use crate::metrics;
use crate::options::LeaseOptions;
use crate::protocol::acquire::Plan;
use crate::queue;
use crate::store::validate_key;

/// The acquisition of `key` by its owner ([`LeaseOptions::owner`]): an owner that holds the
/// lease already would wait for itself, so it fails at once (docs/protocol.md, "Same owner").
pub(crate) async fn acquire(
    client: &Arc<Io>,
    key: &str,
    opts: &LeaseOptions,
    try_once: bool,
    cancel: Option<&CancellationToken>,
) -> Result<Lease> {
    let owner = crate::owner::owner_of(opts);
    let me = std::sync::Arc::as_ptr(client) as usize;
    // A cancelled acquisition ends as cancelled, whoever holds the lease.
    let cancelled = cancel.is_some_and(|c| c.is_cancelled());
    if let Some(owner) = owner.as_ref().filter(|_| !cancelled) {
        let mine = crate::owner::holding(me, key, owner, opts);
        // A grant: the queue record shows grants by their sessions, which stay ours while
        // the grant believes. A plain lease: only if the store still shows it (one read),
        // not a lease broken or taken over whose holder has not noticed yet.
        let ours = match mine.iter().find(|l| l.grant().is_some()) {
            Some(grant) => Some(grant),
            None if mine.is_empty() => None,
            // On an error the acquisition goes on: it reads again and reports what fails.
            None => match opts.timing(&client.store().capabilities()) {
                Ok(t) => match client.get(key, None, t.request_timeout).await {
                    Ok(get) => mine.iter().find(|l| crate::owner::still_held_by(l, &get)),
                    Err(_) => None,
                },
                Err(_) => None,
            },
        };
        if let Some(lease) = ours {
            let url = client.lease_url(key);
            return Err(crate::owner::waits_for_itself(&url, owner, lease));
        }
    }
    let lease = acquire_any(client, key, opts, try_once, cancel).await?;
    if let Some(owner) = owner {
        crate::owner::register(me, key, owner, &lease);
    }
    Ok(lease)
}

/// The acquisition of `key`: a lease, or a grant of a queued lock.
async fn acquire_any(
    client: &Arc<Io>,
    key: &str,
    opts: &LeaseOptions,
    try_once: bool,
    cancel: Option<&CancellationToken>,
) -> Result<Lease> {
    let url = client.lease_url(key);
    validate_key(key).map_err(|e| e.with_lease(&url))?;
    let timing = opts
        .timing(&client.store().capabilities())
        .map_err(|e| e.with_lease(&url))?;
    // A holder writes at every renewal: faster than the store sustains (GCS: about one write
    // per second per object) it would get 429s and lose the lease.
    let min_write = client.store().min_write_interval();
    if timing.renew < min_write {
        return Err(Error::invalid(format!(
            "renew interval {} is shorter than the {} this store needs between writes of one \
             object: use a ttl of at least {} (or a renew interval of at least {})",
            format_duration(timing.renew),
            format_duration(min_write),
            format_duration(min_write * 3),
            format_duration(min_write),
        ))
        .with_lease(&url));
    }
    // The options' own consistency, whichever path they take (a yield reason without
    // `ask_yield` is refused on a plain lease too, not ignored).
    opts.check_queue().map_err(|e| e.with_lease(&url))?;
    if opts.preempt != crate::Preempt::Never && opts.mode != crate::Mode::Exclusive {
        return Err(preempt_needs_exclusive(&url));
    }
    let start = client.clock().now();
    let try_once = try_once || opts.wait == Some(Duration::ZERO);
    let wait_deadline = if try_once {
        Some(start)
    } else {
        opts.wait.map(|w| start + w)
    };
    let never = CancellationToken::new();
    let cancel = cancel.unwrap_or(&never);
    let queued = queue::Request {
        key,
        url: &url,
        opts,
        timing,
        try_once,
        wait_deadline,
        cancel,
    };
    // Counted here, once per acquisition of the lock: a queued lock's session (acquirer::run
    // called by queue.rs) is not an acquisition of its own.
    let count = |result: &Result<Lease>, handover| {
        let waited = client.clock().now().saturating_duration_since(start);
        metrics::acquisition(key, metrics::Outcome::of(result), waited, handover);
    };
    if opts.wants_queue() {
        let result = queue::acquire(client, queued, None).await;
        count(&result, None);
        return result;
    }
    let plan = Plan {
        url: url.clone(),
        holder: client.new_lease_holder(opts.label.clone(), &opts.companion_pids),
        timing,
        data: opts.data.clone(),
        try_once,
        wait_deadline,
        unavailable_timeout: Some(timing.unavailable_timeout),
        history: opts.history,
        probe_holders: opts
            .dead_holder_rule
            .unwrap_or_else(|| client.store().dead_holder_rule()),
        epoch_is_token: true,
        preempt: opts.preempt,
    };
    let (result, handover) = match acquirer::run(client, key, plan, cancel).await {
        Ok(Acquired::Lease { lease, handover }) => (Ok(lease), handover),
        // A queued lock: every request on it queues (docs/protocol.md §10).
        Ok(Acquired::QueuedLock(first)) => {
            (queue::acquire(client, queued, Some(first)).await, None)
        }
        Err(e) => (Err(e), None),
    };
    count(&result, handover);
    result
}

/// Only an exclusive request may preempt (docs/protocol.md §10, "Preemption"): shared holders
/// and permits hold at once over overlapping scopes and make no fenced writes, so no order of
/// tokens makes their preemption safe.
fn preempt_needs_exclusive(url: &str) -> Error {
    Error::invalid(format!(
        "preempt: a shared request on {url} cannot preempt: only an exclusive request (whole \
         lock, a path or a byte range) takes the lock at once, and fencing refuses only the \
         writes of the grants it removed. Drop the preempt option, or ask for an exclusive grant"
    ))
    .with_lease(url)
}
