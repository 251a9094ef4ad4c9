//! An operator's break (`lease break`): the driver of
//! [`protocol::breaking`](crate::protocol::breaking), for a lease and for every state of a
//! queued lock (docs/protocol.md §5 "Break" and §10 "Break").
//!
//! - A lease: write a record held by the breaker with the broken holder's ttl (the waiters wait
//!   it out, unless the broken holder acknowledges by releasing).
//! - A queued lock: each grant's session is broken the same way; a grant whose session is
//!   released is removed at once; a grant whose session is gone gets a break record in its
//!   place, so the waiters wait out its ttl before removing it. The lock's record itself is
//!   only ever changed by leaves (which always fit): never written over with a lease record.
//! - A record written by a newer version is left alone: `Unsupported`.

use std::sync::Arc;

use tracing::info;

use crate::error::{Error, Result};
use crate::io::local_wake;
use crate::io::Io;
use crate::options::{LeaseOptions, Timing};
use crate::protocol::breaking::{self, BreakMode, BreakPlan};
use crate::protocol::queue::{
    classify_get, newer_error, session_key, Change, Classified, Entry, QueueRecord,
};
use crate::protocol::view::{Seen, View};
use crate::protocol::write::Written;
use crate::protocol::Backoff;
use crate::record::{timestamp, Displaced, Record, RecordState, FORMAT};
use crate::status::{Participant, SessionState, Status};
use crate::store::{validate_key, Cond, Get, Version};

/// An operator's forced takeover of the lease or queued lock at `key`
/// ([`Client::break_lease`](crate::Client::break_lease)).
pub(crate) async fn break_lease(
    client: &Arc<Io>,
    key: &str,
    label: Option<String>,
    mode: BreakMode,
) -> Result<Option<Status>> {
    let url = client.lease_url(key);
    validate_key(key).map_err(|e| e.with_lease(&url))?;
    let timing = LeaseOptions::default().timing(&client.store().capabilities())?;
    let read = client
        .read_record(key, None, &timing)
        .await
        .map_err(|e| e.with_lease(&url))?;
    match (classify_get(&read), &read) {
        (Some(Classified::Newer(what)), _) => return Err(newer_error(&url, &what)),
        (Some(Classified::Queue(r)), Get::Found(obj)) => {
            let version = obj.version.clone();
            return break_queue(client, key, &url, r, version, label, mode, &timing).await;
        }
        _ => {}
    }
    break_record(client, key, Some(read), None, label, mode, &timing).await
}

/// Break a queued lock's grants (see the module's documentation).
#[allow(clippy::too_many_arguments)]
async fn break_queue(
    client: &Arc<Io>,
    key: &str,
    url: &str,
    r: QueueRecord,
    version: Version,
    label: Option<String>,
    mode: BreakMode,
    timing: &Timing,
) -> Result<Option<Status>> {
    if r.grants.is_empty() {
        return Ok(None);
    }
    let sessions = crate::status::sessions_of(client, key, &r, timing).await;
    let before = Status::from_queue(url, &r, version, &sessions);
    for g in &r.grants {
        let state = Participant::new(g, sessions.get(g.id())).session;
        let remove_now = match state {
            // Nothing believes in a released session: the grant can go at once.
            SessionState::Released => true,
            SessionState::Gone if mode == BreakMode::AllowTwoHolders => true,
            // Breaking its session would break every grant of its process on this store.
            _ if g.session.is_some() => {
                return Err(Error::invalid(format!(
                    "{url}: grant {} is attached to a shared session (docs/protocol.md §10, \
                     \"Shared sessions\"): breaking that session would break every grant of \
                     its process on this store, and this version cannot break one grant \
                     alone; stop or wait out its process instead",
                    g.id()
                )));
            }
            _ => {
                let skey = session_key(key, g.id());
                break_record(client, &skey, None, Some(g), label.clone(), mode, timing)
                    .await
                    .map_err(|e| e.with_lease(url))?;
                // Written released: the operator accepts that its holder may still believe.
                mode == BreakMode::AllowTwoHolders
            }
        };
        if remove_now {
            info!(lease = %url, "break: removing {} from the lock", g.id());
            crate::lock_change::run(client, key, Change::Leave(g.id().to_string()), None, timing)
                .await
                .map_err(|e| e.with_lease(url))?;
        }
    }
    Ok(Some(before))
}

/// Break the lease record at `key` (a lease, or the session of `session_of`, a grant of a
/// queued lock); `first`: a read of it already made. Returns its status before the break, or
/// `None` when there was nothing held to break.
async fn break_record(
    client: &Arc<Io>,
    key: &str,
    mut first: Option<Get>,
    session_of: Option<&Entry>,
    label: Option<String>,
    mode: BreakMode,
    timing: &Timing,
) -> Result<Option<Status>> {
    let url = client.lease_url(key);
    let clock = client.clock().clone();
    let rng = &client.rng;
    let mut backoff = Backoff::for_timing(timing);
    for _ in 0..20 {
        let read = match first.take() {
            Some(get) => get,
            None => client
                .read_record(key, None, timing)
                .await
                .map_err(|e| e.with_lease(&url))?,
        };
        if session_of.is_none() {
            match classify_get(&read) {
                Some(Classified::Newer(what)) => return Err(newer_error(&url, &what)),
                Some(Classified::Queue(_)) => {
                    return Err(Error::unavailable(format!(
                        "{url} became a queued lock while it was being broken; try again"
                    ))
                    .with_lease(url))
                }
                _ => {}
            }
        }
        let mut view = View::default();
        view.absorb(read, clock.now());
        let before = Status::from_view(&url, &view, timing);
        let breaker =
            client.new_holder(Some(label.clone().unwrap_or_else(|| "lease break".into())));
        let known = client.memo(key).epoch;
        let (record, cond) = match (&view.seen, session_of) {
            // A grant listed whose session is gone: put a break record in its place, held for
            // its ttl, so the waiters wait that out before removing it (its holder may still
            // believe until its deadline).
            (Some(Seen::Absent), Some(g)) if mode == BreakMode::WaitOutHolder => {
                let now = timestamp(clock.wall());
                let record = Record {
                    format: FORMAT,
                    epoch: view.time_epoch(clock.wall()),
                    rev: 1,
                    state: RecordState::Held,
                    ttl_ms: g.ttl_ms,
                    holder: breaker,
                    acquired_at: Some(now.clone()),
                    renewed_at: Some(now),
                    data: None,
                    prev: Vec::new(),
                    write: Some(rng.nonce()),
                    broken: Some(Displaced {
                        id: g.id().to_string(),
                        epoch: 0,
                    }),
                    preempted: None,
                    history: Default::default(),
                    attached: None,
                };
                (record, Cond::Create)
            }
            _ => match breaking::plan(&view, known, mode, breaker, timing, clock.wall(), rng) {
                BreakPlan::Nothing => return Ok(None),
                BreakPlan::AlreadyBroken => return Ok(Some(before)),
                BreakPlan::Write { record, cond } => (record, cond),
            },
        };
        let give_up_at = clock.now() + timing.ttl;
        match client
            .write(key, &record, cond, give_up_at, timing)
            .await
            .map_err(|e| e.with_lease(&url))?
        {
            Written::Landed { version, .. } => {
                client.saw_epoch(key, record.epoch);
                if record.state == RecordState::Released {
                    client.released(key, version, record);
                }
                return Ok(Some(before));
            }
            // Our break landed and someone has already replaced it.
            Written::Replaced { .. } => {
                client.saw_epoch(key, record.epoch);
                local_wake(client.store().url(), key).notify_waiters();
                return Ok(Some(before));
            }
            Written::Rejected { .. } => clock.sleep(backoff.next(rng)).await,
        }
    }
    Err(
        Error::unavailable(format!("{url} kept changing while breaking it; try again"))
            .with_lease(url),
    )
}

/// Set the permits of the queued lock at `key` (`lease permits`;
/// [`Client::set_permits`](crate::Client::set_permits)).
pub(crate) async fn set_permits(
    client: &Arc<Io>,
    key: &str,
    permits: Option<u32>,
) -> Result<Option<u32>> {
    let url = client.lease_url(key);
    validate_key(key).map_err(|e| e.with_lease(&url))?;
    if let Some(n) = permits {
        LeaseOptions::default()
            .permits(n)
            .check_queue()
            .map_err(|e| e.with_lease(&url))?;
    }
    let timing = LeaseOptions::default().timing(&client.store().capabilities())?;
    let change = Change::SetPermits(permits);
    match crate::lock_change::run(client, key, change, None, &timing).await? {
        crate::protocol::queue::change::Changed::Applied {
            before: Some(before),
            ..
        } => Ok(before.permits),
        crate::protocol::queue::change::Changed::Applied { .. } => Ok(permits),
        crate::protocol::queue::change::Changed::NoLock => Err(Error::invalid(format!(
            "{url} is not a queued lock (no queued lock's record there): permits are set by \
             the first request that asks for them"
        ))
        .with_lease(url)),
    }
}
