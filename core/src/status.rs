//! Reading a lease without writing: the drivers of [`Client::status`](crate::Client::status)
//! (`read`) and [`Client::watch`](crate::Client::watch) (`Watcher`).
//!
//! Readers need only read permission. `watch` polls with `if-none-match`, so an unchanged
//! record costs a 304 and no body.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::Stream;
use serde::Serialize;
use tracing::warn;

use crate::error::{ErrorKind, Result};
use crate::io::{local_wake, Io};
use crate::options::{LeaseOptions, Timing, MAX_TTL};
use crate::protocol::queue::{Classified, Entry, Mode, QueueRecord, Scope};
use crate::protocol::view::{Seen, View};
use crate::protocol::Backoff;
use crate::record::{Holder, Parsed, RecordState, Tenure};
use crate::store::{validate_key, Get, Version};

/// What a lease looks like from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// No record: never acquired (or deleted by hand).
    Free,
    /// Held, and by the store's clock still within its ttl.
    Held,
    /// Released by its last holder (or broken); free to take.
    Released,
    /// Held, but by the store's clock older than its ttl + grace + the clock's resolution: the
    /// holder no longer relies on it, and a waiter may take it over now (the same margins as the
    /// takeover rule, so a lease that is being renewed is never called expired).
    Expired,
    /// Broken by an operator (`lease break`): nobody may take it until the broken holder's
    /// deadline has surely passed, or it acknowledges the loss.
    Broken,
    /// The record cannot be read as a lease record; it will be taken over like an expired one.
    Corrupt,
}

impl LeaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Free => "free",
            LeaseState::Held => "held",
            LeaseState::Released => "released",
            LeaseState::Expired => "expired",
            LeaseState::Broken => "broken",
            LeaseState::Corrupt => "corrupt",
        }
    }
}

impl std::fmt::Display for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub url: String,
    pub state: LeaseState,
    pub epoch: Option<u64>,
    pub holder: Option<Holder>,
    pub ttl: Option<Duration>,
    /// Estimated time until a waiter may take the lease over, by the store's clock (the
    /// holder's own deadline comes before it).
    pub expires_in: Option<Duration>,
    pub data: Option<String>,
    pub acquired_at: Option<String>,
    pub renewed_at: Option<String>,
    pub version: Option<Version>,
    /// Why the record is corrupt, when it is.
    pub detail: Option<String>,
    /// A queued lock's grants and waiters (docs/protocol.md §10); `None` for a lease.
    pub queue: Option<QueueStatus>,
    /// The tenures before the current one, most recent first (docs/protocol.md §3).
    pub history: Vec<Tenure>,
    /// When the current record took the lease from a live holder (a preemption,
    /// docs/protocol.md §5): that holder's id and epoch.
    pub preempted: Option<crate::record::Displaced>,
}

/// Who holds a queued lock, who is leaving it, and who waits, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    pub permits: Option<u32>,
    /// In the order granted, each with its token: the grants whose sessions are live (or were
    /// not read).
    pub holders: Vec<Participant>,
    /// Grants still listed whose sessions show they hold no more (expired, broken, released,
    /// deleted): the waiters remove them (docs/protocol.md §10, "Removing the gone").
    pub departing: Vec<Participant>,
    /// In the order they will be granted among those that conflict: arrival order, or with
    /// priorities the settling order (`QueueRecord::order`).
    pub waiting: Vec<Participant>,
}

/// What a participant's session shows (read by `status`, which reads the sessions of every
/// grant and of the first 32 (`SESSIONS_READ`) waiters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// Held, and by the store's clock within its ttl.
    Live,
    /// Not renewed for longer than its ttl + grace + the clock's resolution.
    Expired,
    /// Broken by an operator (`lease break`).
    Broken,
    /// Released (by its participant, or by one that took it for gone).
    Released,
    /// Absent: deleted, or never made.
    Gone,
    /// Not read, or unreadable.
    Unknown,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Live => "live",
            SessionState::Expired => "expired",
            SessionState::Broken => "broken",
            SessionState::Released => "released",
            SessionState::Gone => "gone",
            SessionState::Unknown => "unknown",
        }
    }

    /// Whether the participant may still believe it holds (or waits).
    pub fn is_live(self) -> bool {
        matches!(self, SessionState::Live | SessionState::Unknown)
    }
}

/// How many waiters' sessions `status` reads (all the grants' are read).
pub const SESSIONS_READ: usize = 32;

/// A holder or a waiter of a queued lock: its entry in the lock's record, and what its session
/// says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// Who it is, from its session (only `id` when the session was not read).
    pub holder: Holder,
    pub mode: Mode,
    pub scope: Scope,
    /// Its grant's fencing token; `None` while it waits.
    pub token: Option<u64>,
    /// Its session's ttl.
    pub ttl: Duration,
    /// When it joined (its session began), from its session.
    pub since: Option<String>,
    /// Its data, from its session.
    pub data: Option<String>,
    pub session: SessionState,
    /// Its priority among competing waiters (0: the default; docs/protocol.md §10,
    /// "Priorities"); 0 once granted.
    pub priority: i32,
    /// How many later-joined competing waiters were granted while it waited; at
    /// [`MAX_BYPASS`](crate::protocol::queue::MAX_BYPASS) it is due and goes next. 0 once granted.
    pub passed: u32,
}

impl Participant {
    /// `entry` as `session` (the status of its session record, if read) shows it.
    pub fn new(entry: &Entry, session: Option<&Status>) -> Participant {
        let ours = session
            .and_then(|s| s.holder.as_ref())
            .is_some_and(|h| h.id == entry.session_holder());
        let state = match session.map(|s| s.state) {
            None | Some(LeaseState::Corrupt) => SessionState::Unknown,
            Some(LeaseState::Free) => SessionState::Gone,
            Some(LeaseState::Released) => SessionState::Released,
            Some(LeaseState::Broken) => SessionState::Broken,
            Some(LeaseState::Expired) => SessionState::Expired,
            // Held by another: a checker's record (it took the session for gone).
            Some(LeaseState::Held) if !ours => SessionState::Released,
            Some(LeaseState::Held) => SessionState::Live,
        };
        let s = session.filter(|_| ours);
        Participant {
            holder: s.and_then(|s| s.holder.clone()).unwrap_or_else(|| Holder {
                id: entry.id.clone(),
                ..Holder::default()
            }),
            mode: entry.mode,
            scope: entry.scope.clone(),
            token: entry.token,
            ttl: Duration::from_millis(entry.ttl_ms),
            since: s.and_then(|s| s.acquired_at.clone()),
            data: s.and_then(|s| s.data.clone()),
            session: state,
            priority: entry.priority,
            passed: entry.passed,
        }
    }

    /// `"label" (id 1234abcd, host h, pid 7) (shared, path a/b)`: for messages.
    pub fn describe(&self) -> String {
        let scope = match &self.scope {
            Scope::Whole => String::new(),
            scope => format!(", {scope}"),
        };
        format!("{} ({}{scope})", self.holder.describe(), self.mode.as_str())
    }
}

impl Status {
    /// The status of what `view` shows (the same margins as the takeover rule).
    pub fn from_view(url: &str, view: &View, timing: &Timing) -> Status {
        let mut s = Status {
            url: url.to_string(),
            state: LeaseState::Free,
            epoch: None,
            holder: None,
            ttl: None,
            expires_in: None,
            data: None,
            acquired_at: None,
            renewed_at: None,
            version: None,
            detail: None,
            queue: None,
            history: Vec::new(),
            preempted: None,
        };
        let Some(Seen::Present {
            version,
            parsed,
            last_modified,
            ..
        }) = &view.seen
        else {
            return s;
        };
        s.version = Some(version.clone());
        match parsed {
            Parsed::Corrupt { reason, epoch } => {
                s.state = LeaseState::Corrupt;
                s.epoch = *epoch;
                s.detail = Some(reason.clone());
            }
            Parsed::Valid(r) => {
                s.epoch = Some(r.epoch);
                s.holder = Some(r.holder.clone());
                s.ttl = Some(r.ttl());
                s.data = r.data.clone();
                s.acquired_at = r.acquired_at.clone();
                s.renewed_at = r.renewed_at.clone();
                s.history = r.history.to_vec();
                s.preempted = r.preempted.clone();
                s.state = match (r.state, &r.broken) {
                    (RecordState::Released, _) => LeaseState::Released,
                    (RecordState::Held, None) => LeaseState::Held,
                    (RecordState::Held, Some(_)) => LeaseState::Broken,
                };
                if r.state == RecordState::Held {
                    if let (Some(modified), Some((now, _))) = (last_modified, view.server_now) {
                        let age = now.duration_since(*modified).unwrap_or(Duration::ZERO);
                        let ttl = r.ttl().min(MAX_TTL);
                        let limit = ttl + timing.grace_for(ttl) + timing.resolution;
                        let left = limit.saturating_sub(age);
                        s.expires_in = Some(left);
                        if left.is_zero() {
                            s.state = LeaseState::Expired;
                        }
                    }
                }
            }
        }
        s
    }

    /// The status of a queued lock's record, with what the sessions read (`sessions`, by
    /// participant id) say: `held` while any grant's session is live (or was not read), then
    /// `broken` or `expired` while grants whose sessions ended are still listed, `released`
    /// when nobody holds a grant. `epoch` is the highest token; `holder` the first live grant's.
    pub fn from_queue(
        url: &str,
        r: &QueueRecord,
        version: Version,
        sessions: &std::collections::HashMap<String, Status>,
    ) -> Status {
        let participant = |e: &Entry| Participant::new(e, sessions.get(&e.id));
        let (holders, departing): (Vec<Participant>, Vec<Participant>) = r
            .grants
            .iter()
            .map(participant)
            .partition(|p| p.session.is_live());
        // In the order they will be granted among those that conflict (with priorities, not
        // arrival order: docs/protocol.md §10, "Priorities").
        let waiting: Vec<Participant> = r
            .order()
            .into_iter()
            .map(|i| participant(&r.queue[i]))
            .collect();
        let first = holders.first();
        let state = if first.is_some() {
            LeaseState::Held
        } else if departing.iter().any(|p| p.session == SessionState::Broken) {
            LeaseState::Broken
        } else if !departing.is_empty() {
            LeaseState::Expired
        } else {
            LeaseState::Released
        };
        Status {
            url: url.to_string(),
            state,
            epoch: Some(r.epoch),
            holder: first.map(|g| g.holder.clone()),
            ttl: first.map(|g| g.ttl),
            expires_in: None,
            data: first.and_then(|g| g.data.clone()),
            acquired_at: first.and_then(|g| g.since.clone()),
            renewed_at: None,
            version: Some(version),
            detail: None,
            queue: Some(QueueStatus {
                permits: r.permits,
                holders,
                departing,
                waiting,
            }),
            history: Vec::new(),
            preempted: None,
        }
    }

    /// The status of what a read shows: a queued lock's record, or a lease as `view` has it.
    pub(crate) fn from_read(
        url: &str,
        queue: Option<&(QueueRecord, Version)>,
        view: &View,
        timing: &Timing,
    ) -> Status {
        match queue {
            Some((r, v)) => Status::from_queue(url, r, v.clone(), &Default::default()),
            None => Status::from_view(url, view, timing),
        }
    }

    /// True when `other` differs in what a watcher reports: state, epoch, holder, data, and a
    /// queued lock's holders and waiters. Renewals alone are not changes.
    pub fn differs_from(&self, other: &Status) -> bool {
        let ids = |s: &Status| {
            s.queue.as_ref().map(|q| {
                let ids =
                    |v: &[Participant]| v.iter().map(|e| e.holder.id.clone()).collect::<Vec<_>>();
                (ids(&q.holders), ids(&q.departing), ids(&q.waiting))
            })
        };
        self.state != other.state
            || self.epoch != other.epoch
            || self.holder.as_ref().map(|h| &h.id) != other.holder.as_ref().map(|h| &h.id)
            || self.data != other.data
            || ids(self) != ids(other)
    }

    /// What changed from `before` to this status, for `lease watch`: `initial` (nothing
    /// before), `acquired` (a new holder of a free or released lease), `taken_over` (a new
    /// holder replaced a held, expired or broken one), `released`, `expired`, `broken`,
    /// `deleted`, `corrupt`, `data` (the holder changed its data), `created` (a lease's
    /// record made released, acquired by nobody yet: its take follows), or `changed`.
    pub fn transition(&self, before: Option<&Status>) -> &'static str {
        let Some(b) = before else {
            return "initial";
        };
        let new_epoch = self.epoch != b.epoch;
        match self.state {
            LeaseState::Free => "deleted",
            LeaseState::Corrupt => "corrupt",
            LeaseState::Broken => "broken",
            // A lease's create grants nobody (docs/protocol.md §5): not an acquisition.
            LeaseState::Released if self.queue.is_none() && self.acquired_at.is_none() => "created",
            LeaseState::Released if self.queue.is_none() && !new_epoch => "released",
            LeaseState::Expired => "expired",
            LeaseState::Held | LeaseState::Released if new_epoch => match b.state {
                LeaseState::Free | LeaseState::Released => "acquired",
                _ => "taken_over",
            },
            LeaseState::Held if self.data != b.data => "data",
            _ => "changed",
        }
    }

    /// The JSON shape shared by `lease status --json` and every binding (see [`Status`]'s
    /// `Serialize`): `url`, `state`, `epoch`, `holder`, `ttl_ms`, `expires_in_ms`, `data`,
    /// `acquired_at`, `renewed_at`, `detail`; absent values are `null`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a status serializes to JSON")
    }
}

/// The status JSON: every key present, absent values `null` (the CLI's `--json`, Python's
/// dicts and Node's objects all come from this one shape).
#[derive(Serialize)]
struct StatusJson<'a> {
    url: &'a str,
    state: &'static str,
    epoch: Option<u64>,
    holder: Option<HolderJson<'a>>,
    ttl_ms: Option<u64>,
    expires_in_ms: Option<u64>,
    data: Option<&'a str>,
    acquired_at: Option<&'a str>,
    renewed_at: Option<&'a str>,
    detail: Option<&'a str>,
    /// A queued lock's permits, holders (granted, with tokens) and waiters (in arrival order);
    /// `null` for a lease.
    permits: Option<u32>,
    holders: Option<Vec<ParticipantJson<'a>>>,
    departing: Option<Vec<ParticipantJson<'a>>>,
    waiting: Option<Vec<ParticipantJson<'a>>>,
    /// The tenures before the current one, most recent first: `epoch`, `holder`,
    /// `acquired_at`, `ended_at`, `end`, `by`.
    history: Vec<TenureJson<'a>>,
    /// The holder the current record took the lease from while it was live (a preemption):
    /// `{"id", "epoch"}`, else `null`.
    preempted: Option<PreemptedJson<'a>>,
}

#[derive(Serialize)]
struct PreemptedJson<'a> {
    id: &'a str,
    epoch: u64,
}

/// A past tenure: every key present, absent values `null`.
#[derive(Serialize)]
struct TenureJson<'a> {
    epoch: u64,
    holder: HolderJson<'a>,
    acquired_at: Option<&'a str>,
    ended_at: Option<&'a str>,
    end: &'a str,
    by: Option<&'a str>,
}

impl<'a> From<&'a Tenure> for TenureJson<'a> {
    fn from(t: &'a Tenure) -> Self {
        TenureJson {
            epoch: t.epoch,
            holder: HolderJson::from(&t.holder),
            acquired_at: t.acquired_at.as_deref(),
            ended_at: t.ended_at.as_deref(),
            end: &t.end,
            by: t.by.as_deref(),
        }
    }
}

/// A queued lock's participant: `holder`, `mode`, `scope` (`null` for the whole lock,
/// `{"path": …}` or `{"start": …, "end": …}`), `token` (`null` while waiting), `ttl_ms`,
/// `since`, `data`, `session` (what its session shows: `live`, `expired`, `broken`,
/// `released`, `gone`, `unknown`), `priority` and `passed` (a waiter's priority and how many
/// later-joined waiters went before it; both 0 for a grant).
#[derive(Serialize)]
struct ParticipantJson<'a> {
    holder: HolderJson<'a>,
    mode: &'static str,
    scope: Option<ScopeJson<'a>>,
    token: Option<u64>,
    ttl_ms: u64,
    since: Option<&'a str>,
    data: Option<&'a str>,
    session: &'static str,
    priority: i32,
    passed: u32,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ScopeJson<'a> {
    Path { path: &'a str },
    Range { start: u64, end: u64 },
}

impl<'a> From<&'a Participant> for ParticipantJson<'a> {
    fn from(e: &'a Participant) -> Self {
        ParticipantJson {
            holder: HolderJson::from(&e.holder),
            mode: e.mode.as_str(),
            scope: match &e.scope {
                Scope::Whole => None,
                Scope::Path(p) => Some(ScopeJson::Path { path: p }),
                Scope::Range { start, end } => Some(ScopeJson::Range {
                    start: *start,
                    end: *end,
                }),
            },
            token: e.token,
            ttl_ms: e.ttl.as_millis() as u64,
            since: e.since.as_deref(),
            data: e.data.as_deref(),
            session: e.session.as_str(),
            priority: e.priority,
            passed: e.passed,
        }
    }
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        StatusJson {
            url: &self.url,
            state: self.state.as_str(),
            epoch: self.epoch,
            holder: self.holder.as_ref().map(HolderJson::from),
            ttl_ms: self.ttl.map(|t| t.as_millis() as u64),
            expires_in_ms: self.expires_in.map(|t| t.as_millis() as u64),
            data: self.data.as_deref(),
            acquired_at: self.acquired_at.as_deref(),
            renewed_at: self.renewed_at.as_deref(),
            detail: self.detail.as_deref(),
            permits: self.queue.as_ref().and_then(|q| q.permits),
            holders: self
                .queue
                .as_ref()
                .map(|q| q.holders.iter().map(ParticipantJson::from).collect()),
            departing: self
                .queue
                .as_ref()
                .map(|q| q.departing.iter().map(ParticipantJson::from).collect()),
            waiting: self
                .queue
                .as_ref()
                .map(|q| q.waiting.iter().map(ParticipantJson::from).collect()),
            history: self.history.iter().map(TenureJson::from).collect(),
            preempted: self.preempted.as_ref().map(|p| PreemptedJson {
                id: &p.id,
                epoch: p.epoch,
            }),
        }
        .serialize(serializer)
    }
}

/// A holder as status, leaders and errors show it: `id`, `label`, `host`, `pid`, `user`,
/// `client`, every key present. (The record itself leaves unknown fields out.)
#[derive(Serialize)]
pub struct HolderJson<'a> {
    id: &'a str,
    label: Option<&'a str>,
    host: Option<&'a str>,
    pid: Option<u32>,
    user: Option<&'a str>,
    client: Option<&'a str>,
}

impl<'a> From<&'a Holder> for HolderJson<'a> {
    fn from(h: &'a Holder) -> Self {
        HolderJson {
            id: &h.id,
            label: h.label.as_deref(),
            host: h.host.as_deref(),
            pid: h.pid,
            user: h.user.as_deref(),
            client: h.client.as_deref(),
        }
    }
}

impl HolderJson<'_> {
    /// The holder's JSON object (for bindings that build their own values from it).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a holder serializes to JSON")
    }
}

/// The lease at `key` as the store shows it now ([`Client::status`](crate::Client::status)).
pub(crate) async fn read(io: &Io, key: &str) -> Result<Status> {
    let url = io.lease_url(key);
    validate_key(key).map_err(|e| e.with_lease(&url))?;
    let timing = LeaseOptions::default().timing(&io.store().capabilities())?;
    let mut backoff = Backoff::for_timing(&timing);
    let mut attempts = 0;
    loop {
        match io.get(key, None, timing.request_timeout).await {
            Ok(get) => {
                if let Some((r, version)) = queue_read(&get) {
                    let sessions = sessions_of(io, key, &r, &timing).await;
                    return Ok(Status::from_queue(&url, &r, version, &sessions));
                }
                let mut view = View::default();
                view.absorb(get, io.clock().now());
                return Ok(Status::from_view(&url, &view, &timing));
            }
            Err(e) if e.kind() == ErrorKind::Unavailable && attempts < 3 => {
                attempts += 1;
                io.clock().sleep(backoff.next(&io.rng)).await;
            }
            Err(e) => return Err(e.with_lease(&url)),
        }
    }
}

/// The statuses of the sessions of a queued lock's grants and first [`SESSIONS_READ`]
/// waiters, by participant id (a session that could not be read is left out).
pub(crate) async fn sessions_of(
    io: &Io,
    key: &str,
    r: &QueueRecord,
    timing: &Timing,
) -> std::collections::HashMap<String, Status> {
    use futures::stream::StreamExt;
    // Owned ids and keys: a closure over borrowed ones is not `Send` for every lifetime, as the
    // bindings' runtimes need (rustc's "FnOnce is not general enough").
    let ids: Vec<(String, String)> = r
        .grants
        .iter()
        .chain(r.queue.iter().take(SESSIONS_READ))
        .map(|e| (e.id().to_string(), e.session_key(key)))
        .collect();
    futures::stream::iter(ids)
        .map(|(id, skey): (String, String)| async move {
            let get = io.get(&skey, None, timing.request_timeout).await.ok()?;
            let mut view = View::default();
            view.absorb(get, io.clock().now());
            let status = Status::from_view(&skey, &view, timing);
            Some((id, status))
        })
        .buffer_unordered(16)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

/// A stream of lease changes; see [`Client::watch`](crate::Client::watch).
pub struct Watcher {
    io: Arc<Io>,
    key: String,
    url: String,
    poll: Duration,
    view: View,
    /// The queued lock's record last read, if the key holds one.
    queue: Option<(QueueRecord, Version)>,
    last: Option<Status>,
    timing: Timing,
}

impl Watcher {
    /// Watch the lease at `key` ([`Client::watch`](crate::Client::watch)).
    pub(crate) fn new(io: Arc<Io>, key: &str, poll: Duration) -> Result<Watcher> {
        let url = io.lease_url(key);
        validate_key(key).map_err(|e| e.with_lease(&url))?;
        let timing = LeaseOptions::default()
            .poll_interval(poll)
            .timing(&io.store().capabilities())
            .map_err(|e| e.with_lease(&url))?;
        Ok(Watcher {
            io,
            key: key.to_string(),
            url,
            poll: timing.poll,
            view: View::default(),
            queue: None,
            last: None,
            timing,
        })
    }

    /// The next change (the current status on the first call).
    pub async fn next(&mut self) -> Result<Status> {
        let clock = self.io.clock().clone();
        let mut backoff = Backoff::for_timing(&self.timing);
        loop {
            if self.last.is_some() {
                let wake = local_wake(self.io.store().url(), &self.key);
                let poll = self.io.rng.jitter(self.poll, 0.1);
                tokio::select! {
                    _ = clock.sleep(poll) => {}
                    _ = wake.notified() => {}
                }
            }
            match self
                .io
                .get(&self.key, self.view.version(), self.timing.request_timeout)
                .await
            {
                Ok(get) => {
                    if !matches!(get, Get::NotModified { .. }) {
                        self.queue = queue_read(&get);
                    }
                    self.view.absorb(get, clock.now())
                }
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    warn!(lease = %self.url, "watch: read failed, retrying: {e}");
                    clock.sleep(backoff.next(&self.io.rng)).await;
                    continue;
                }
                Err(e) => return Err(e.with_lease(&self.url)),
            }
            let status =
                Status::from_read(&self.url, self.queue.as_ref(), &self.view, &self.timing);
            if self
                .last
                .as_ref()
                .is_none_or(|last| last.differs_from(&status))
            {
                self.last = Some(status.clone());
                return Ok(status);
            }
        }
    }

    /// The same changes as a `Stream`.
    pub fn into_stream(self) -> impl Stream<Item = Result<Status>> + Send {
        futures::stream::unfold(self, |mut w| async move {
            let item = w.next().await;
            Some((item, w))
        })
    }
}

pub use crate::protocol::view::unix_ms;

/// A queued lock's record and its version, when `get` shows a valid one.
pub(crate) fn queue_read(get: &crate::store::Get) -> Option<(QueueRecord, Version)> {
    match (get, crate::protocol::queue::classify_get(get)) {
        (crate::store::Get::Found(obj), Some(Classified::Queue(r))) => {
            Some((r, obj.version.clone()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn holder() -> Holder {
        Holder {
            id: "h1".into(),
            label: Some("gc".into()),
            pid: Some(7),
            ..Holder::default()
        }
    }

    fn lease_status(state: LeaseState, epoch: u64, acquired: bool) -> Status {
        Status {
            url: "file:///tmp/x".into(),
            state,
            epoch: Some(epoch),
            holder: Some(holder()),
            ttl: None,
            expires_in: None,
            data: None,
            acquired_at: acquired.then(|| "2026-11-24T08:00:00Z".into()),
            renewed_at: None,
            version: None,
            detail: None,
            queue: None,
            history: vec![],
            preempted: None,
        }
    }

    /// What `lease watch` says of each change: the record a lease's create makes (released,
    /// acquired by nobody) is `created`, and its take is the acquisition.
    #[test]
    fn a_watch_names_a_create_created_and_its_take_acquired() {
        use LeaseState::*;
        let free = Status {
            epoch: None,
            holder: None,
            acquired_at: None,
            ..lease_status(Free, 0, false)
        };
        let made = lease_status(Released, 5, false);
        let taken = lease_status(Held, 6, true);
        let released = lease_status(Released, 6, true);
        let other = lease_status(Held, 7, true);
        assert_eq!(free.transition(None), "initial");
        assert_eq!(made.transition(Some(&free)), "created");
        assert_eq!(taken.transition(Some(&made)), "acquired");
        assert_eq!(taken.transition(Some(&free)), "acquired");
        assert_eq!(released.transition(Some(&taken)), "released");
        assert_eq!(other.transition(Some(&released)), "acquired");
        assert_eq!(other.transition(Some(&taken)), "taken_over");
        assert_eq!(free.transition(Some(&other)), "deleted");
    }

    /// The one JSON shape every binding and `lease status --json` show: every key present,
    /// absent values null, durations in whole milliseconds.
    #[test]
    fn status_json_has_every_key_with_nulls_for_what_is_unknown() {
        let s = Status {
            url: "file:///tmp/x".into(),
            state: LeaseState::Held,
            epoch: Some(3),
            holder: Some(holder()),
            ttl: Some(Duration::from_millis(1500)),
            expires_in: None,
            data: None,
            acquired_at: Some("2026-11-24T08:00:00Z".into()),
            renewed_at: None,
            version: Some(Version {
                etag: "v".into(),
                generation: None,
            }),
            detail: None,
            queue: None,
            history: vec![],
            preempted: None,
        };
        assert_eq!(
            s.to_json(),
            json!({
                "url": "file:///tmp/x", "state": "held", "epoch": 3,
                "holder": {"id": "h1", "label": "gc", "host": null, "pid": 7, "user": null, "client": null},
                "ttl_ms": 1500, "expires_in_ms": null, "data": null,
                "acquired_at": "2026-11-24T08:00:00Z", "renewed_at": null, "detail": null,
                "permits": null, "holders": null, "departing": null, "waiting": null,
                "history": [], "preempted": null,
            })
        );
    }

    #[test]
    fn leader_json_nests_the_same_holder_shape() {
        let l = crate::Leader {
            holder: holder(),
            epoch: 9,
            data: Some("addr".into()),
        };
        assert_eq!(
            l.to_json(),
            json!({
                "holder": {"id": "h1", "label": "gc", "host": null, "pid": 7, "user": null, "client": null},
                "epoch": 9, "data": "addr",
            })
        );
    }
}
