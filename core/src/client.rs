//! The client of one store: its identity, what it remembers about keys, and the store calls
//! every driver makes (with timeouts on the injected clock), including a conditional write run
//! to a known outcome ([`crate::protocol::write`]). Acquiring is in `acquire.rs`, holding in
//! `lease.rs`; the decisions are in `protocol/`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::clock::{Clock, Instant, Rng, SystemClock};
use crate::duration::format_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Timing;
use crate::protocol::write::{WriteEvent, WriteOp, WriteStep, Written};
use crate::record::{Holder, Record, MAX_RECORD_LEN};
use crate::store::{Cond, DynStore, Get, GetOptions, Meta, Version};

/// The `client` field written into records: `lease 0.1.0 (rust)` unless a binding says otherwise.
static CLIENT_NAME: OnceLock<String> = OnceLock::new();

/// Name the language or tool this process uses the library from (`"python"`, `"node"`, …);
/// shown in records as `lease VERSION (NAME)`. The first call wins.
pub fn set_client_name(name: &str) {
    let _ = CLIENT_NAME.set(format!("lease {} ({name})", crate::VERSION));
}

fn client_name() -> String {
    CLIENT_NAME
        .get()
        .cloned()
        .unwrap_or_else(|| format!("lease {} (rust)", crate::VERSION))
}

fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec())
        .ok()
        .filter(|s| !s.is_empty())
}

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

/// What this client remembers about a key between acquisitions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Memo {
    /// Highest epoch seen: a recreated record starts above it.
    pub(crate) epoch: u64,
    /// A record this client released itself, at this version: the next acquisition can go
    /// straight to the conditional write.
    pub(crate) released: Option<(Version, Record)>,
}

pub(crate) struct ClientInner {
    pub(crate) store: DynStore,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Rng,
    client: String,
    host: Option<String>,
    pid: u32,
    user: Option<String>,
    memo: Mutex<HashMap<String, Memo>>,
}

/// A client of one store. Cheap to clone; clones share what they know about keys.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.inner.store.url())
            .finish()
    }
}

/// Builds a [`Client`] with injected time and randomness.
pub struct ClientBuilder {
    store: DynStore,
    clock: Arc<dyn Clock>,
    rng: Option<Rng>,
    client: Option<String>,
    host: Option<String>,
    pid: Option<u32>,
}

impl ClientBuilder {
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn rng(mut self, rng: Rng) -> Self {
        self.rng = Some(rng);
        self
    }

    /// The `client` field of records written by this client.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client = Some(name.into());
        self
    }

    /// The `host` and `pid` fields of records (tests simulate several machines in one process).
    pub fn identity(mut self, host: impl Into<String>, pid: u32) -> Self {
        self.host = Some(host.into());
        self.pid = Some(pid);
        self
    }

    pub fn build(self) -> Client {
        Client {
            inner: Arc::new(ClientInner {
                // Every request is counted and traced at this boundary (`metrics`).
                store: crate::metrics::Instrumented::wrap(self.store),
                clock: self.clock,
                rng: self.rng.unwrap_or_else(Rng::from_entropy),
                client: self.client.unwrap_or_else(client_name),
                host: self.host.or_else(host_name),
                pid: self.pid.unwrap_or_else(std::process::id),
                user: user_name(|var| std::env::var(var).ok()),
                memo: Mutex::default(),
            }),
        }
    }
}

/// Who runs this process, for the holder record: `$USER` or `$LOGNAME`, else the name of the
/// effective uid (cron, systemd units and containers often set neither), else its number.
fn user_name(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(user) = ["USER", "LOGNAME"]
        .into_iter()
        .filter_map(&env)
        .find(|u| !u.is_empty())
    {
        return Some(user);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid value (null pointers, zero ids) to be filled in.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` outlives the reads of `pwd`'s
        // strings below, which point into it.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return Some(uid.to_string());
        }
        // SAFETY: pw_name is a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }.to_string_lossy();
        return Some(if name.is_empty() {
            uid.to_string()
        } else {
            name.into_owned()
        });
    }
}

impl Client {
    /// A client of `store` on the real clock.
    pub fn new(store: DynStore) -> Client {
        Client::builder(store).build()
    }

    pub fn builder(store: DynStore) -> ClientBuilder {
        ClientBuilder {
            store,
            clock: Arc::new(SystemClock),
            rng: None,
            client: None,
            host: None,
            pid: None,
        }
    }

    pub fn store(&self) -> &DynStore {
        &self.inner.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The URL of the lease at `key`, for messages and `LEASE_URL`.
    pub fn lease_url(&self, key: &str) -> String {
        let base = self.inner.store.url();
        match base.split_once('?') {
            Some((b, q)) => format!("{}?{q}", crate::store::url::join_key(b, key)),
            None => crate::store::url::join_key(base, key),
        }
    }

    pub(crate) fn new_holder(&self, label: Option<String>) -> Holder {
        let i = &self.inner;
        Holder {
            id: i.rng.hex_id(),
            label,
            host: i.host.clone(),
            pid: Some(i.pid),
            user: i.user.clone(),
            client: Some(i.client.clone()),
        }
    }

    pub(crate) fn remember(&self, key: &str, f: impl FnOnce(&mut Memo)) {
        f(self
            .inner
            .memo
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default());
    }

    /// What this client remembers about `key`.
    pub(crate) fn memo(&self, key: &str) -> Memo {
        self.inner
            .memo
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// Forget `key` (a queued lock's session key, used once).
    pub(crate) fn forget(&self, key: &str) {
        self.inner.memo.lock().unwrap().remove(key);
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
        local_wake(self.inner.store.url(), key).notify_waiters();
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
            _ = self.inner.clock.sleep(timeout) => Err(Error::unavailable(format!(
                "{what} on {} timed out after {}", self.inner.store.url(), format_duration(timeout)
            ))),
        }
    }

    pub(crate) async fn get(
        &self,
        key: &str,
        if_none_match: Option<&Version>,
        timeout: Duration,
    ) -> Result<Get> {
        let opts = GetOptions {
            if_none_match,
            max_len: Some(MAX_RECORD_LEN),
        };
        self.timed(timeout, "read", self.inner.store.get(key, opts))
            .await
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
            match op.step(event, self.inner.clock.now(), &self.inner.rng) {
                WriteStep::Put { bytes, cond } => {
                    let put = self.inner.store.put(key, bytes, cond, &no_meta);
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
                    self.inner.clock.sleep(d).await;
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
        let put = self.inner.store.put(key, bytes, cond, &no_meta);
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

#[cfg(test)]
mod tests {
    use super::user_name;

    /// Under cron, systemd or in a container neither $USER nor $LOGNAME may be set: the holder
    /// record still names the user, from the uid (compared with what `id -un` says).
    #[test]
    fn the_user_is_named_without_user_or_logname() {
        let id = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let expected = String::from_utf8(id.stdout).unwrap().trim().to_string();
        assert_eq!(user_name(|_| None), Some(expected));
        assert_eq!(
            user_name(|_| Some(String::new()))
                .as_deref()
                .map(str::is_empty),
            Some(false)
        );
        let from_env = |var: &str| (var == "LOGNAME").then(|| "ops".to_string());
        assert_eq!(user_name(from_env).as_deref(), Some("ops"));
    }
}
