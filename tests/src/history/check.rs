//! The checks of a history (docs/verification.md, "Queued locks under faults, from the
//! workers' own logs"):
//!
//! 1. *Exclusion.* No two conflicting grants believed at once (one lock, overlapping scopes,
//!    one of them exclusive), and never more than `permits` shared grants over one point of a
//!    semaphore. A belief is what the holder logged: its grant, then each `act` and its `end`.
//!    The one excuse: an older holder whose acts are not checked against its belief (a
//!    `lease run` command) that was stopped together with its supervisor, or killed, before
//!    the newer grant began: its overlap is reported with its length, as docs/README say
//!    it may happen. And the bound docs/protocol.md §10 states for a deleted record: a holder
//!    of a queued lock whose record was deleted while it held believes at most `ttl/3 +
//!    ttl/6` (one renewal and one request timeout: half the ttl) past the deletion beside a
//!    newer grant (a newcomer that never saw the record makes it again and is granted at
//!    once), or its ttl when a reply about the lock was lost or late meanwhile; its overlap
//!    is reported with its length, and a belief past that bound (plus `slack`) is a
//!    violation.
//! 2. *Tokens.* Unique per lock, and increasing in grant order across conflicting grants.
//! 3. *Liveness.* Every request is served or fails for a reason the scenario expects; none is
//!    left waiting. Where no fault but deaths and pauses of other participants touched a wait,
//!    the grant came within the bound: once every earlier conflicting holder had gone (a live
//!    one released; a dead or stopped one's last renewal plus `ttl + grace + resolution +
//!    poll`), plus that bound again for each further dead participant ahead, plus `slack`.
//! 4. *Readers.* A grant that only reads sees the same data from its first read to its last.
//! 5. *Fencing.* A fenced write is refused (`fenced`) only when a grant with a higher token
//!    over an overlapping scope of the lock had begun: a live holder of a disjoint scope is
//!    never fenced.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::model::{Event, Grant, History, Kind, Mode, Request};

/// What the checks allow.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store clock's resolution: 1 s for HTTP dates (S3), 10 ms for the file store.
    pub resolution_ms: u64,
    /// Latencies of processes, scheduling and requests allowed on top of the bound.
    pub slack_ms: u64,
    /// Times in the report are counted from here (CLOCK_MONOTONIC ns; 0: printed as read).
    pub origin_ns: u64,
    /// Failed requests the scenario expects: a request whose `kind: message` contains one of
    /// these is not a violation (a worker stopped while it waited may always fail).
    pub allowed_errors: Vec<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            resolution_ms: 1000,
            slack_ms: 1500,
            origin_ns: 0,
            allowed_errors: vec![],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// `exclusion`, `tokens`, `liveness`, `readers`, `fencing`.
    pub check: &'static str,
    pub message: String,
}

/// What the checks found, with figures.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Overlaps allowed by the one excuse, each with its length.
    pub excused: Vec<String>,
    /// Notes: expected errors, waits that faults excused from the bound.
    pub notes: Vec<String>,
    pub workers: usize,
    pub requests: usize,
    pub grants: usize,
    /// Injected faults by kind.
    pub faults: BTreeMap<String, usize>,
    /// Waits held to the bound, and the largest time past the moment the lock was free
    /// (ms), with its bound.
    pub bounded_waits: usize,
    pub slowest: Option<(f64, f64, String)>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    fn violation(&mut self, check: &'static str, message: String) {
        self.violations.push(Violation { check, message });
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        writeln!(
            f,
            "{} workers, {} requests, {} grants; faults: {}; {} waits held to the bound{}",
            self.workers,
            self.requests,
            self.grants,
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(", ")
            },
            self.bounded_waits,
            self.slowest
                .as_ref()
                .map(|(late, bound, who)| format!(
                    " (slowest: {who} granted {late:.0} ms after the lock was free, bound \
                     {bound:.0} ms)"
                ))
                .unwrap_or_default()
        )?;
        for e in &self.excused {
            writeln!(f, "  excused: {e}")?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        if self.violations.is_empty() {
            writeln!(f, "  no violation")?;
        }
        for v in &self.violations {
            writeln!(f, "  VIOLATION ({}): {}", v.check, v.message)?;
        }
        Ok(())
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Check the history made of `events` (every worker's log and the injector's).
pub fn check(mut events: Vec<Event>, cfg: &Config) -> Report {
    for e in &mut events {
        e.t = e.t.saturating_sub(cfg.origin_ns);
        match &mut e.kind {
            Kind::Renewed { t_send } => *t_send = t_send.saturating_sub(cfg.origin_ns),
            Kind::Write { sent, .. } => *sent = sent.saturating_sub(cfg.origin_ns),
            _ => {}
        }
    }
    let mut r = Report::default();
    for e in &events {
        let kind = match &e.kind {
            Kind::Kill { .. } => "kill -9",
            Kind::Stop { .. } => "SIGSTOP",
            Kind::Net { .. } => "lost or late replies",
            Kind::Clock { .. } => "clock steps",
            Kind::DeleteRecord { .. } => "deleted records",
            Kind::DeleteSession { .. } => "deleted sessions",
            Kind::NewerFormat { .. } => "newer-format records",
            _ => continue,
        };
        *r.faults.entry(kind.to_string()).or_default() += 1;
    }
    let h = match History::build(events) {
        Ok(h) => h,
        Err(e) => {
            r.violation("history", e);
            return r;
        }
    };
    r.workers = h.workers.len();
    r.requests = h.requests.len();
    r.grants = h.grants.len();
    crashes(&h, &mut r);
    exclusion(&h, cfg, &mut r);
    tokens(&h, &mut r);
    liveness(&h, cfg, &mut r);
    readers(&h, &mut r);
    fencing(&h, &mut r);
    r
}

fn overlap(a: &Grant, b: &Grant) -> Option<u64> {
    let from = a.begin.max(b.begin);
    let to = a.last_belief.min(b.last_belief);
    (from < to).then(|| to - from)
}

/// What excuses an overlap of `older` with `newer`, if anything: a freeze of `older`'s
/// worker, or the deletion of the lock's record within the bound.
fn excuse(h: &History, cfg: &Config, older: &Grant, newer: &Grant) -> Option<String> {
    deletion(h, cfg, older, newer).or_else(|| frozen(h, older, newer))
}

/// The record of `older`'s queued lock deleted while it held, before `newer` began, and
/// `older`'s last belief within `ttl/2` (+ slack) of the deletion (docs/protocol.md §10,
/// "Whatever is deleted").
fn deletion(h: &History, cfg: &Config, older: &Grant, newer: &Grant) -> Option<String> {
    if !older.queued {
        return None;
    }
    let at = h.injected.iter().find_map(|e| match &e.kind {
        Kind::DeleteRecord { lock } if *lock == older.lock => {
            (older.begin <= e.t && e.t <= newer.begin).then_some(e.t)
        }
        _ => None,
    })?;
    // A lost or late reply about the lock meanwhile (its confirmation's read, say) lets the
    // holder believe on until its last confirmation's send + ttl: the lease's own bound.
    let faulted = h
        .injected
        .iter()
        .any(|e| matches!(e.kind, Kind::Net { .. }) && at <= e.t && e.t <= older.last_belief);
    let (bound, which) = if faulted {
        (
            older.ttl_ms * 1_000_000,
            "ttl, a reply about the lock lost or late meanwhile",
        )
    } else {
        (older.ttl_ms * 1_000_000 / 2, "ttl/2")
    };
    let past = older.last_belief.saturating_sub(at);
    (past <= bound + cfg.slack_ms * 1_000_000).then(|| {
        format!(
            "the record was deleted at {:.0} ms; {} believed {:.0} ms past it, bound {which} = \
             {:.0} ms",
            ms(at),
            older.worker,
            ms(past),
            ms(bound)
        )
    })
}

/// The freeze of `older`'s worker that excuses an overlap with `newer`, if any.
fn frozen(h: &History, older: &Grant, newer: &Grant) -> Option<String> {
    if older.gated {
        return None;
    }
    let w = h.workers.get(&older.worker)?;
    let f = w.frozen_within(older.begin, newer.begin)?;
    if f.what == "supervisor" {
        return None;
    }
    Some(match f.until {
        Some(c) => format!(
            "{} was stopped ({}) at {:.0} ms and continued at {:.0} ms",
            older.worker,
            f.what,
            ms(f.at),
            ms(c)
        ),
        None if f.what == "died" => format!("{} died at {:.0} ms", older.worker, ms(f.at)),
        None => format!("{} was killed at {:.0} ms", older.worker, ms(f.at)),
    })
}

/// A worker that died of itself: a crash of the library or its binding (or of the harness's
/// tools) until shown otherwise. Its death is then judged like a kill at its last event.
fn crashes(h: &History, r: &mut Report) {
    for (name, w) in &h.workers {
        if let Some(status) = &w.died {
            r.violation(
                "crash",
                format!(
                    "{name} died ({status}) with no fault injected; its last event at {:.0} ms",
                    ms(w.last_event)
                ),
            );
        }
    }
}

fn exclusion(h: &History, cfg: &Config, r: &mut Report) {
    let g = &h.grants;
    for i in 0..g.len() {
        for j in i + 1..g.len() {
            if !History::conflict(&g[i], &g[j]) {
                continue;
            }
            let Some(d) = overlap(&g[i], &g[j]) else {
                continue;
            };
            let (older, newer) = if (g[i].token, g[i].begin) <= (g[j].token, g[j].begin) {
                (&g[i], &g[j])
            } else {
                (&g[j], &g[i])
            };
            let what = format!(
                "{} believed from {:.0} to {:.0} ms and {} from {:.0} to {:.0} ms: {:.0} ms \
                 together",
                older.label(),
                ms(older.begin),
                ms(older.last_belief),
                newer.label(),
                ms(newer.begin),
                ms(newer.last_belief),
                ms(d)
            );
            match excuse(h, cfg, older, newer) {
                Some(why) => r.excused.push(format!("{what} ({why})")),
                None => r.violation(
                    "exclusion",
                    format!("two conflicting grants at once: {what}"),
                ),
            }
        }
    }
    // Semaphores: at each grant's beginning, count the shared grants over its scope.
    for a in g.iter().filter(|a| a.mode == Mode::Shared) {
        let Some(n) = a.permits else { continue };
        let at_once: Vec<&Grant> = g
            .iter()
            .filter(|b| {
                b.lock == a.lock
                    && b.mode == Mode::Shared
                    && b.scope.overlaps(&a.scope)
                    && b.begin <= a.begin
                    && a.begin < b.last_belief.max(b.begin + 1)
            })
            .collect();
        if at_once.len() > n as usize {
            let excused: Vec<String> = at_once
                .iter()
                .filter(|b| b.begin < a.begin)
                .filter_map(|b| excuse(h, cfg, b, a))
                .collect();
            let names: Vec<String> = at_once.iter().map(|b| b.label()).collect();
            let what = format!(
                "{} grants of a semaphore of {n} at once at {:.0} ms: {}",
                at_once.len(),
                ms(a.begin),
                names.join(", ")
            );
            if at_once.len() - excused.len() > n as usize {
                r.violation("exclusion", what);
            } else {
                r.excused.push(format!("{what} ({})", excused.join("; ")));
            }
        }
    }
}

fn tokens(h: &History, r: &mut Report) {
    let mut seen: BTreeMap<(&str, u64), &Grant> = BTreeMap::new();
    for g in &h.grants {
        if let Some(other) = seen.insert((&g.lock, g.token), g) {
            r.violation(
                "tokens",
                format!(
                    "token {} of {} handed out twice: {} and {}",
                    g.token,
                    g.lock,
                    other.label(),
                    g.label()
                ),
            );
        }
    }
    let g = &h.grants;
    for i in 0..g.len() {
        for j in 0..g.len() {
            let (a, b) = (&g[i], &g[j]);
            if i != j && History::conflict(a, b) && a.begin < b.begin && a.token > b.token {
                r.violation(
                    "tokens",
                    format!(
                        "tokens not in grant order: {} began at {:.0} ms, {} after it at {:.0} \
                         ms",
                        a.label(),
                        ms(a.begin),
                        b.label(),
                        ms(b.begin)
                    ),
                );
            }
        }
    }
}

/// `max(1 s, ttl/10)`, docs/protocol.md §4.
fn grace_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 10).max(1000)
}

/// The takeover bound for a participant of this ttl, seen by a waiter polling every `poll`.
fn bound_ns(ttl_ms: u64, poll_ms: u64, cfg: &Config) -> u64 {
    (ttl_ms + grace_ms(ttl_ms) + cfg.resolution_ms + poll_ms) * 1_000_000
}

/// Whether `req` and a grant `g` compete: one of them exclusive over overlapping scopes, or
/// both take permits of one semaphore.
fn competes(req: &Request, g_lock: &str, g_mode: Mode, g_scope: &super::Scope) -> bool {
    req.lock == g_lock
        && req.scope.overlaps(g_scope)
        && (req.mode == Mode::Exclusive || g_mode == Mode::Exclusive || req.permits.is_some())
}

/// When a fault other than the death or pause of a participant may have slowed a wait
/// `[from, to]` down: a lost or late reply to a request about the lock within one bound
/// (`window`) before or during it (the history holds only those of its lock), or a deletion
/// or a newer-format record on the lock before its end.
fn disturbed(h: &History, lock: &str, from: u64, to: u64, window: u64) -> Option<String> {
    h.injected.iter().find_map(|e| {
        let (what, window) = match &e.kind {
            Kind::Net { fault, method, key } => (format!("{fault} of {method} {key}"), window),
            Kind::DeleteRecord { lock: l } if l == lock => ("the record deleted".into(), u64::MAX),
            Kind::DeleteSession { lock: l, .. } if l == lock => {
                ("a session deleted".into(), u64::MAX)
            }
            Kind::NewerFormat { lock: l } if l == lock => {
                ("a newer-format record".into(), u64::MAX)
            }
            _ => return None,
        };
        (e.t <= to && from <= e.t.saturating_add(window))
            .then(|| format!("{what} at {:.0} ms", ms(e.t)))
    })
}

fn liveness(h: &History, cfg: &Config, r: &mut Report) {
    let max_ttl = h.requests.iter().map(|q| q.ttl_ms).max().unwrap_or(0);
    let max_poll = h.requests.iter().map(|q| q.poll_ms).max().unwrap_or(0);
    let window = bound_ns(max_ttl, max_poll, cfg);
    let slack = cfg.slack_ms * 1_000_000;
    for q in &h.requests {
        let worker = &h.workers[&q.worker];
        let Some(gi) = q.grant else {
            unserved(h, cfg, q, r);
            continue;
        };
        let mine = &h.grants[gi];
        let granted = mine.begin;
        // A plain lease is won by racing, in no order: only "served" holds for it, and for a
        // queued request that such a race got ahead of.
        let raced = !mine.queued
            || h.grants
                .iter()
                .any(|g| !g.queued && g.lock == q.lock && g.token < mine.token && g.begin >= q.at);
        if raced {
            r.notes.push(format!(
                "{}'s wait from {:.0} ms is not held to the bound: plain leases raced for the lock",
                q.worker,
                ms(q.at)
            ));
            continue;
        }
        if let Some(why) = disturbed(h, &q.lock, q.at, granted, window) {
            r.notes.push(format!(
                "{}'s wait from {:.0} ms is not held to the bound: {why}",
                q.worker,
                ms(q.at)
            ));
            continue;
        }
        if worker.frozen_within(q.at, granted).is_some() {
            continue; // it was paused itself while it waited
        }
        // Who was in its way, and when each was gone.
        let mut gone: Vec<u64> = vec![];
        let mut dead: Vec<String> = vec![];
        let mut extra = 0u64;
        let b_of = |ttl_ms| bound_ns(ttl_ms, q.poll_ms, cfg);
        for g in &h.grants {
            if g.lock != q.lock || g.token >= mine.token || !competes(q, &g.lock, g.mode, &g.scope)
            {
                continue;
            }
            let w = &h.workers[&g.worker];
            let end = g.released.unwrap_or(u64::MAX);
            let freeze = w.frozen_within(g.requested, granted).filter(|f| f.at < end);
            let t = match freeze {
                Some(f) => {
                    let died = w.last_life(f.at) + b_of(g.ttl_ms);
                    dead.push(format!(
                        "{} ({} at {:.0} ms, last renewal {:.0} ms)",
                        g.label(),
                        match (f.until, f.what.as_str()) {
                            (Some(_), _) => "stopped",
                            (None, "died") => "died",
                            (None, _) => "killed",
                        },
                        ms(f.at),
                        ms(w.last_life(f.at))
                    ));
                    end.min(died)
                }
                None if end == u64::MAX => continue, // held on past the log's end
                None => end + q.poll_ms * 1_000_000,
            };
            if t > q.at {
                gone.push(t);
            }
        }
        // Waiters that died before being served, ahead of it.
        for d in &h.requests {
            if d.lock != q.lock || d.at >= q.at || d.grant.is_some() {
                continue;
            }
            if !competes(q, &d.lock, d.mode, &d.scope) && !competes(d, &q.lock, q.mode, &q.scope) {
                continue;
            }
            let w = &h.workers[&d.worker];
            let Some(f) = w.frozen_within(d.at, granted) else {
                continue;
            };
            let died = w.last_life(f.at) + b_of(d.ttl_ms);
            if died > q.at {
                dead.push(format!(
                    "{} (a waiter, frozen at {:.0} ms)",
                    d.worker,
                    ms(f.at)
                ));
                gone.push(died);
            }
        }
        if dead.len() > 1 {
            extra = (dead.len() as u64 - 1) * b_of(max_ttl);
        }
        gone.sort_unstable();
        let free = match (q.mode, q.permits) {
            (Mode::Shared, Some(n)) if gone.len() >= n as usize => gone[gone.len() - n as usize],
            (Mode::Shared, Some(_)) => q.at,
            _ => gone.last().copied().unwrap_or(q.at),
        }
        .max(q.at);
        let deadline = free + extra + slack;
        r.bounded_waits += 1;
        let late = ms(granted.saturating_sub(free));
        let bound = ms(extra + slack);
        let who = format!("{} (token {})", q.worker, mine.token);
        if r.slowest.as_ref().is_none_or(|(l, ..)| late > *l) {
            r.slowest = Some((late, bound, who.clone()));
        }
        if granted > deadline {
            r.violation(
                "liveness",
                format!(
                    "{who} requested at {:.0} ms, free for it from {:.0} ms, granted at {:.0} \
                     ms: {late:.0} ms later, allowed {bound:.0} ms (dead ahead: {})",
                    ms(q.at),
                    ms(free),
                    ms(granted),
                    if dead.is_empty() {
                        "none".to_string()
                    } else {
                        dead.join(", ")
                    }
                ),
            );
        }
    }
}

/// A request never granted: fine if its worker died or was stopped meanwhile, or it failed
/// as the scenario expects; a violation if it was left waiting or failed otherwise.
fn unserved(h: &History, cfg: &Config, q: &Request, r: &mut Report) {
    let w = &h.workers[&q.worker];
    let end = q.error.as_ref().map_or(u64::MAX, |(t, ..)| *t);
    if let Some(f) = w.frozen_within(q.at, end) {
        if f.until.is_none() || q.error.is_some() {
            return; // killed while waiting, or failed after a pause
        }
    }
    let timed_out = h
        .injected
        .iter()
        .any(|e| matches!(&e.kind, Kind::Timeout { target } if *target == q.worker) && e.t >= q.at);
    match &q.error {
        Some((_, kind, message)) => {
            let said = format!("{kind}: {message}");
            if cfg.allowed_errors.iter().any(|a| said.contains(a.as_str())) {
                r.notes
                    .push(format!("{} failed as expected: {said}", q.worker));
            } else {
                r.violation(
                    "liveness",
                    format!(
                        "{}'s request at {:.0} ms failed: {said}",
                        q.worker,
                        ms(q.at)
                    ),
                );
            }
        }
        None if timed_out => r.violation(
            "liveness",
            format!(
                "{} requested {} at {:.0} ms and was still waiting when the run ended",
                q.worker,
                q.lock,
                ms(q.at)
            ),
        ),
        None => r.violation(
            "liveness",
            format!(
                "{}'s request at {:.0} ms has no outcome in its log (last event at {:.0} ms)",
                q.worker,
                ms(q.at),
                ms(w.last_event)
            ),
        ),
    }
}

fn readers(h: &History, r: &mut Report) {
    for g in &h.grants {
        if !g.writes.is_empty() {
            continue;
        }
        let Some((t0, first)) = g.reads.first() else {
            continue;
        };
        if let Some((t1, changed)) = g.reads.iter().find(|(_, v)| v != first) {
            let by = h
                .grants
                .iter()
                .flat_map(|w| w.writes.iter().map(move |x| (w, x)))
                .find(|(_, x)| Some(&x.value) == changed.as_ref())
                .map(|(w, x)| {
                    format!(
                        "; written to {} by {}, sent at {:.0} ms ({})",
                        x.key,
                        w.label(),
                        ms(x.sent),
                        x.outcome
                    )
                })
                .unwrap_or_default();
            let mut msg = String::new();
            let _ = write!(
                msg,
                "{} read {:?} at {:.0} ms and {:?} at {:.0} ms while it held{by}",
                g.label(),
                first,
                ms(*t0),
                changed,
                ms(*t1)
            );
            r.violation("readers", msg);
        }
    }
}

fn fencing(h: &History, r: &mut Report) {
    for g in &h.grants {
        for x in g.writes.iter().filter(|x| x.outcome == "fenced") {
            let newer = h.grants.iter().find(|o| {
                o.lock == g.lock
                    && o.token > g.token
                    && o.scope.overlaps(&g.scope)
                    && o.begin <= x.t
            });
            if newer.is_none() {
                r.violation(
                    "fencing",
                    format!(
                        "{}'s fenced write sent at {:.0} ms was refused, but no grant over an \
                         overlapping scope with a higher token had begun",
                        g.label(),
                        ms(x.sent)
                    ),
                );
            }
        }
    }
}
