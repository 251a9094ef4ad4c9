//! A shared session's driver (docs/protocol.md §10, "Shared sessions", issue 24): one session
//! lease at `PREFIX.lease-sessions/SID`, renewed by **one task**, whatever the number of grants
//! attached to it. It only carries out the owner's machine
//! ([`Owner`](crate::protocol::session::owner::Owner)): every decision — when to write, which
//! numbers a landed write attaches, when the session is lost or released — is the machine's.
//!
//! - [`SharedSession::open`] writes the session's first record (a fresh random key: nobody else
//!   can hold it) and starts its renewal task.
//! - [`SharedSession::attach`] hands out a number; [`Attachment::landed`] waits until a landed
//!   session write holds it (attach before join: only then may a join naming `SID.N` be sent).
//!   Attachments waiting at one moment go into one write (a group commit).
//! - [`Attachment::release`] ends the attachment's belief at once, sends its leave when a join
//!   was sent, and its number leaves the set with the next renewal (no write of its own).
//! - Loss of the session (a renewal rejected or replaced, deleted, or no renewal landed within
//!   the ttl) reaches every attachment's own loss channel ([`Attachment::lost`]) and the
//!   session's ([`SharedSession::lost`]).
//!
//! - [`SharedSession::acquire`] takes a queued lock's grant through the session (the queue's
//!   driver, `queue.rs`, with the attachment in place of a session of its own); its
//!   confirmation reads of the lock's record are made by the session's one confirmation task,
//!   every renew interval, a bounded number at once, spread over the interval: no task or
//!   timer per lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::{Error, ErrorKind, Result};
use crate::fence::{FencedObject, Fencer, GrantRef};
use crate::io::Io;
use crate::lease::{Grant, LostReason};
use crate::lock_change;
use crate::options::{LeaseOptions, Timing};
use crate::protocol::fence::Known;
use crate::protocol::hold::{after_write, begin_release, Hold, ReleaseStart, Wrote};
use crate::protocol::queue::holder::{ConfirmEvent, ConfirmStep, Confirmation, GrantHold};
use crate::protocol::queue::{Change, YieldRequested};
use crate::protocol::session::owner::{Due, Leave, Lost, Outcome, Owner, Refused};
use crate::protocol::session::{confirm_round, opening_record, shared_session_key, valid_prefix};
use crate::protocol::write::Written;
use crate::protocol::Backoff;
use crate::record::{timestamp, Holder};
use crate::store::url::{LeaseUrl, StoreUrl};
use crate::store::{Cond, Version};
use crate::token::FencingToken;
use crate::wake_hint::{HintSet, Registration, HINTED_CONFIRM_EVERY};

mod process_session;

/// The store a shared session is opened on, from what a user gave `open_session` in a
/// binding: a store URL without a path (`s3://bucket?…`, `memory://ns`), an existing directory
/// (`file:///var/locks`, `/var/locks`), or else the URL of a lock in the store
/// (`s3://bucket/jobs/7`, `file:///var/locks/gc`: its store).
pub fn session_store(text: &str) -> Result<StoreUrl> {
    if text.contains('\0') {
        return Err(Error::invalid("the store URL contains a NUL character"));
    }
    if let Ok((store, path)) = StoreUrl::parse_with_path(text) {
        match &store {
            StoreUrl::File { root } if std::path::Path::new(root).is_dir() => return Ok(store),
            StoreUrl::File { .. } | StoreUrl::DefaultFile => {}
            _ if path.is_empty() => return Ok(store),
            _ => {}
        }
    }
    LeaseUrl::parse(text).map(|l| l.store)
}

/// The key in a session's `store` of `lock`, as a binding's `Session.acquire(lock)` takes it:
/// a lock URL (`s3://…`, `file://…`, or a path starting with `/` or `.`; anything when
/// `is_path`, a path object of the caller's language) in that store, or else a key
/// (`jobs/7`). A lock of another store is `Invalid`: a shared session holds the locks of one.
pub fn session_lock_key(store: &StoreUrl, lock: &str, is_path: bool) -> Result<String> {
    if lock.contains('\0') {
        return Err(Error::invalid("the lock URL contains a NUL character"));
    }
    if !is_path && !lock.contains("://") && !lock.starts_with(['/', '.']) {
        return Ok(lock.to_string());
    }
    let parsed = LeaseUrl::parse(lock)?;
    if &parsed.store != store {
        return Err(Error::invalid(format!(
            "{lock} is not in this session's store ({}): a shared session holds locks of one \
             store; open a session on that store, or name the lock by its key in this store",
            store
        )));
    }
    Ok(parsed.key)
}

/// How a shared session is opened.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The session's ttl: its owner renews every `ttl/3`; its grants are removed by others
    /// `ttl + grace` after its last renewal once the process is gone.
    pub ttl: Duration,
    /// Where its record goes: `PREFIX.lease-sessions/SID` (empty: the store's root; else a
    /// prefix ending in `/`).
    pub prefix: String,
    /// Who holds it, for `lease status`.
    pub label: Option<String>,
}

impl SessionOptions {
    pub fn new(ttl: Duration) -> SessionOptions {
        SessionOptions {
            ttl,
            prefix: String::new(),
            label: None,
        }
    }

    pub fn prefix(mut self, prefix: impl Into<String>) -> SessionOptions {
        self.prefix = prefix.into();
        self
    }

    pub fn label(mut self, label: impl Into<String>) -> SessionOptions {
        self.label = Some(label.into());
        self
    }
}

/// Where one attachment stands, as its handle sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// No landed session write holds its number yet.
    Pending,
    /// A landed write holds it: a join naming it may be sent.
    Landed,
    /// Lost with its session.
    Lost(LostReason),
    /// Released by its holder.
    Released,
}

struct State {
    owner: Owner,
    slots: HashMap<u64, watch::Sender<Slot>>,
    /// The queued-lock grants held through this session, by number, as each one's holder
    /// knows its lock's record: confirmed by the session's confirmation task.
    grants: HashMap<u64, GrantHold>,
    /// Where each grant's yield requests go, as its confirmations report them (the grant's
    /// handle holds the other end).
    yields: HashMap<u64, Arc<YieldSender>>,
    /// The grants being confirmed now (by the round or by a hint), and whether another
    /// confirmation was asked for meanwhile: one grant's confirmations never overlap (its
    /// `GrantHold` takes one step at a time), and one asked for while another is in flight —
    /// whose read may have been sent before the yield request landed — follows it.
    confirming: HashMap<u64, bool>,
}

type YieldSender = watch::Sender<Option<YieldRequested>>;

struct Inner {
    client: Arc<Io>,
    /// The session record's holder: its grants' holders are this one under their entry ids.
    holder: Holder,
    key: String,
    url: String,
    prefix: String,
    timing: Timing,
    state: Mutex<State>,
    /// Something changed that may make a write due (an attachment, a release, a close).
    wake: Notify,
    /// The session's own loss.
    lost: CancellationToken,
    lost_reason: Mutex<Option<LostReason>>,
    /// The renewal task ended (the session released, lost or closed).
    ended: CancellationToken,
    /// [`SharedSession::close`] began: the acquisitions waiting through the session end.
    closing: CancellationToken,
    /// The grants a wake hint named (a yield request's: docs/protocol.md §10, "Yield on
    /// request", *Holders listen*), confirmed at once by the session's hint task.
    hints: Arc<HintSet>,
}

/// One shared session of this process on one store: many grants, one heartbeat.
#[derive(Clone)]
pub struct SharedSession {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSession")
            .field("url", &self.inner.url)
            .finish()
    }
}

/// A grant of a queued lock held through a shared session ([`SharedSession::acquire`]).
#[derive(Debug)]
pub struct SharedGrant {
    attachment: Attachment,
    grant: Grant,
    /// Each object as this grant last wrote or fenced it (its fenced operations' cache).
    fence_versions: Mutex<HashMap<String, Known>>,
    /// The latest yield request that named this grant.
    yields: Arc<YieldSender>,
    /// Set when the first [`SharedGrant::release`] is done: the loss it found (`None`: it
    /// was released while not lost). Unset: released when dropped. Concurrent releases wait
    /// for the first: one leave.
    released: tokio::sync::OnceCell<Option<LostReason>>,
    /// Its registration with the process's wake-hint listener, kept from its wait: a hint
    /// naming it (a yield request's) makes the session confirm it at once. Dropped with the
    /// grant (unregistered).
    _hinted: Option<Registration>,
}

impl SharedGrant {
    pub(crate) fn new(
        attachment: Attachment,
        grant: Grant,
        confirmation: Confirmation,
        hinted: Option<Registration>,
    ) -> SharedGrant {
        let inner = &attachment.session.inner;
        let hold = GrantHold::new(&grant.key, attachment.id(), inner.timing.ttl, confirmation);
        let yields = Arc::new(watch::channel(None).0);
        {
            let mut st = inner.state.lock().unwrap();
            st.grants.insert(attachment.n, hold);
            st.yields.insert(attachment.n, yields.clone());
        }
        SharedGrant {
            attachment,
            grant,
            fence_versions: Mutex::default(),
            yields,
            released: tokio::sync::OnceCell::new(),
            _hinted: hinted,
        }
    }

    /// The grant's number: strictly increasing per lock, across all modes and scopes (as
    /// [`Lease::epoch`](crate::Lease::epoch) for a queued lock's grant).
    pub fn epoch(&self) -> u64 {
        self.grant.token
    }

    /// The fencing token to hand to resources that check it, as
    /// [`Lease::token`](crate::Lease::token): `URL#EPOCH@SID.N`, with the grant's mode and
    /// scope. Its holder is the grant's entry id in the lock's record.
    pub fn token(&self) -> FencingToken {
        FencingToken::new(self.grant.url.clone(), self.grant.token)
            .with_holder(self.attachment.id())
            .with_mode(self.grant.mode)
            .with_scope(self.grant.scope.clone())
    }

    /// The holder this grant's token names: the session's, under the entry id `SID.N` (made
    /// when asked, not kept per grant: a process may hold 10,000).
    pub fn holder(&self) -> Holder {
        Holder {
            id: self.attachment.id().to_string(),
            ..self.attachment.session.inner.holder.clone()
        }
    }

    pub fn key(&self) -> &str {
        &self.grant.key
    }

    pub fn url(&self) -> &str {
        &self.grant.url
    }

    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Its entry id in the lock's record, `SID.N`.
    pub fn id(&self) -> &str {
        self.attachment.id()
    }

    pub fn session(&self) -> &SharedSession {
        &self.attachment.session
    }

    /// Whether its holder may believe it now: its session believed, its number attached,
    /// and a read of the lock's record sent less than a ttl ago showed it.
    pub fn is_held(&self) -> bool {
        let inner = &self.attachment.session.inner;
        let now = inner.client.clock().now();
        let st = inner.state.lock().unwrap();
        st.owner.believes(self.attachment.n, now)
            && st
                .grants
                .get(&self.attachment.n)
                .is_some_and(|g| now < g.deadline())
    }

    /// `Ok` while held; else the `Lost` error naming why: its loss, its release (by
    /// [`SharedGrant::release`], or with its session by [`SharedSession::close`]), or a belief
    /// that lapsed.
    pub fn ensure_held(&self) -> Result<()> {
        if self.is_held() {
            return Ok(());
        }
        let (url, epoch) = (&self.grant.url, self.grant.token);
        let released = |how: &str| {
            Error::new(
                ErrorKind::Lost,
                format!("{url} (token {epoch}) was released{how}: it is no longer held"),
            )
            .with_lease(url)
            .with_epoch(epoch)
        };
        Err(match self.lost_reason() {
            Some(reason) => reason.error(url, epoch),
            None if self.released.initialized() => released(""),
            None if self.attachment.released() => released(" when its session was closed"),
            None => LostReason::Expired.error(url, epoch),
        })
    }

    /// Its loss, once (with its session's, or its own: the lock's record no longer lists it).
    pub async fn lost(&self) -> LostReason {
        self.attachment.lost().await
    }

    /// Why it was lost, or `None` while it is not; after its release, the loss that release
    /// found (`None`: released while not lost).
    pub fn lost_reason(&self) -> Option<LostReason> {
        match self.released.get() {
            Some(at_release) => at_release.clone(),
            None => self.attachment.lost_reason(),
        }
    }

    /// Whether [`SharedGrant::release`] was called and is done.
    pub fn is_released(&self) -> bool {
        self.released.initialized()
    }

    /// The latest yield request that named this grant, if any (as
    /// [`Lease::yield_requested`](crate::Lease::yield_requested)): a waiter or an operator
    /// asked its holder to step aside. Not a loss: the grant stays held until released. The
    /// session's confirmation reads report it, so it is known within a renew interval of the
    /// request (a wake hint does not shorten that for a shared grant).
    pub fn yield_requested(&self) -> Option<YieldRequested> {
        self.yields.borrow().clone()
    }

    /// Resolves when a yield request names this grant: at once if one already did.
    pub async fn yield_request(&self) -> YieldRequested {
        let mut rx = self.yields.subscribe();
        loop {
            if let Some(y) = rx.borrow_and_update().clone() {
                return y;
            }
            if rx.changed().await.is_err() {
                // The sender lives as long as this grant: never reached while it is borrowed.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The yield requests that name this grant as a `watch` channel: `None` until the first.
    pub fn yield_changes(&self) -> watch::Receiver<Option<YieldRequested>> {
        self.yields.subscribe()
    }

    /// What this grant's fenced operations need: the same operations as a
    /// [`Lease`](crate::Lease)'s, under this grant's token.
    fn fencer<'a>(&'a self, holder: &'a Holder) -> Fencer<'a> {
        Fencer {
            io: &self.attachment.session.inner.client,
            key: &self.grant.key,
            url: &self.grant.url,
            token: self.token(),
            holder,
            grant: Some(GrantRef {
                key: &self.grant.key,
                url: &self.grant.url,
                token: self.grant.token,
                mode: self.grant.mode,
            }),
            cache: &self.fence_versions,
        }
    }

    /// As [`Lease::object_key`](crate::Lease::object_key), from the lock's key.
    pub fn object_key(&self, key: &str) -> Result<String> {
        self.fencer(&self.holder()).object_key(key)
    }

    /// As [`Lease::object_url`](crate::Lease::object_url).
    pub fn object_url(&self, key: &str) -> Result<String> {
        self.fencer(&self.holder()).object_url(key)
    }

    /// As [`Lease::fenced_get`](crate::Lease::fenced_get).
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        self.fencer(&self.holder()).fenced_get(key).await
    }

    /// As [`Lease::fenced_read`](crate::Lease::fenced_read), under this grant's token.
    pub async fn fenced_read(&self, key: &str) -> Result<Option<FencedObject>> {
        self.fencer(&self.holder()).fenced_read(key).await
    }

    /// As [`Lease::fenced_put`](crate::Lease::fenced_put), under this grant's token
    /// (exclusive grants only).
    pub async fn fenced_put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        self.fencer(&self.holder())
            .fenced_put(key, bytes.into())
            .await
    }

    /// As [`Lease::fenced_put_if`](crate::Lease::fenced_put_if), under this grant's token.
    pub async fn fenced_put_if(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: Option<&Version>,
    ) -> Result<Version> {
        self.fencer(&self.holder())
            .fenced_put_if(key, bytes.into(), expected)
            .await
    }

    /// As [`Lease::fenced_update`](crate::Lease::fenced_update), under this grant's token.
    pub async fn fenced_update<F>(&self, key: &str, f: F) -> Result<Version>
    where
        F: FnMut(Option<&FencedObject>) -> Bytes,
    {
        self.fencer(&self.holder()).fenced_update(key, f).await
    }

    /// As [`Lease::fenced_delete`](crate::Lease::fenced_delete), under this grant's token.
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        self.fencer(&self.holder()).fenced_delete(key).await
    }

    /// Release it alone: its belief ends at once, its leave grants the next waiter, and its
    /// number leaves the session's attached set with the next renewal. The session's other
    /// grants stay held.
    ///
    /// As [`Lease::release`](crate::Lease::release): idempotent (calls at once share one
    /// release, one leave; a later call sends nothing), and fails with
    /// [`ErrorKind::Lost`] if the grant was lost before it was released (its loss's error,
    /// every call): whatever was done under it may have overlapped with another holder. Its
    /// leave and detach are done all the same. A leave that fails is returned by the call
    /// that sent it and retried with the session's renewals (later calls do not send it
    /// again).
    pub async fn release(&self) -> Result<()> {
        let mut sent = None;
        let lost = {
            let sent = &mut sent;
            self.released
                .get_or_init(|| async move {
                    let lost = self.attachment.lost_reason();
                    let inner = &self.attachment.session.inner;
                    *sent = Some(inner.release_number(self.attachment.n, true).await);
                    lost
                })
                .await
        };
        let (url, epoch) = (&self.grant.url, self.grant.token);
        if let Some(Err(e)) = sent {
            return Err(e.with_lease(url));
        }
        match lost {
            Some(reason) => Err(reason.error(url, epoch)),
            None => Ok(()),
        }
    }
}

/// A grant dropped without [`SharedGrant::release`] is released in the background (best
/// effort, as a dropped [`crate::Lease`]): its belief ends at once, its leave is sent on the
/// runtime in use, and its number detached with the next renewal.
impl Drop for SharedGrant {
    fn drop(&mut self) {
        if self.released.initialized() {
            return;
        }
        let inner = self.attachment.session.inner.clone();
        let n = self.attachment.n;
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = inner.release_number(n, true).await;
                });
            }
            // No runtime to send the leave on: stop believing and detach; checkers remove
            // the grant by rule 4 once the next renewal dropped its number.
            Err(_) => {
                let now = inner.client.clock().now();
                let mut st = inner.state.lock().unwrap();
                st.grants.remove(&n);
                st.yields.remove(&n);
                st.slots.remove(&n);
                let _ = st.owner.release(n, false, now);
                drop(st);
                inner.wake.notify_one();
            }
        }
    }
}

/// A grant (or waiter) attached to a shared session: its number `N` and entry id `SID.N`.
#[derive(Debug)]
pub struct Attachment {
    session: SharedSession,
    n: u64,
    id: String,
    lock: String,
    slot: watch::Receiver<Slot>,
}

impl SharedSession {
    /// Open a session with `io` ([`SharedSession::open`], in `client.rs`).
    pub(crate) async fn open_on(io: Arc<Io>, opts: SessionOptions) -> Result<SharedSession> {
        SharedSession::open_on_idle(io, opts, None).await
    }

    /// Open a session with `io` that releases itself after `idle` with nothing attached and
    /// no leave pending (`None`: until closed). The per-process default's is one ttl
    /// (`default_session.rs`).
    pub(crate) async fn open_on_idle(
        io: Arc<Io>,
        opts: SessionOptions,
        idle: Option<Duration>,
    ) -> Result<SharedSession> {
        if !valid_prefix(&opts.prefix) {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "a shared session's prefix must be empty or end in '/' (at most {} bytes), \
                     not {:?}",
                    crate::protocol::session::MAX_PREFIX_LEN,
                    opts.prefix
                ),
            ));
        }
        let mut lease_opts = LeaseOptions::new(opts.ttl);
        if let Some(label) = &opts.label {
            lease_opts = lease_opts.label(label.clone());
        }
        let timing = lease_opts.timing(&io.store().capabilities())?;
        let sid = io.rng.hex_id();
        let key = shared_session_key(&opts.prefix, &sid);
        let url = io.lease_url(&key);
        let clock = io.clock().clone();
        let holder = io.new_holder(opts.label.clone());
        let record = opening_record(
            &sid,
            holder.clone(),
            timing.ttl,
            Some(timestamp(clock.wall())),
            io.rng.nonce(),
        );
        let give_up_at = clock.now() + timing.ttl;
        let written = io
            .write(&key, &record, Cond::Create, give_up_at, &timing)
            .await
            .map_err(|e| e.with_lease(&url))?;
        let (version, t_send) = match written {
            Written::Landed { version, t_send } => (version, t_send),
            // A fresh random key: someone else's record there is not ours to take.
            Written::Rejected { .. } | Written::Replaced { .. } => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("{url}: a fresh shared session's key already held a record"),
                ))
            }
        };
        let hold = Hold::new(&url, record, version, t_send, timing);
        let owner = Owner::new(&sid, hold, idle, clock.now());
        let inner = Arc::new(Inner {
            client: io,
            holder,
            key,
            url,
            prefix: opts.prefix.clone(),
            timing,
            state: Mutex::new(State {
                owner,
                slots: HashMap::new(),
                grants: HashMap::new(),
                yields: HashMap::new(),
                confirming: HashMap::new(),
            }),
            wake: Notify::new(),
            lost: CancellationToken::new(),
            lost_reason: Mutex::new(None),
            ended: CancellationToken::new(),
            closing: CancellationToken::new(),
            hints: Arc::default(),
        });
        info!(session = %inner.url, "shared session opened");
        tokio::spawn(inner.clone().run());
        tokio::spawn(inner.clone().confirm_loop());
        tokio::spawn(inner.clone().hint_loop());
        Ok(SharedSession { inner })
    }

    /// Acquire the queued lock at `key` through this process's shared session for `client`'s
    /// store and `opts.ttl` (docs/protocol.md §10, "Shared sessions", *Per-process default*):
    /// one session record and one renewal task for every grant the process holds or waits for
    /// this way, opened on first use at the store's root (`.lease-sessions/`), released and
    /// deleted after one ttl with nothing attached, and opened afresh by the next acquisition
    /// (also when it was lost, or its runtime shut down). `opts` as for
    /// [`SharedSession::acquire`]: a queued request whose ttl is the session's; `data` is
    /// refused (`Invalid`). For a session of your own (another prefix, a label, closed when you
    /// say), [`SharedSession::open`] one.
    pub async fn acquire_on_process_session(
        client: &crate::Client,
        key: &str,
        opts: &LeaseOptions,
    ) -> Result<SharedGrant> {
        let never = CancellationToken::new();
        SharedSession::acquire_on_process_session_with_cancel(client, key, opts, &never).await
    }

    /// [`SharedSession::acquire_on_process_session`], giving up with
    /// [`ErrorKind::Cancelled`] when `cancel` fires (the request leaves the queue and the
    /// session).
    pub async fn acquire_on_process_session_with_cancel(
        client: &crate::Client,
        key: &str,
        opts: &LeaseOptions,
        cancel: &CancellationToken,
    ) -> Result<SharedGrant> {
        process_session::acquire(&client.inner, "", key, opts, cancel).await
    }

    /// Open a session on `client`'s store (docs/protocol.md §10, "Shared sessions"): its
    /// first record is written (conditional on absence, at a fresh random key under
    /// `opts.prefix` + `.lease-sessions/`) before this returns, and its one renewal task and
    /// one confirmation task are started. Explicit and opt-in: nothing attaches to it unless
    /// asked ([`SharedSession::acquire`]); it lives until [`SharedSession::close`], or until it
    /// is lost. Dropping every handle does not end it: its tasks hold it until closed.
    pub async fn open(client: &crate::Client, opts: SessionOptions) -> Result<SharedSession> {
        SharedSession::open_on(client.inner.clone(), opts).await
    }

    /// Acquire a grant of the queued lock at `key` through this session: attached before its
    /// join is sent, held by this session's renewals and confirmed by its one confirmation
    /// task (no task or timer of its own). `opts` as for a queued lock ([`Client::acquire`](crate::Client::acquire)
    /// with `queue()`), but its ttl is the session's, and `data` is refused (`Invalid`).
    pub async fn acquire(&self, key: &str, opts: &LeaseOptions) -> Result<SharedGrant> {
        self.acquire_with_cancel(key, opts, &CancellationToken::new())
            .await
    }

    /// [`SharedSession::acquire`], giving up with [`ErrorKind::Cancelled`] when `cancel`
    /// fires: a waiting request leaves the lock's queue and its attachment is released, as a
    /// cancelled [`Client::acquire_with_cancel`](crate::Client::acquire_with_cancel) leaves.
    pub async fn acquire_with_cancel(
        &self,
        key: &str,
        opts: &LeaseOptions,
        cancel: &CancellationToken,
    ) -> Result<SharedGrant> {
        self.acquire_attached(key, opts, cancel, None).await
    }

    /// [`SharedSession::acquire_with_cancel`] with the number `attached` for `key` already
    /// (`None`: attached here, after the options are checked). An attachment given is released
    /// when the options are refused.
    pub(crate) async fn acquire_attached(
        &self,
        key: &str,
        opts: &LeaseOptions,
        cancel: &CancellationToken,
        attached: Option<Attachment>,
    ) -> Result<SharedGrant> {
        let io = &self.inner.client;
        let url = io.lease_url(key);
        let checked = crate::store::validate_key(key).and_then(|()| {
            let mut opts = opts.clone().queue();
            opts.ttl = self.inner.timing.ttl;
            opts.timing(&io.store().capabilities()).map(|_| ())
        });
        if let Err(e) = checked {
            if let Some(attachment) = attached {
                let _ = attachment.release(false).await;
            }
            return Err(e.with_lease(&url));
        }
        let mut opts = opts.clone().queue();
        opts.ttl = self.inner.timing.ttl;
        let timing = opts
            .timing(&io.store().capabilities())
            .map_err(|e| e.with_lease(&url))?;
        let start = io.clock().now();
        let try_once = opts.wait == Some(Duration::ZERO);
        let wait_deadline = match try_once {
            true => Some(start),
            false => opts.wait.map(|w| start + w),
        };
        // Ends on the caller's cancel or on the session's close, whichever comes first.
        let ends = self.inner.closing.child_token();
        let req = crate::queue::Request {
            key,
            url: &url,
            opts: &opts,
            timing,
            try_once,
            wait_deadline,
            cancel: &ends,
        };
        let attachment = match attached {
            Some(attachment) => attachment,
            None => self.attach(key).map_err(|e| e.with_lease(&url))?,
        };
        let acquiring = crate::queue::acquire_shared(io, req, attachment);
        tokio::pin!(acquiring);
        let outcome = tokio::select! {
            biased;
            outcome = &mut acquiring => outcome,
            _ = cancel.cancelled() => {
                // Tell the acquisition, and let it leave the queue and the session.
                ends.cancel();
                acquiring.await
            }
        };
        let (attachment, grant, confirmation, hinted) = match outcome {
            Err(e) if e.kind() == ErrorKind::Cancelled && !cancel.is_cancelled() => {
                return Err(Error::invalid(format!(
                    "the shared session {} was closed while this acquisition waited: open \
                     another to acquire more",
                    self.inner.url
                ))
                .with_lease(&url))
            }
            other => other?,
        };
        let hinted = hinted.map(|r| r.into_set(&self.inner.hints, attachment.n));
        Ok(SharedGrant::new(attachment, grant, confirmation, hinted))
    }

    /// The prefix its record is under (`""`: the store's root).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The session record's key (`PREFIX.lease-sessions/SID`).
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The session's id (`SID`).
    pub fn sid(&self) -> String {
        self.inner.state.lock().unwrap().owner.sid().to_string()
    }

    pub fn ttl(&self) -> Duration {
        self.inner.timing.ttl
    }

    /// Whether the session is believed now (its last landed renewal less than a ttl ago).
    pub fn is_alive(&self) -> bool {
        let now = self.inner.client.clock().now();
        self.inner.state.lock().unwrap().owner.alive(now)
    }

    /// How many grants and waiters are attached (or attaching).
    pub fn attached(&self) -> usize {
        self.inner.state.lock().unwrap().owner.len()
    }

    /// The session's loss, once: every attachment reports it through its own channel too.
    pub async fn lost(&self) -> LostReason {
        self.inner.lost.cancelled().await;
        self.lost_reason().unwrap_or(LostReason::Expired)
    }

    pub fn lost_reason(&self) -> Option<LostReason> {
        self.inner.lost_reason.lock().unwrap().clone()
    }

    /// Attach a grant (or waiter) of the lock at `lock`: its number, pending until a session
    /// write holding it lands ([`Attachment::landed`]).
    pub fn attach(&self, lock: &str) -> Result<Attachment> {
        self.try_attach(lock).map_err(|r| match r {
            Refused::NotHeld => Error::new(
                ErrorKind::Lost,
                format!(
                    "{}: the shared session is not held (lost, lapsed or closed): open \
                         another",
                    self.inner.url
                ),
            ),
            Refused::Released => Error::new(
                ErrorKind::Lost,
                format!(
                    "{}: the shared session is being released (nothing was attached for \
                         its idle time, or it was closed): open another",
                    self.inner.url
                ),
            ),
            Refused::Full => Error::new(
                ErrorKind::QueueFull,
                format!(
                    "{}: the shared session's attached set is full: open another session \
                         for more grants",
                    self.inner.url
                ),
            ),
        })
    }

    /// [`SharedSession::attach`], with the owner's refusal as it is (the per-process default
    /// opens another session on any).
    pub(crate) fn try_attach(&self, lock: &str) -> std::result::Result<Attachment, Refused> {
        let now = self.inner.client.clock().now();
        if self.inner.ended.is_cancelled() {
            // Its renewal task is gone (released, lost, closed, or its runtime shut down).
            return Err(Refused::NotHeld);
        }
        let (n, id, slot) = {
            let mut st = self.inner.state.lock().unwrap();
            let n = st.owner.attach(lock, now)?;
            let (tx, rx) = watch::channel(Slot::Pending);
            st.slots.insert(n, tx);
            (n, st.owner.id(n), rx)
        };
        self.inner.wake.notify_one();
        Ok(Attachment {
            session: self.clone(),
            n,
            id,
            lock: lock.to_string(),
            slot,
        })
    }

    /// Close the session: an acquisition still waiting through it leaves the lock's queue and
    /// ends with `Invalid` ("closed"); every attachment still held is released (its leave sent
    /// when `joined` says its join was), then the session is released and deleted. Waits
    /// until the renewal task ended.
    pub async fn close(&self) {
        // The acquisitions still waiting through the session leave the locks' queues and end.
        self.inner.closing.cancel();
        let leaves = {
            let now = self.inner.client.clock().now();
            let mut st = self.inner.state.lock().unwrap();
            let leaves = st.owner.close(now, |_| true);
            for (_, tx) in st.slots.drain() {
                tx.send_replace(Slot::Released);
            }
            leaves
        };
        for leave in leaves {
            // A failed leave is not retried once closing: the session's release proves that
            // grant gone (rule 2); send_leave logged it.
            let _ = self.inner.send_leave(leave).await;
        }
        self.inner.wake.notify_one();
        self.inner.ended.cancelled().await;
    }
}

/// The queue's driver uses an attachment as its participant (attach before join).
impl crate::queue::SharedNumber for Attachment {
    fn id(&self) -> &str {
        &self.id
    }

    fn prefix(&self) -> &str {
        &self.session.inner.prefix
    }

    fn alive(&self) -> bool {
        self.lost_reason().is_none() && self.session.is_alive()
    }

    async fn landed(&mut self) -> Result<()> {
        Attachment::landed(self).await
    }

    async fn lost(&self) -> LostReason {
        Attachment::lost(self).await
    }

    async fn release(self, joined: bool) -> Result<()> {
        Attachment::release(self, joined).await
    }
}

impl Attachment {
    /// Its number in the session.
    pub fn number(&self) -> u64 {
        self.n
    }

    /// Its entry id, `SID.N`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The lock it is for.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    pub fn session(&self) -> &SharedSession {
        &self.session
    }

    /// Wait until a landed session write holds this number (then its join may be sent), or
    /// fail with the session's loss.
    pub async fn landed(&mut self) -> Result<()> {
        let slot = self
            .slot
            .wait_for(|s| *s != Slot::Pending)
            .await
            .map(|s| s.clone())
            .unwrap_or(Slot::Lost(LostReason::Expired));
        match slot {
            Slot::Landed => Ok(()),
            Slot::Lost(reason) => Err(reason.error(&self.session.inner.url, 1)),
            Slot::Released | Slot::Pending => Err(Error::new(
                ErrorKind::Invalid,
                format!("{}: released before it was attached", self.id),
            )),
        }
    }

    /// Whether its owner may believe it as far as the session goes (the lock's record must
    /// confirm a grant besides).
    pub fn believed(&self) -> bool {
        let inner = &self.session.inner;
        let now = inner.client.clock().now();
        inner.state.lock().unwrap().owner.believes(self.n, now)
    }

    /// Its loss (with its session's), once.
    pub async fn lost(&self) -> LostReason {
        let mut slot = self.slot.clone();
        let seen = slot
            .wait_for(|s| matches!(s, Slot::Lost(_)))
            .await
            .map(|s| s.clone());
        match seen {
            Ok(Slot::Lost(reason)) => reason,
            // The session's task ended without losing it (closed): never lost.
            _ => std::future::pending().await,
        }
    }

    /// Whether it was lost, and why.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match &*self.slot.borrow() {
            Slot::Lost(reason) => Some(reason.clone()),
            _ => None,
        }
    }

    /// Whether it was released (by its holder, or with its session by
    /// [`SharedSession::close`]).
    pub fn released(&self) -> bool {
        *self.slot.borrow() == Slot::Released
    }

    /// Release it: its belief ends at once; its leave is sent (when `joined`: a join naming
    /// it may have been sent) and retried with the session's renewals if it fails; its number
    /// leaves the attached set with the session's next renewal. The others stay attached.
    pub async fn release(self, joined: bool) -> Result<()> {
        self.session.inner.release_number(self.n, joined).await
    }
}

impl Inner {
    /// Release number `n` (a grant's with it): not believed from now on; its leave sent when
    /// `joined`; detached with the next renewal.
    async fn release_number(&self, n: u64, joined: bool) -> Result<()> {
        let leave = {
            let now = self.client.clock().now();
            let mut st = self.state.lock().unwrap();
            st.grants.remove(&n);
            st.yields.remove(&n);
            if let Some(tx) = st.slots.remove(&n) {
                tx.send_replace(Slot::Released);
            }
            st.owner.release(n, joined, now)
        };
        self.wake.notify_one();
        match leave {
            Some(leave) => self.send_leave(leave).await,
            None => Ok(()),
        }
    }

    /// The one confirmation task: every renew interval, each grant's lock record is read (a
    /// 304 while unchanged) and the grant confirmed, made again where the record was deleted,
    /// or lost where the record no longer lists it (`GrantHold`, as for a per-grant session).
    /// A round's reads run concurrently, bounded, and start spread over the interval
    /// ([`confirm_round`]): one after the other, a slow store could not confirm many grants
    /// within their ttl.
    async fn confirm_loop(self: Arc<Self>) {
        let clock = self.client.clock().clone();
        let renew = self.timing.renew;
        let mut round = clock.now();
        loop {
            round = confirm_round::next_round(round, renew, clock.now());
            tokio::select! {
                _ = clock.sleep_until(round) => {}
                _ = self.ended.cancelled() => return,
            }
            let mut numbers: Vec<u64> = self.state.lock().unwrap().grants.keys().copied().collect();
            numbers.sort_unstable();
            let count = numbers.len();
            let reads = futures::stream::iter(numbers.into_iter().enumerate()).for_each_concurrent(
                confirm_round::READS_IN_FLIGHT,
                |(i, n)| {
                    let at = round + confirm_round::read_offset(i, count, renew);
                    let (me, clock) = (&self, &clock);
                    async move {
                        clock.sleep_until(at).await;
                        me.confirm(n).await;
                    }
                },
            );
            tokio::select! {
                _ = reads => {}
                _ = self.ended.cancelled() => return,
            }
        }
    }

    /// Confirm grant `n` once, after any confirmation of it in flight (then once more when
    /// one was asked for meanwhile); a store that does not answer is tried again next round
    /// (the grant's belief ends at its deadline meanwhile).
    async fn confirm(&self, n: u64) {
        {
            let mut st = self.state.lock().unwrap();
            if let Some(again) = st.confirming.get_mut(&n) {
                *again = true;
                return;
            }
            st.confirming.insert(n, false);
        }
        loop {
            self.confirm_now(n).await;
            let mut st = self.state.lock().unwrap();
            match st.confirming.get_mut(&n) {
                Some(again) if *again => *again = false,
                _ => {
                    st.confirming.remove(&n);
                    return;
                }
            }
        }
    }

    /// The session's hint task: the grants hints named are confirmed at once (at most
    /// [`confirm_round::READS_IN_FLIGHT`] at a time, a look at most every
    /// `HINTED_CONFIRM_EVERY`: forged hints cost a bounded number of conditional reads).
    async fn hint_loop(self: Arc<Self>) {
        let clock = self.client.clock().clone();
        loop {
            tokio::select! {
                _ = self.hints.notify.notified() => {}
                _ = self.ended.cancelled() => return,
            }
            let named = self.hints.take(confirm_round::READS_IN_FLIGHT);
            let confirms = futures::future::join_all(named.into_iter().map(|n| self.confirm(n)));
            tokio::select! {
                _ = confirms => {}
                _ = self.ended.cancelled() => return,
            }
            clock.sleep(HINTED_CONFIRM_EVERY).await;
        }
    }

    /// One confirmation of grant `n` (see [`Inner::confirm`]).
    async fn confirm_now(&self, n: u64) {
        let clock = self.client.clock();
        let mut event = ConfirmEvent::Start;
        loop {
            let (step, key) = {
                let mut st = self.state.lock().unwrap();
                let Some(g) = st.grants.get_mut(&n) else {
                    return;
                };
                let key = g.key().to_string();
                (g.step(event, clock.now(), clock.wall()), key)
            };
            event = match step {
                ConfirmStep::Read { if_none_match } => ConfirmEvent::Read(
                    self.client
                        .read_record(&key, if_none_match.as_ref(), &self.timing)
                        .await,
                ),
                ConfirmStep::Write { bytes, cond } => {
                    info!(lock = %key, "the lock's record was deleted; making it again as this holder last saw it");
                    ConfirmEvent::Wrote(self.client.put_raw(&key, bytes, cond, &self.timing).await)
                }
                ConfirmStep::Confirmed => {
                    self.tell_yield(n, &key);
                    return;
                }
                ConfirmStep::Retry => return,
                ConfirmStep::Lost(reason) => {
                    info!(lock = %key, "grant {} lost: {reason}", self.state.lock().unwrap().owner.id(n));
                    self.lose_grant(n, reason);
                    return;
                }
            };
        }
    }

    /// Tell grant `n`'s holder of a yield request its confirmation reported (each once).
    fn tell_yield(&self, n: u64, lock: &str) {
        let mut st = self.state.lock().unwrap();
        let Some(told) = st.grants.get_mut(&n).and_then(GrantHold::take_yield) else {
            return;
        };
        info!(lock = %lock, by = %told.by, reason = told.reason.as_deref().unwrap_or(""), "asked to yield");
        if let Some(tx) = st.yields.get(&n) {
            tx.send_replace(Some(told));
        }
    }

    /// Grant `n` alone is lost (its lock's record no longer lists it): its number leaves the
    /// attached set (no leave: the record does not list it), the others stay.
    fn lose_grant(&self, n: u64, reason: LostReason) {
        let now = self.client.clock().now();
        let mut st = self.state.lock().unwrap();
        st.grants.remove(&n);
        st.yields.remove(&n);
        st.owner.release(n, false, now);
        if let Some(tx) = st.slots.remove(&n) {
            tx.send_replace(Slot::Lost(reason));
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Send one leave; tell the owner whether it is done (else it hands it back after the
    /// next landed renewal).
    async fn send_leave(&self, leave: Leave) -> Result<()> {
        let change = Change::Leave(leave.id.clone());
        let outcome = lock_change::run(&self.client, &leave.lock, change, None, &self.timing).await;
        let now = self.client.clock().now();
        self.state
            .lock()
            .unwrap()
            .owner
            .left(leave.n, outcome.is_ok(), now);
        self.wake.notify_one();
        outcome.map(|_| ()).map_err(|e| {
            warn!(session = %self.url, lock = %leave.lock, "leave failed (retried with the next renewal): {e}");
            e
        })
    }

    /// The one renewal task: carry out the owner's machine until the session is released,
    /// lost or closed.
    async fn run(self: Arc<Self>) {
        // Also when the task is dropped unfinished (its runtime shut down): nothing renews the
        // session then, so no attach may wait for a write that will never be sent.
        let _ended = self.ended.clone().drop_guard();
        let clock = self.client.clock().clone();
        let rng = &self.client.rng;
        let mut backoff = Backoff::for_timing(&self.timing);
        loop {
            let now = clock.now();
            let due = self.state.lock().unwrap().owner.due(now);
            match due {
                Due::Write => {
                    let (write, deadline) = {
                        let mut st = self.state.lock().unwrap();
                        let deadline = st.owner.hold().deadline();
                        (st.owner.next_write(now, clock.wall(), rng), deadline)
                    };
                    let Some((record, cond)) = write else {
                        continue;
                    };
                    let outcome = self
                        .client
                        .write(&self.key, &record, cond, deadline, &self.timing)
                        .await;
                    let now = clock.now();
                    let outcome = self.state.lock().unwrap().owner.wrote(record, outcome, now);
                    match outcome {
                        Outcome::Renewed { attached, leaves } => {
                            backoff = Backoff::for_timing(&self.timing);
                            let st = self.state.lock().unwrap();
                            for n in attached {
                                if let Some(tx) = st.slots.get(&n) {
                                    tx.send_replace(Slot::Landed);
                                }
                            }
                            drop(st);
                            debug!(session = %self.url, "renewed");
                            // Leaves not known done: retried beside the loop, not in it (a
                            // leave may take up to the unavailable timeout).
                            for leave in leaves {
                                let me = self.clone();
                                tokio::spawn(async move {
                                    let _ = me.send_leave(leave).await;
                                });
                            }
                        }
                        Outcome::Retry(e) => {
                            warn!(session = %self.url, "renewal failed, retrying: {e}");
                            let wait = backoff
                                .next(rng)
                                .min(deadline.saturating_duration_since(now));
                            clock.sleep(wait).await;
                        }
                        Outcome::Lost(lost) => {
                            self.report(lost);
                            return self.end();
                        }
                    }
                }
                Due::Sleep { until } => {
                    tokio::select! {
                        _ = clock.sleep_until(until) => {}
                        _ = self.wake.notified() => {}
                    }
                }
                // One task: a write in flight is awaited above.
                Due::Wait => self.wake.notified().await,
                Due::Lapsed => {
                    let lost = self.state.lock().unwrap().owner.expire(now);
                    if let Some(lost) = lost {
                        self.report(lost);
                    }
                    return self.end();
                }
                Due::Release => {
                    // Decided and begun under the state's lock: an attach that came first
                    // cancelled it (ask `due` again); one after it is refused.
                    if self.release_record().await {
                        return self.end();
                    }
                }
                Due::Done => return self.end(),
            }
        }
    }

    /// Every attachment lost, each through its own channel, then the session's.
    fn report(&self, lost: Lost) {
        let reason = match lost.reason {
            LostReason::Vanished => LostReason::SessionDeleted,
            other => other,
        };
        info!(session = %self.url, grants = lost.grants.len(), "shared session lost: {reason}");
        let mut st = self.state.lock().unwrap();
        for n in lost.grants {
            if let Some(tx) = st.slots.remove(&n) {
                tx.send_replace(Slot::Lost(reason.clone()));
            }
        }
        drop(st);
        *self.lost_reason.lock().unwrap() = Some(reason);
        self.lost.cancel();
    }

    fn end(&self) {
        // Dropping the senders ends every handle's wait.
        let mut st = self.state.lock().unwrap();
        st.slots.clear();
        st.grants.clear();
        drop(st);
        self.ended.cancel();
    }

    /// Release the session's record (nothing attached, no leave pending), then delete it: false
    /// (nothing done) when the release is no longer due (an attach came first).
    async fn release_record(&self) -> bool {
        let clock = self.client.clock();
        let start = {
            let mut st = self.state.lock().unwrap();
            let now = clock.now();
            if !st.owner.is_releasing() && !st.owner.decide_release(now) {
                return false;
            }
            begin_release(
                st.owner.hold_mut(),
                clock.now(),
                clock.wall(),
                &self.client.rng,
            )
        };
        let ReleaseStart::Send(record, cond) = start else {
            return true;
        };
        let give_up_at = clock.now() + self.timing.ttl;
        let outcome = self
            .client
            .write(&self.key, &record, cond, give_up_at, &self.timing)
            .await;
        let landed = match &outcome {
            Ok(Written::Landed { version, .. }) => Some(version.clone()),
            _ => None,
        };
        let now = clock.now();
        {
            let mut st = self.state.lock().unwrap();
            after_write(st.owner.hold_mut(), Wrote::Release, record, outcome, now);
        }
        // Released: checkers remove what is left at once (rule 2). Deleting it is tidying:
        // absent, a checker judges by rule 3.
        if let Some(version) = landed {
            let delete = self.client.store().delete(&self.key, &version);
            let _ = self
                .client
                .timed(self.timing.request_timeout, "delete", delete)
                .await;
        }
        info!(session = %self.url, "shared session released");
        true
    }
}
