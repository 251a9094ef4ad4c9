//! Shared sessions (docs/protocol.md §10, "Shared sessions: one heartbeat for many grants",
//! issue 24): `openSession(url)` opens one `SharedSession` of the core on a store, and
//! `session.acquire(urlOrKey)` takes queued-lock grants through it, all kept by the session's
//! one renewal task and one confirmation task. `acquireOnProcessSession(url)` takes a grant
//! through the process's own session for that store and ttl (the core's registry,
//! `SharedSession::acquire_on_process_session`): opened on first use, released by itself one
//! ttl after its last grant. The API mirrors the Python binding's
//! (python/src/session.rs, python/lease/_session.py); index.js adds the argument checks,
//! `AbortSignal`s and `Symbol.asyncDispose`.
//!
//! As for a `Lease` (held.rs), the garbage collector does not decide when a session or a grant
//! ends: a registry keeps every open session of this process and the grants held through it,
//! until `release()`, `close()`, a loss, or the end of the JavaScript environment that opened
//! the session (its cleanup hook closes what it still has open, so waiters need not wait out
//! the ttl).

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::Unknown;
use napi::{Env, Result};
use napi_derive::napi;

use lease::{Client, Error, SharedSession, StoreUrl};

use crate::acquire::{token, Cancel};
use crate::error;
use crate::options::{ms, LeaseOptions, SessionOptions};
use crate::runtime;

/// A grant's core handle, shared by its JavaScript object, the registry (until released) and
/// a release running on the runtime. Its release, loss and idempotence are the core's.
type Slot = Arc<lease::SharedGrant>;

/// One open session in the registry, with the grants held through it.
struct Open {
    /// The `napi_env` (as an address) of the environment that opened it.
    env: usize,
    session: SharedSession,
    grants: HashMap<u64, Slot>,
    /// The process's session (`acquireOnProcessSession`), as one environment uses it: it is
    /// shared by every environment of the process (one runtime, one client per store), so
    /// the end of one environment releases its grants and never closes the session; the entry
    /// leaves the registry with its last grant (the session releases itself when idle).
    process: bool,
}

static OPEN: Mutex<Option<HashMap<u64, Open>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn with_open<R>(f: impl FnOnce(&mut HashMap<u64, Open>) -> R) -> R {
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    f(open.get_or_insert_with(HashMap::new))
}

/// Drop core handles on the addon's runtime: a `SharedGrant` dropped while held sends its leave
/// there (the garbage collector's finalizers run on the JavaScript thread, outside it).
fn drop_on_runtime<T>(value: T) {
    match runtime::handle() {
        Ok(h) => {
            let _entered = h.enter();
            drop(value);
        }
        Err(_) => drop(value),
    }
}

/// How long the end of an environment waits for its sessions to close.
const CLOSE_AT_EXIT: Duration = Duration::from_secs(2);

/// Close every session `env` still has open (releasing their grants); called by its cleanup
/// hook when the environment ends, and by `_releaseAll` on `process.exit()`.
pub fn close_all(env: usize) {
    let mut open: Vec<Open> = with_open(|o| {
        let ids: Vec<u64> = o
            .iter()
            .filter(|(_, e)| e.env == env)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| o.remove(id)).collect()
    });
    if open.is_empty() {
        return;
    }
    let Ok(rt) = runtime::handle() else { return };
    // The process's sessions: this environment's grants released, the sessions left to the
    // others (they release themselves when idle).
    let grants: Vec<Slot> = open
        .iter_mut()
        .filter(|o| o.process)
        .flat_map(|o| o.grants.drain().map(|(_, g)| g))
        .collect();
    open.retain(|o| !o.process);
    rt.block_on(async move {
        let closes = futures::future::join_all(open.iter().map(|o| o.session.close()));
        let releases = futures::future::join_all(grants.iter().map(|g| g.release()));
        // Real time, bounding how long the end of the process waits: not protocol time.
        #[allow(clippy::disallowed_methods)]
        let _ = tokio::time::timeout(CLOSE_AT_EXIT, futures::future::join(closes, releases)).await;
        drop(open);
        drop(grants);
    });
}

/// `openSession`'s arguments, checked: the store's client and URL, and the session's options.
fn session_args(
    url: &str,
    options: &SessionOptions,
) -> lease::Result<(Client, StoreUrl, lease::SessionOptions)> {
    let store = lease::session_store(url)?;
    let client = Client::for_store(&store).map_err(|e| e.with_lease(url))?;
    Ok((client, store, options.to_core()?))
}

/// Open a shared session on the store of `url` — a lock URL in the store (`s3://bucket/jobs/7`,
/// `file:///var/locks/gc`), the store's own URL (`s3://bucket?…`, `memory://ns`) or its
/// directory (`file:///var/locks`, an existing directory) — and write its first record.
/// Resolves to the `Session`: any number of queued-lock grants held through one renewal of one
/// record, `PREFIX.lease-sessions/SID`. Rejects with `LEASE_INVALID` for a bad ttl, prefix,
/// label or URL.
#[napi(
    ts_args_type = "url: string, options?: SessionOptions",
    ts_return_type = "Promise<Session>"
)]
pub fn open_session<'e>(
    env: &'e Env,
    url: String,
    options: Option<SessionOptions>,
) -> Result<Unknown<'e>> {
    let args = session_args(&url, &options.unwrap_or_default());
    runtime::call(
        env,
        async move {
            let (client, store, opts) = args?;
            let session = SharedSession::open(&client, opts).await?;
            Ok((session, client, store))
        },
        |env, (session, client, store)| Ok(Session::register(env, session, client, store)),
    )
}

/// Acquire the queued lock at `url` through the process's shared session for its store and
/// `options.ttl` (docs/protocol.md §10, "Shared sessions", *Per-process default*): one session
/// record (`.lease-sessions/SID` at the store's root) and one renewal every `ttl / 3` for every
/// grant this process holds or waits for this way, opened on first use, released and deleted
/// by itself one ttl after its last grant is released, and opened afresh by the next
/// acquisition (also after its loss). Waits as `acquire` does (`wait`; `signal` cancels a
/// waiting request: it leaves the lock's queue and the session). Resolves to the `SharedGrant`
/// that `Session.acquire` resolves to. The options are `acquire`'s that apply to a queued lock:
/// `queue` is implied (`false` rejects with `LEASE_INVALID`), `ttl` chooses the session (one
/// per store and ttl), `data` rejects with `LEASE_INVALID` (a session's record is the
/// process's), `label` names the grant's entry.
#[napi(
    ts_args_type = "url: string, options?: ProcessSessionAcquireOptions",
    ts_return_type = "Promise<SharedGrant>"
)]
pub fn acquire_on_process_session<'e>(
    env: &'e Env,
    url: String,
    options: Option<LeaseOptions>,
    cancel: Option<Cancel>,
) -> Result<Unknown<'e>> {
    let options = options.unwrap_or_default();
    let opts = match options.queue {
        Some(false) => Err(Error::invalid(
            "queue: false: a grant on the process's session is always queued (leave queue \
             out); for a plain lease, use acquire(url)",
        )),
        _ => options.to_core(),
    };
    let cancel = token(cancel);
    runtime::call(
        env,
        async move {
            let opts = opts?;
            let (client, key) = crate::acquire::client(&url)?;
            SharedSession::acquire_on_process_session_with_cancel(&client, &key, &opts, &cancel)
                .await
        },
        |env, g| Ok(SharedGrant::register_on_process(env, g)),
    )
}

/// A shared session on one store (made by `openSession`): any number of queued-lock grants
/// (`acquire`) kept by one renewal of one record, one write per `ttl / 3` whatever the number
/// of locks. Close it (`close()`, or `await using`): its grants still held are released and its
/// record deleted. Lost (its record deleted, or not renewed within its ttl), every grant of it
/// is lost.
#[napi]
pub struct Session {
    inner: SharedSession,
    client: Client,
    store: StoreUrl,
    id: u64,
    /// `close()` was called (or started).
    closed: Arc<AtomicBool>,
}

impl Session {
    fn register(env: &Env, inner: SharedSession, client: Client, store: StoreUrl) -> Session {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let entry = Open {
            env: env.raw() as usize,
            session: inner.clone(),
            grants: HashMap::new(),
            process: false,
        };
        with_open(|o| o.insert(id, entry));
        Session {
            inner,
            client,
            store,
            id,
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The key in this session's store of `target`: a lock URL (`s3://…`, `file://…`, a path)
    /// in the same store, or a key (`jobs/7`: no scheme, not a path).
    fn key_of(&self, target: &str) -> lease::Result<String> {
        lease::session_lock_key(&self.store, target, false)
    }

    /// What `acquire` needs, checked: the session (not closed), the lock's key and the options.
    fn acquire_args(
        &self,
        target: &str,
        options: Option<LeaseOptions>,
    ) -> lease::Result<(String, lease::LeaseOptions)> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::invalid(format!(
                "the shared session {} is closed: open another (openSession) to acquire more",
                self.inner.url()
            )));
        }
        let options = options.unwrap_or_default();
        if options.ttl.is_some() {
            return Err(Error::invalid(format!(
                "Session.acquire() takes no ttl: the session's ttl applies to every grant held \
                 through it (a checker judges a grant by its session's record); open the \
                 session with the ttl wanted (openSession(url, {{ ttl }}), {} here)",
                lease::format_duration(self.inner.ttl())
            )));
        }
        let key = self.key_of(target)?;
        Ok((key, options.to_core()?))
    }
}

/// The garbage collector does not end a session: one not closed and not lost stays open (in
/// the registry) until closed, or until its environment ends.
impl Drop for Session {
    fn drop(&mut self) {
        if self.closed.load(Ordering::SeqCst) || self.inner.lost_reason().is_some() {
            let gone = with_open(|o| o.remove(&self.id));
            drop_on_runtime(gone);
        }
    }
}

#[napi]
impl Session {
    /// The session's id (32 hex digits).
    #[napi(getter)]
    pub fn sid(&self) -> String {
        self.inner.sid()
    }

    /// The session record's URL.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.inner.url().to_string()
    }

    /// The session record's key in its store, `PREFIX.lease-sessions/SID`.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The store's URL.
    #[napi(getter)]
    pub fn store(&self) -> String {
        self.client.store().url().to_string()
    }

    /// The ttl of the session and of every grant held through it, in milliseconds.
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        ms(self.inner.ttl())
    }

    /// True while the session is believed (renewed less than a ttl ago) and not closed.
    #[napi(getter)]
    pub fn alive(&self) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.inner.is_alive()
    }

    /// How many grants and waiters are attached to it (or attaching).
    #[napi(getter)]
    pub fn attached(&self) -> u32 {
        self.inner.attached() as u32
    }

    /// Why the session was lost, or `null` while it is not.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.inner.lost_reason().map(|r| r.to_string())
    }

    /// Whether `close()` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Acquire a grant of the queued lock `lock` through this session, waiting as `acquire`
    /// does (`wait`; `signal` cancels a waiting request: it leaves the lock's queue and the
    /// session). `lock` is a lock URL in the session's store (`s3://bucket/jobs/7`,
    /// `file:///dir/gc`, a path; one of another store rejects with `LEASE_INVALID`) or a key in
    /// that store (`'jobs/7'`: no scheme, not a path). The queued-lock options are `acquire`'s;
    /// the ttl is the session's (`ttl` rejects with `LEASE_INVALID`), and `data` is refused
    /// (`LEASE_INVALID`: the session's record is the process's). A closed session rejects with
    /// `LEASE_INVALID`, a lost one with `LEASE_LOST`.
    #[napi(
        ts_args_type = "lock: string, options?: SessionAcquireOptions",
        ts_return_type = "Promise<SharedGrant>"
    )]
    pub fn acquire<'e>(
        &self,
        env: &'e Env,
        lock: String,
        options: Option<LeaseOptions>,
        cancel: Option<Cancel>,
    ) -> Result<Unknown<'e>> {
        let args = self.acquire_args(&lock, options);
        let session = self.inner.clone();
        let session_id = self.id;
        let cancel = token(cancel);
        runtime::call(
            env,
            async move {
                let (key, opts) = args?;
                session.acquire_with_cancel(&key, &opts, &cancel).await
            },
            move |_, g| Ok(SharedGrant::register(session_id, g)),
        )
    }

    /// Close the session (idempotent): its grants still held are released (each leave grants
    /// the next waiter), then its record is released and deleted.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let session = match self.closed.swap(true, Ordering::SeqCst) {
            true => None,
            false => Some(self.inner.clone()),
        };
        let id = self.id;
        runtime::call(
            env,
            async move {
                if let Some(s) = session {
                    s.close().await;
                    // Its grants' handles leave the registry with it (all released now).
                    let gone = with_open(|o| o.remove(&id));
                    drop(gone);
                }
                Ok::<(), Error>(())
            },
            |_, ()| Ok(()),
        )
    }
}

/// A grant of a queued lock held through a `Session` (made by `session.acquire`): kept by the
/// session's renewals, no heartbeat of its own. Release it (`release()`, or `await using`);
/// closing its session releases it too.
#[napi]
pub struct SharedGrant {
    /// Taken only by `drop`.
    slot: ManuallyDrop<Slot>,
    session_id: u64,
    id_in_registry: u64,
    epoch: u64,
    /// `URL#EPOCH@SID.N`, with the grant's mode and scope.
    token: String,
    key: String,
    url: String,
    entry_id: String,
    info: lease::Grant,
}

impl SharedGrant {
    fn register(session_id: u64, grant: lease::SharedGrant) -> SharedGrant {
        let id_in_registry = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let info = grant.grant().clone();
        let g = SharedGrant {
            epoch: info.token,
            token: grant.token().to_string(),
            key: grant.key().to_string(),
            url: grant.url().to_string(),
            entry_id: grant.id().to_string(),
            info,
            slot: ManuallyDrop::new(Arc::new(grant)),
            session_id,
            id_in_registry,
        };
        with_open(|o| {
            if let Some(open) = o.get_mut(&session_id) {
                open.grants.insert(id_in_registry, Arc::clone(&g.slot));
            }
        });
        g
    }

    /// A grant through the process's session, registered under that session's entry for this
    /// environment (made on its first grant here).
    fn register_on_process(env: &Env, grant: lease::SharedGrant) -> SharedGrant {
        let env = env.raw() as usize;
        let session = grant.session();
        let session_id = with_open(|o| {
            let found = o
                .iter()
                .find(|(_, e)| e.process && e.env == env && e.session.url() == session.url());
            if let Some((id, _)) = found {
                return *id;
            }
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            let entry = Open {
                env,
                session: session.clone(),
                grants: HashMap::new(),
                process: true,
            };
            o.insert(id, entry);
            id
        });
        SharedGrant::register(session_id, grant)
    }

    /// What fences this grant's fenced operations.
    fn fences(&self) -> crate::fence::Fences {
        crate::fence::Fences::Grant(Arc::clone(&self.slot))
    }

    /// Leave the registry (released, or lost: nothing left to keep held).
    fn forget(&self) {
        let gone = with_open(|o| {
            let open = o.get_mut(&self.session_id)?;
            let grant = open.grants.remove(&self.id_in_registry);
            // The process's session's entry leaves with its last grant of this environment.
            let entry = match open.process && open.grants.is_empty() {
                true => o.remove(&self.session_id),
                false => None,
            };
            Some((grant, entry))
        });
        drop_on_runtime(gone);
    }
}

/// The garbage collector does not end a grant that is held: it stays in the registry (held)
/// until released, or its session closed. One that was lost leaves it.
impl Drop for SharedGrant {
    fn drop(&mut self) {
        if self.slot.lost_reason().is_some() {
            self.forget();
        }
        // SAFETY: taken exactly once, here.
        let slot = unsafe { ManuallyDrop::take(&mut self.slot) };
        // When nobody else has it (released, lost, or its session closed), the core's grant is
        // dropped here: on the runtime, where one not released sends its leave.
        drop_on_runtime(slot);
    }
}

#[napi]
impl SharedGrant {
    /// The fencing number: strictly increasing per lock (as `Lease.epoch`).
    #[napi(getter)]
    pub fn epoch(&self) -> f64 {
        self.epoch as f64
    }

    /// `URL#EPOCH@SID.N`: the token to hand to resources that check it, as `Lease.token` (its
    /// holder is the grant's entry id, so two grants of one session are two holders).
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.token.clone()
    }

    /// The lock's key in the session's store.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.key.clone()
    }

    /// The lock's URL.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Its entry id in the lock's record, `SID.N`.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.entry_id.clone()
    }

    /// What was granted: its mode, token, scope, the lock's permits (as `Lease.grant`).
    #[napi(getter, ts_return_type = "Grant")]
    pub fn grant(&self) -> serde_json::Value {
        crate::held::grant_json(&self.info)
    }

    /// True while held: its session is believed and its lock's record confirmed it less than a
    /// ttl ago. False once lost or released.
    #[napi(getter)]
    pub fn held(&self) -> bool {
        self.slot.is_held()
    }

    /// The latest yield request that named this grant, or `null`: a waiter or an operator
    /// asked it to step aside. Not a loss. The session's confirmation of the lock reports it,
    /// within a third of the session's ttl.
    #[napi(getter, ts_return_type = "YieldRequested | null")]
    pub fn yield_requested(&self) -> Option<crate::held::YieldRequested> {
        if self.slot.is_released() {
            return None;
        }
        self.slot
            .yield_requested()
            .map(crate::held::YieldRequested::from)
    }

    /// Why it was lost (its session's loss, or its own), or `null` while it is not.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.slot.lost_reason().map(|r| r.to_string())
    }

    /// The kind of its loss: `'session_deleted'`, `'expired'`, `'taken_over'`, `'broken'`,
    /// `'removed'`, `'lock_replaced'`, …; `null` while not lost.
    #[napi(getter)]
    pub fn lost_kind(&self) -> Option<&'static str> {
        self.slot.lost_reason().map(|r| r.kind())
    }

    /// Return while held; else throw a `LEASE_LOST` error naming why (lost, or released, by
    /// `release()` or with its session by `close()`).
    #[napi]
    pub fn ensure_held(&self, env: &Env) -> Result<()> {
        self.slot.ensure_held().map_err(|e| error::to_napi(env, &e))
    }

    /// Write `data` at `key` under this grant's token, as `Lease.fencedPut` (exclusive grants
    /// only): `key` is read like a relative path from the lock's directory (`x` beside the
    /// lock, `../x` one level up, `/x` from the store's root); a holder with a later grant of
    /// this lock that wrote it makes this reject with `LEASE_FENCED`. Resolves to the new
    /// version. With `options.ifVersion` / `options.ifAbsent: true`, only if the object is
    /// still at that version / does not exist; otherwise reject with `LEASE_CONFLICT`.
    #[napi(
        ts_args_type = "key: string, data: string | Uint8Array | ArrayBuffer, options?: FencedPutOptions",
        ts_return_type = "Promise<string>"
    )]
    pub fn fenced_put<'e>(
        &self,
        env: &'e Env,
        key: String,
        data: napi::bindgen_prelude::Buffer,
        options: Option<crate::fence::FencedPutOptions>,
    ) -> Result<Unknown<'e>> {
        crate::fence::put(env, self.fences(), key, data, options)
    }

    /// Read the object `key` names for this grant, beside its lock (what `fencedUpdate` reads).
    #[napi(js_name = "_fencedGet", skip_typescript)]
    pub fn fenced_get<'e>(&self, env: &'e Env, key: String) -> Result<Unknown<'e>> {
        crate::fence::get(env, self.fences(), key, crate::fence::Read::Plain)
    }

    /// Read `key` and fence it with this grant's token, as `Lease.fencedRead`: from then on no
    /// holder whose grant ended before this one began can change it. Rejects with
    /// `LEASE_FENCED` when a later conflicting grant wrote or fenced it (this grant has ended).
    #[napi(ts_return_type = "Promise<FencedObject | null>")]
    pub fn fenced_read<'e>(&self, env: &'e Env, key: String) -> Result<Unknown<'e>> {
        crate::fence::get(env, self.fences(), key, crate::fence::Read::Fenced)
    }

    /// Delete `key` unless a holder with a later grant of this lock has written it (then
    /// `LEASE_FENCED`), as `Lease.fencedDelete`. Resolves to false if there was nothing to
    /// delete. Needs a store with conditional deletes, else rejects with `LEASE_STORE`.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn fenced_delete<'e>(&self, env: &'e Env, key: String) -> Result<Unknown<'e>> {
        crate::fence::delete(env, self.fences(), key)
    }

    /// Release this grant alone (idempotent): its leave grants the next waiter, and the
    /// session's other grants stay held. Rejects with `LEASE_LOST` if it was lost before (what
    /// was done under it may have overlapped with another holder).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn release<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        self.forget();
        let grant = Arc::clone(&self.slot);
        runtime::call(env, async move { grant.release().await }, |_, ()| Ok(()))
    }
}
