//! What a client does with its store: its identity, what it remembers about keys, and the
//! store calls every driver makes (with timeouts on the injected clock), including a
//! conditional write run to a known outcome ([`crate::protocol::write`]).
//!
//! The drivers (`acquire.rs`, `queue.rs`, `lease.rs`, `status.rs`, `fence.rs`) use it; the
//! public [`Client`](crate::Client) (`client.rs`) holds one and hands each call to its driver,
//! so no driver needs the `Client` that calls it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::clock::{Clock, Instant, Rng};
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Timing;
use crate::protocol::write::{WriteEvent, WriteOp, WriteStep, Written};
use crate::record::{Holder, Record, MAX_RECORD_LEN};
use crate::store::{Cond, DynStore, Get, GetOptions, Meta, Version};

/// Local wake-ups: a release by one client wakes the waiters of every client in this process at
/// once, instead of at their next poll. One `Notify` per store and key, alive while someone
/// waits on it: a wake-up never reaches the waiters of another store or key (with shared slots
/// it did, so simulations in parallel tests woke each other at moments that depended on thread
/// scheduling, and a seeded run was no longer the same run twice).
pub(crate) fn local_wake(store_url: &str, key: &str) -> Arc<Notify> {
    static WAKES: OnceLock<Mutex<Wakes>> = OnceLock::new();
    let mut wakes = WAKES.get_or_init(Mutex::default).lock().unwrap();
    let id = (store_url.to_string(), key.to_string());
    if let Some(live) = wakes.map.get(&id).and_then(std::sync::Weak::upgrade) {
        return live;
    }
    // Forget the keys nobody waits on any more, now and then (amortized: the map at most
    // doubles between sweeps).
    if wakes.map.len() >= wakes.sweep_at {
        wakes.map.retain(|_, w| w.strong_count() > 0);
        wakes.sweep_at = (wakes.map.len() * 2).max(64);
    }
    let notify = Arc::new(Notify::new());
    wakes.map.insert(id, Arc::downgrade(&notify));
    notify
}

#[derive(Default)]
struct Wakes {
    map: HashMap<(String, String), std::sync::Weak<Notify>>,
    sweep_at: usize,
}

/// What a client remembers about a key between acquisitions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Memo {
    /// Highest epoch seen: a recreated record starts above it.
    pub(crate) epoch: u64,
    /// A record this client released itself, at this version: the next acquisition can go
    /// straight to the conditional write.
    pub(crate) released: Option<(Version, Record)>,
}

/// A client's dealings with its store: identity, memory of keys, and timed calls.
pub struct Io {
    pub(crate) store: DynStore,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Rng,
    pub(crate) client: String,
    pub(crate) host: Option<String>,
    /// The `pid` of records; `None`: this process's, read at each acquisition (a forked child
    /// acquires as itself), and its processes are described for a waiter to prove them gone.
    pub(crate) pid: Option<u32>,
    pub(crate) user: Option<String>,
    pub(crate) memo: Mutex<HashMap<String, Memo>>,
}

impl Io {
    pub(crate) fn store(&self) -> &DynStore {
        &self.store
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The URL of the lease at `key`, for messages and `LEASE_URL`.
    pub(crate) fn lease_url(&self, key: &str) -> String {
        let base = self.store.url();
        match base.split_once('?') {
            Some((b, q)) => format!("{}?{q}", crate::store::join_key(b, key)),
            None => crate::store::join_key(base, key),
        }
    }

    /// A holder record for a new write of this client's: a break, a queued lock's session.
    /// It names no processes, so nobody takes its record over early when this process exits:
    /// a break's record must be waited out for the broken holder's sake.
    pub(crate) fn new_holder(&self, label: Option<String>) -> Holder {
        Holder {
            id: self.rng.hex_id(),
            label,
            host: self.host.clone(),
            pid: Some(self.pid.unwrap_or_else(std::process::id)),
            user: self.user.clone(),
            client: Some(self.client.clone()),
            process: None,
        }
    }

    /// The holder of a lease this process acquires for itself: with its processes (its own and
    /// `companions`) described, so that a waiter on this machine can prove them gone once they
    /// are (docs/protocol.md §4). Not when this client was given another identity.
    pub(crate) fn new_lease_holder(&self, label: Option<String>, companions: &[u32]) -> Holder {
        let mut holder = self.new_holder(label);
        if self.pid.is_none() {
            let me = std::process::id();
            holder.pid = Some(me);
            holder.process = crate::process::describe(me, companions).map(Box::new);
        }
        holder
    }

    pub(crate) fn remember(&self, key: &str, f: impl FnOnce(&mut Memo)) {
        f(self
            .memo
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default());
    }

    /// What this client remembers about `key`.
    pub(crate) fn memo(&self, key: &str) -> Memo {
        self.memo
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// Forget `key` (a queued lock's session key, used once).
    pub(crate) fn forget(&self, key: &str) {
        self.memo.lock().unwrap().remove(key);
    }

    pub(crate) fn saw_epoch(&self, key: &str, epoch: u64) {
        self.remember(key, |m| m.epoch = m.epoch.max(epoch));
    }

    /// Remember a record this client released, so its next acquisition needs one request.
    pub(crate) fn released(&self, key: &str, version: Version, record: Record) {
        self.remember(key, |m| {
            m.epoch = m.epoch.max(record.epoch);
            m.released = Some((version, record));
        });
        local_wake(self.store.url(), key).notify_waiters();
    }

    /// Run a store call with a timeout on the injected clock; a timeout is an unknown outcome.
    pub(crate) async fn timed<T>(
        &self,
        timeout: Duration,
        what: &str,
        f: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::select! {
            r = f => r,
            _ = self.clock.sleep(timeout) => Err(Error::unavailable(format!(
                "{what} on {} timed out after {}", self.store.url(), format_duration(timeout)
            ))),
        }
    }

    pub(crate) async fn get(
        &self,
        key: &str,
        if_none_match: Option<&Version>,
        timeout: Duration,
    ) -> Result<Get> {
        // A queued lock's record may be larger than a lease's (whose parser judges the size).
        let max_len = (crate::protocol::queue::MAX_QUEUE_RECORD_LEN as u64).max(MAX_RECORD_LEN);
        let opts = GetOptions {
            if_none_match,
            max_len: Some(max_len),
        };
        self.timed(timeout, "read", self.store.get(key, opts)).await
    }

    /// Write `record` (with its nonce) under `cond` until its outcome is known, retrying while
    /// it stays unknown until `give_up_at` ([`WriteOp`] decides).
    pub(crate) async fn write(
        &self,
        key: &str,
        record: &Record,
        cond: Cond,
        give_up_at: Instant,
        timing: &Timing,
    ) -> Result<Written> {
        let url = self.lease_url(key);
        let op = WriteOp::new(&url, record, cond, give_up_at, timing);
        self.run_write(key, op, timing).await
    }

    /// Carry out a [`WriteOp`]'s steps.
    pub(crate) async fn run_write(
        &self,
        key: &str,
        mut op: WriteOp,
        timing: &Timing,
    ) -> Result<Written> {
        let no_meta = Meta::new();
        let mut event = WriteEvent::Start;
        loop {
            match op.step(event, self.clock.now(), &self.rng) {
                WriteStep::Put { bytes, cond } => {
                    let put = self.store.put(key, bytes, cond, &no_meta);
                    let result = self.timed(timing.request_timeout, "write", put).await;
                    log_put(key, &result);
                    event = WriteEvent::Put(result);
                }
                WriteStep::Read => {
                    let result = self.get(key, None, timing.request_timeout).await;
                    if let Err(e) = &result {
                        warn!(key, "read-back failed: {e}");
                    }
                    event = WriteEvent::Read(result);
                }
                WriteStep::Sleep(d) => {
                    self.clock.sleep(d).await;
                    event = WriteEvent::Slept;
                }
                WriteStep::Done(outcome) => return outcome,
            }
        }
    }

    /// Read `key`'s record (bounded in size), with `if_none_match` when given.
    pub(crate) async fn read_record(
        &self,
        key: &str,
        if_none_match: Option<&Version>,
        timing: &Timing,
    ) -> Result<Get> {
        self.get(key, if_none_match, timing.request_timeout).await
    }

    /// Send a write without resolving its outcome (a step of a state machine).
    pub(crate) async fn put_raw(
        &self,
        key: &str,
        bytes: Bytes,
        cond: Cond,
        timing: &Timing,
    ) -> Result<crate::store::Put> {
        let no_meta = Meta::new();
        let put = self.store.put(key, bytes, cond, &no_meta);
        let result = self.timed(timing.request_timeout, "write", put).await;
        log_put(key, &result);
        result
    }
}

fn log_put(key: &str, result: &Result<crate::store::Put>) {
    match result {
        Ok(crate::store::Put::ConditionFailed) => debug!(key, "condition failed; reading back"),
        Err(e) if e.kind() == ErrorKind::Unavailable => {
            warn!(key, "write outcome unknown, reading back: {e}")
        }
        _ => {}
    }
}
