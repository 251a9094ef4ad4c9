//! The client of one store, where every entry point starts: it hands each call to the driver
//! that carries it out, with the client's I/O (`io.rs`: timed calls, identity, what a client
//! remembers about keys), never the client itself. Reading is in `status.rs`, fenced reads in
//! `fence.rs`, acquiring in `acquire.rs` (leases in `acquirer.rs`, queued locks in `queue.rs`),
//! breaks and a lock's permits in `breaking.rs`, holding in `lease.rs`; the decisions are in
//! `protocol/`.

use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Rng, SystemClock};
use crate::error::{ErrorKind, Result};
use crate::fence::FencedObject;
use crate::io::Io;
use crate::lease::Lease;
use crate::options::LeaseOptions;
use crate::per_process::PerProcess;
use crate::protocol::breaking::BreakMode;
use crate::status::{Status, Watcher};
use crate::store::url::{LeaseUrl, StoreUrl};
use crate::store::DynStore;

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

/// A client of one store. Cheap to clone; clones share what they know about keys.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Io>,
}

/// A client is a handle to its store's I/O, which the acquiring drivers (`acquire.rs`,
/// `queue.rs`, `lease.rs`, still methods of `Client` until issue 22 makes them drivers of their
/// own) reach through this. `Io` has nothing public: this gives callers outside the crate
/// nothing.
impl Deref for Client {
    type Target = Io;

    fn deref(&self) -> &Io {
        &self.inner
    }
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
            inner: Arc::new(Io {
                // Every request is counted and traced at this boundary (`metrics`).
                store: crate::metrics::Instrumented::wrap(self.store),
                clock: self.clock,
                rng: self.rng.unwrap_or_else(Rng::from_entropy),
                client: self.client.unwrap_or_else(client_name),
                host: self.host.or_else(host_name),
                pid: self.pid,
                user: current_user(),
                memo: Mutex::default(),
            }),
        }
    }
}

/// Who runs this process, as holder records name it: `$USER` or `$LOGNAME`, else the name of
/// the effective uid (cron, systemd units and containers often set neither), else its number.
pub fn current_user() -> Option<String> {
    user_name(|var| std::env::var(var).ok())
}

/// Who asks a yield request when no id is given (`lease yield`, the bindings' `ask_yield`):
/// `user@host` of this process, cut to fit [`YieldAsk`](crate::YieldAsk)'s `by` bound.
pub fn asker_name() -> String {
    let by = match (current_user(), host_name()) {
        (Some(u), Some(h)) => format!("{u}@{h}"),
        (Some(u), None) => u,
        (None, Some(h)) => format!("operator@{h}"),
        (None, None) => "operator".to_string(),
    };
    by.chars()
        .take(crate::protocol::queue::yield_request::MAX_YIELD_BY_LEN / 4)
        .collect()
}

/// [`current_user`] with the environment given.
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

    /// The shared client for the store of a lease URL, and the lease's key. Every call for the
    /// same store returns the same client, so what it learns about keys is shared.
    pub fn for_url(url: &str) -> Result<(Client, String)> {
        let lease = LeaseUrl::parse(url)?;
        let client = Client::for_store(&lease.store).map_err(|e| e.with_lease(url))?;
        Ok((client, lease.key))
    }

    /// The client of the store at `url`, shared by everything in this process that names the
    /// same store, whichever entry point or binding asks (`Client::for_url`, the C ABI,
    /// Python, Node): one client per store shares its connections and what it has learned
    /// about keys (the versions it wrote, the highest epochs seen), which the protocol relies
    /// on when two handles in one process use the same lease. A forked child starts afresh
    /// (`per_process.rs`). Opening does not contact the store.
    pub fn for_store(url: &StoreUrl) -> Result<Client> {
        static CLIENTS: PerProcess<StoreUrl, Client> = PerProcess::new();
        CLIENTS.get_or_open(url, || Ok(Client::new(url.open()?)))
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
        self.inner.lease_url(key)
    }

    /// Acquire the lease at `key`, waiting as `opts.wait` says.
    pub async fn acquire(&self, key: &str, opts: &LeaseOptions) -> Result<Lease> {
        crate::acquire::acquire(&self.inner, key, opts, false, None).await
    }

    /// Acquire, giving up with [`ErrorKind::Cancelled`](crate::ErrorKind::Cancelled) when
    /// `cancel` fires.
    ///
    /// Prefer this to dropping the future: once a write has been sent, a cancelled acquire still
    /// learns whether it landed and releases the lease if it did, so no phantom holder is left
    /// for others to wait out.
    pub async fn acquire_with_cancel(
        &self,
        key: &str,
        opts: &LeaseOptions,
        cancel: &CancellationToken,
    ) -> Result<Lease> {
        crate::acquire::acquire(&self.inner, key, opts, false, Some(cancel)).await
    }

    /// Try once: the lease, or `None` when someone else holds it.
    pub async fn try_acquire(&self, key: &str, opts: &LeaseOptions) -> Result<Option<Lease>> {
        match crate::acquire::acquire(&self.inner, key, opts, true, None).await {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.kind() == ErrorKind::Held => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An operator's forced takeover; see [`BreakMode`]. Returns the lease's status before the
    /// break, or `None` when there was nothing held to break.
    pub async fn break_lease(
        &self,
        key: &str,
        label: Option<String>,
        mode: BreakMode,
    ) -> Result<Option<Status>> {
        crate::breaking::break_lease(&self.inner, key, label, mode).await
    }

    /// Set the permits of the queued lock at `key` (`None`: no limit), in one conditional write
    /// that also grants whoever may go under the new limit. Grants already made stay: with
    /// fewer permits, no new grant is made until fewer than that many hold. Participants asking
    /// for the old number are refused from then on (ask for none, or the new one). Returns the
    /// permits before.
    pub async fn set_permits(&self, key: &str, permits: Option<u32>) -> Result<Option<u32>> {
        crate::breaking::set_permits(&self.inner, key, permits).await
    }

    /// Ask the holders of the queued lock at `key` to step aside (docs/protocol.md §10, "Yield
    /// on request"): one conditional write of the lock's record naming the grants in the way
    /// of `ask.to` (a waiter's id: it goes next when it fits), or every grant. The holders
    /// learn it at their next confirmation ([`Lease::yield_request`](crate::Lease::yield_request))
    /// and release when they choose; nothing is taken from them. Returns the request as it
    /// stands, or `None` when nothing was in the way (nobody holds).
    pub async fn ask_yield(
        &self,
        key: &str,
        ask: crate::YieldAsk,
    ) -> Result<Option<crate::YieldRequest>> {
        crate::yielding::ask(&self.inner, key, ask).await
    }

    /// The lease at `key` as the store shows it now. Needs only read permission.
    pub async fn status(&self, key: &str) -> Result<Status> {
        crate::status::read(&self.inner, key).await
    }

    /// Watch the lease at `key`: the first `next()` returns its status now, each later one
    /// returns when holder, epoch, state or data change. Polls every `poll`.
    pub fn watch(&self, key: &str, poll: Duration) -> Result<Watcher> {
        Watcher::new(self.inner.clone(), key, poll)
    }

    /// Read an object with the epoch, lease and holder of the fenced write that wrote it.
    ///
    /// A client has no lease, so `key` is read from the store's root (`x`, `./x`, `/x`: the
    /// same object; `jobs/x` below; `..` above the root is refused). The object a lease's
    /// `fenced_put("x")` wrote is [`Lease::object_key`](crate::Lease::object_key)`("x")` here, or
    /// [`Lease::fenced_get`](crate::Lease::fenced_get)`("x")`; from a lease's URL, [`object_key`](crate::object_key)`(lease_key, "x")`.
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        crate::fence::read(&self.inner, key).await
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
