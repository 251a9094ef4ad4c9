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
//! The per-lock work (a queued lock's confirmation reads) is not here: it is the next step of
//! issue 24 (see docs/protocol.md §10, "Steps").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::io::Io;
use crate::lease::LostReason;
use crate::lock_change;
use crate::options::{LeaseOptions, Timing};
use crate::protocol::hold::{after_write, begin_release, Hold, ReleaseStart, Wrote};
use crate::protocol::queue::Change;
use crate::protocol::session::owner::{Due, Leave, Lost, Outcome, Owner, Refused};
use crate::protocol::session::{shared_session_key, valid_prefix};
use crate::protocol::write::Written;
use crate::protocol::Backoff;
use crate::record::{timestamp, Record, RecordState, FORMAT};
use crate::store::Cond;

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
}

struct Inner {
    client: Arc<Io>,
    key: String,
    url: String,
    timing: Timing,
    state: Mutex<State>,
    /// Something changed that may make a write due (an attachment, a release, a close).
    wake: Notify,
    /// The session's own loss.
    lost: CancellationToken,
    lost_reason: Mutex<Option<LostReason>>,
    /// The renewal task ended (the session released, lost or closed).
    ended: CancellationToken,
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
    /// Open a session on `client`'s store: its first record is written (conditional on
    /// absence, at a fresh random key) before this returns, and its one renewal task started.
    /// Explicit and opt-in (docs/protocol.md §10, "The API"): nothing attaches to it unless
    /// asked; it lives until [`SharedSession::close`], or until it is lost. Dropping every
    /// handle does not end it: the renewal task holds it until closed.
    pub async fn open(client: &Client, opts: SessionOptions) -> Result<SharedSession> {
        let io = client.inner.clone();
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
        let mut holder = io.new_holder(opts.label.clone());
        // Checkers take a record held in the session's id for its owner's (protocol §10).
        holder.id = sid.clone();
        let wall = timestamp(clock.wall());
        let record = Record {
            format: FORMAT,
            epoch: 1,
            rev: 1,
            state: RecordState::Held,
            ttl_ms: timing.ttl.as_millis() as u64,
            holder,
            acquired_at: Some(wall.clone()),
            renewed_at: Some(wall),
            data: None,
            prev: vec![],
            write: Some(io.rng.nonce()),
            broken: None,
            history: Default::default(),
            attached: Some(String::new()),
        };
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
        let owner = Owner::new(&sid, hold, None, clock.now());
        let inner = Arc::new(Inner {
            client: io,
            key,
            url,
            timing,
            state: Mutex::new(State {
                owner,
                slots: HashMap::new(),
            }),
            wake: Notify::new(),
            lost: CancellationToken::new(),
            lost_reason: Mutex::new(None),
            ended: CancellationToken::new(),
        });
        info!(session = %inner.url, "shared session opened");
        tokio::spawn(inner.clone().run());
        Ok(SharedSession { inner })
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
        let now = self.inner.client.clock().now();
        let (n, id, slot) = {
            let mut st = self.inner.state.lock().unwrap();
            let n = st.owner.attach(lock, now).map_err(|r| match r {
                Refused::NotHeld => Error::new(
                    ErrorKind::Lost,
                    format!(
                        "{}: the shared session is not held (lost, lapsed or closed): open \
                         another",
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
            })?;
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

    /// Close the session: every attachment still held is released (its leave sent when
    /// `joined` says its join was), then the session is released and deleted. Waits until
    /// the renewal task ended.
    pub async fn close(&self) {
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

    /// Release it: its belief ends at once; its leave is sent (when `joined`: a join naming
    /// it may have been sent) and retried with the session's renewals if it fails; its number
    /// leaves the attached set with the session's next renewal. The others stay attached.
    pub async fn release(self, joined: bool) -> Result<()> {
        let inner = self.session.inner.clone();
        let leave = {
            let now = inner.client.clock().now();
            let mut st = inner.state.lock().unwrap();
            if let Some(tx) = st.slots.remove(&self.n) {
                tx.send_replace(Slot::Released);
            }
            st.owner.release(self.n, joined, now)
        };
        inner.wake.notify_one();
        match leave {
            Some(leave) => inner.send_leave(leave).await,
            None => Ok(()),
        }
    }
}

impl Inner {
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
                    self.release_record().await;
                    return self.end();
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
        self.state.lock().unwrap().slots.clear();
        self.ended.cancel();
    }

    /// Release the session's record (nothing attached, no leave pending), then delete it.
    async fn release_record(&self) {
        let clock = self.client.clock();
        let start = {
            let mut st = self.state.lock().unwrap();
            begin_release(
                st.owner.hold_mut(),
                clock.now(),
                clock.wall(),
                &self.client.rng,
            )
        };
        let ReleaseStart::Send(record, cond) = start else {
            return;
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
    }
}
