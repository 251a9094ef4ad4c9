//! The events of a history, and what they add up to: the requests, the grants (each with the
//! interval its holder believed it held), the workers and what the injector did to them.
//! Scopes and their overlaps are written here again on purpose, apart from the library's: a
//! checker that shared the library's idea of a conflict could not catch a mistake in it.

use std::collections::BTreeMap;

use serde_json::Value;

/// Exclusive (a writer, or a plain lease) or shared (a reader, or a permit of a semaphore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Exclusive,
    Shared,
}

/// What part of a lock a grant covers: `whole`, `path:a/b`, `range:START..END`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Whole,
    Path(String),
    Range(u64, u64),
}

impl Scope {
    pub fn parse(s: &str) -> Result<Scope, String> {
        if s == "whole" {
            return Ok(Scope::Whole);
        }
        if let Some(p) = s.strip_prefix("path:") {
            return Ok(Scope::Path(p.trim_matches('/').to_string()));
        }
        if let Some(r) = s.strip_prefix("range:") {
            let (a, b) = r
                .split_once("..")
                .ok_or_else(|| format!("bad range {s:?}"))?;
            let a = a.parse().map_err(|_| format!("bad range {s:?}"))?;
            let b = b.parse().map_err(|_| format!("bad range {s:?}"))?;
            return Ok(Scope::Range(a, b));
        }
        Err(format!("unknown scope {s:?}"))
    }

    /// Whether two grants of these scopes may touch the same thing. A path and a range are
    /// taken to overlap (docs/protocol.md §10).
    pub fn overlaps(&self, other: &Scope) -> bool {
        match (self, other) {
            (Scope::Whole, _) | (_, Scope::Whole) => true,
            (Scope::Path(a), Scope::Path(b)) => {
                let under = |x: &str, y: &str| x == y || x.starts_with(&format!("{y}/"));
                under(a, b) || under(b, a)
            }
            (Scope::Range(a, b), Scope::Range(c, d)) => a < d && c < b,
            _ => true,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Whole => f.write_str("whole"),
            Scope::Path(p) => write!(f, "path:{p}"),
            Scope::Range(a, b) => write!(f, "range:{a}..{b}"),
        }
    }
}

/// One line of a log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `CLOCK_MONOTONIC`, nanoseconds.
    pub t: u64,
    /// The worker that wrote it, or `injector`.
    pub w: String,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Start {
        pid: u32,
        lang: String,
        gated: bool,
    },
    Request {
        lock: String,
        mode: Mode,
        scope: Scope,
        permits: Option<u32>,
        ttl_ms: u64,
        poll_ms: u64,
    },
    Grant {
        token: u64,
        queued: bool,
    },
    Renewed {
        t_send: u64,
    },
    Act,
    Read {
        key: String,
        value: Option<String>,
        /// The read failed (the store did not answer): it saw nothing.
        error: Option<String>,
    },
    Write {
        key: String,
        value: String,
        outcome: String,
        sent: u64,
        checked: bool,
    },
    End,
    Released {
        outcome: String,
    },
    Lost {
        reason: String,
    },
    Error {
        kind: String,
        message: String,
    },
    Done,
    Kill {
        target: String,
    },
    Stop {
        target: String,
        what: String,
    },
    Cont {
        target: String,
    },
    Net {
        fault: String,
        method: String,
        key: String,
    },
    Clock {
        target: String,
        offset_ms: i64,
    },
    DeleteRecord {
        lock: String,
    },
    DeleteSession {
        lock: String,
        id: String,
    },
    NewerFormat {
        lock: String,
    },
    Timeout {
        target: String,
    },
    /// A worker the harness found exited of itself (no kill of its own, no timeout) with an
    /// unsuccessful `status`: a crash, judged like a kill at its last event.
    Died {
        target: String,
        status: String,
    },
    /// An event this checker does not know: kept, ignored.
    Other(String),
}

fn text(v: &Value, k: &str) -> Result<String, String> {
    match v.get(k) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        _ => Err(format!("no {k:?}")),
    }
}

fn num(v: &Value, k: &str) -> Result<u64, String> {
    // Numbers from JavaScript may come as strings (BigInt), or as floats.
    match v.get(k) {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().map(|f| f as u64))
            .ok_or_else(|| format!("{k:?} is not a count")),
        Some(Value::String(s)) => s.parse().map_err(|_| format!("{k:?} is not a number")),
        _ => Err(format!("no {k:?}")),
    }
}

impl Event {
    pub fn parse(line: &str) -> Result<Event, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let t = num(&v, "t")?;
        let w = text(&v, "w")?;
        let ev = text(&v, "ev")?;
        let s = |k| text(&v, k);
        let kind = match ev.as_str() {
            "start" => Kind::Start {
                pid: num(&v, "pid")? as u32,
                lang: s("lang")?,
                gated: v.get("gated").and_then(Value::as_bool).unwrap_or(true),
            },
            "request" => Kind::Request {
                lock: s("lock")?,
                mode: match s("mode")?.as_str() {
                    "shared" => Mode::Shared,
                    "exclusive" => Mode::Exclusive,
                    m => return Err(format!("unknown mode {m:?}")),
                },
                scope: Scope::parse(&s("scope")?)?,
                permits: num(&v, "permits").ok().map(|p| p as u32),
                ttl_ms: num(&v, "ttl_ms")?,
                poll_ms: num(&v, "poll_ms")?,
            },
            "grant" => Kind::Grant {
                token: num(&v, "token")?,
                queued: v.get("queued").and_then(Value::as_bool).unwrap_or(true),
            },
            "renewed" => Kind::Renewed {
                t_send: num(&v, "t_send")?,
            },
            "act" => Kind::Act,
            "read" => Kind::Read {
                key: s("key")?,
                value: v.get("value").and_then(Value::as_str).map(str::to_string),
                error: v.get("error").and_then(Value::as_str).map(str::to_string),
            },
            "write" => Kind::Write {
                key: s("key")?,
                value: s("value")?,
                outcome: s("outcome")?,
                sent: num(&v, "sent")?,
                checked: v.get("checked").and_then(Value::as_bool).unwrap_or(true),
            },
            "end" => Kind::End,
            "released" => Kind::Released {
                outcome: s("outcome")?,
            },
            "lost" => Kind::Lost {
                reason: s("reason").unwrap_or_default(),
            },
            "error" => Kind::Error {
                kind: s("kind")?,
                message: s("message").unwrap_or_default(),
            },
            "done" => Kind::Done,
            "kill" => Kind::Kill {
                target: s("target")?,
            },
            "stop" => Kind::Stop {
                target: s("target")?,
                what: s("what").unwrap_or_else(|_| "process".into()),
            },
            "cont" => Kind::Cont {
                target: s("target")?,
            },
            "net" => Kind::Net {
                fault: s("fault")?,
                method: s("method").unwrap_or_default(),
                key: s("key").unwrap_or_default(),
            },
            "clock" => Kind::Clock {
                target: s("target")?,
                offset_ms: v
                    .get("offset_ms")
                    .and_then(Value::as_i64)
                    .ok_or("no offset_ms")?,
            },
            "delete-record" => Kind::DeleteRecord { lock: s("lock")? },
            "delete-session" => Kind::DeleteSession {
                lock: s("lock")?,
                id: s("id").unwrap_or_default(),
            },
            "newer-format" => Kind::NewerFormat { lock: s("lock")? },
            "timeout" => Kind::Timeout {
                target: s("target")?,
            },
            "died" => Kind::Died {
                target: s("target")?,
                status: s("status").unwrap_or_default(),
            },
            other => Kind::Other(other.to_string()),
        };
        Ok(Event { t, w, kind })
    }
}

/// A request, and how it ended.
#[derive(Debug, Clone)]
pub struct Request {
    pub worker: String,
    pub lock: String,
    pub mode: Mode,
    pub scope: Scope,
    pub permits: Option<u32>,
    pub ttl_ms: u64,
    pub poll_ms: u64,
    pub at: u64,
    /// Index into [`History::grants`].
    pub grant: Option<usize>,
    /// The error it ended with, if any: (when, kind, message).
    pub error: Option<(u64, String, String)>,
}

/// A grant as its holder lived it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub worker: String,
    pub lock: String,
    pub token: u64,
    pub mode: Mode,
    pub scope: Scope,
    pub permits: Option<u32>,
    pub ttl_ms: u64,
    pub requested: u64,
    /// When the acquire returned.
    pub begin: u64,
    /// The last instant the holder believed it held (its last `act` or `end`, else `begin`).
    pub last_belief: u64,
    /// When its holder let go: its release returned, or it noticed the loss; `None` if it
    /// died holding (or the log stops).
    pub released: Option<u64>,
    /// Whether it is a grant of a queued lock (false: a plain lease, won by racing).
    pub queued: bool,
    /// Whether its acts were checked against the holder's belief (false for a `lease run`
    /// command, which acts until its supervisor kills it).
    pub gated: bool,
    pub reads: Vec<(u64, Option<String>)>,
    pub writes: Vec<Write>,
}

#[derive(Debug, Clone)]
pub struct Write {
    pub t: u64,
    pub sent: u64,
    pub key: String,
    pub value: String,
    pub outcome: String,
}

impl Grant {
    pub fn label(&self) -> String {
        format!(
            "{} (token {}, {} {})",
            self.worker,
            self.token,
            match self.mode {
                Mode::Exclusive => "exclusive",
                Mode::Shared => "shared",
            },
            self.scope
        )
    }
}

/// A stop and its continue, from the injector's log.
#[derive(Debug, Clone)]
pub struct Stop {
    pub at: u64,
    pub until: Option<u64>,
    /// `process` (a worker that holds in its own process), `supervisor` (a `lease run`
    /// alone), `all` (a `lease run` with its watchdog and command).
    pub what: String,
}

/// A worker process, as its own log and the injector's tell.
#[derive(Debug, Clone, Default)]
pub struct Worker {
    pub lang: String,
    pub gated: bool,
    pub killed: Option<u64>,
    /// How it died of itself (`Kind::Died`), if it did.
    pub died: Option<String>,
    pub stops: Vec<Stop>,
    /// `t_send` of every renewal it saw, in order.
    pub renewals: Vec<u64>,
    /// Its last event of any kind.
    pub last_event: u64,
    pub ttl_ms: u64,
}

impl Worker {
    /// Every stretch in which it could not renew: each stop (until its continue) and its
    /// death (`what` = `kill`, for good; `died` when it died of itself, from its last
    /// event), in time order.
    pub fn freezes(&self) -> Vec<Stop> {
        let mut all = self.stops.clone();
        if let Some(k) = self.killed {
            all.push(Stop {
                at: k,
                until: None,
                what: "kill".into(),
            });
        } else if self.died.is_some() {
            all.push(Stop {
                at: self.last_event,
                until: None,
                what: "died".into(),
            });
        }
        all.sort_by_key(|s| s.at);
        all
    }

    /// The first freeze that began within `[from, to]`.
    pub fn frozen_within(&self, from: u64, to: u64) -> Option<Stop> {
        self.freezes()
            .into_iter()
            .find(|s| from <= s.at && s.at <= to)
    }

    /// The send time of the last write that kept it alive before `frozen` (its last
    /// renewal), or `frozen` itself when a renewal after the last one logged may have been
    /// sent unseen (its renewals are due every ttl/3 after the last one's send).
    pub fn last_life(&self, frozen: u64) -> u64 {
        let renew_ns = self.ttl_ms * 1_000_000 / 3;
        match self.renewals.iter().rev().find(|&&r| r <= frozen) {
            // Renewals are sent at last_send + ttl/3; allow 10% for the scheduler.
            Some(&r) if frozen < r + renew_ns * 9 / 10 => r,
            _ => frozen,
        }
    }
}

/// Everything the logs tell.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub requests: Vec<Request>,
    pub grants: Vec<Grant>,
    pub workers: BTreeMap<String, Worker>,
    /// The injector's events, in time order.
    pub injected: Vec<Event>,
}

impl History {
    pub fn build(mut events: Vec<Event>) -> Result<History, String> {
        // Per worker, its own order is its log's; across workers, time.
        events.sort_by_key(|e| e.t);
        let mut h = History::default();
        let mut current: BTreeMap<String, (usize, Option<usize>)> = BTreeMap::new();
        for e in events {
            if e.w == "injector" {
                h.apply_injected(&e);
                h.injected.push(e);
                continue;
            }
            let worker = h.workers.entry(e.w.clone()).or_default();
            worker.last_event = worker.last_event.max(e.t);
            let cur = current.get(&e.w).copied();
            let gi = cur.and_then(|(_, g)| g);
            match e.kind {
                Kind::Start { lang, gated, .. } => {
                    worker.lang = lang;
                    worker.gated = gated;
                }
                Kind::Request {
                    lock,
                    mode,
                    scope,
                    permits,
                    ttl_ms,
                    poll_ms,
                } => {
                    worker.ttl_ms = ttl_ms;
                    h.requests.push(Request {
                        worker: e.w.clone(),
                        lock,
                        mode,
                        scope,
                        permits,
                        ttl_ms,
                        poll_ms,
                        at: e.t,
                        grant: None,
                        error: None,
                    });
                    current.insert(e.w.clone(), (h.requests.len() - 1, None));
                }
                Kind::Grant { token, queued } => {
                    let (r, _) =
                        cur.ok_or_else(|| format!("{}: a grant without a request", e.w))?;
                    let req = &h.requests[r];
                    let gated = worker.gated;
                    h.grants.push(Grant {
                        worker: e.w.clone(),
                        lock: req.lock.clone(),
                        token,
                        mode: req.mode,
                        scope: req.scope.clone(),
                        permits: req.permits,
                        ttl_ms: req.ttl_ms,
                        requested: req.at,
                        begin: e.t,
                        last_belief: e.t,
                        released: None,
                        queued,
                        gated,
                        reads: vec![],
                        writes: vec![],
                    });
                    let g = h.grants.len() - 1;
                    h.requests[r].grant = Some(g);
                    current.insert(e.w.clone(), (r, Some(g)));
                }
                Kind::Renewed { t_send } => worker.renewals.push(t_send),
                Kind::Act | Kind::End => {
                    if let Some(g) = gi.map(|g| &mut h.grants[g]) {
                        g.last_belief = g.last_belief.max(e.t);
                    }
                }
                Kind::Read {
                    value, error: None, ..
                } => {
                    if let Some(g) = gi.map(|g| &mut h.grants[g]) {
                        g.reads.push((e.t, value));
                    }
                }
                Kind::Write {
                    key,
                    value,
                    outcome,
                    sent,
                    ..
                } => {
                    if let Some(g) = gi.map(|g| &mut h.grants[g]) {
                        g.writes.push(Write {
                            t: e.t,
                            sent,
                            key,
                            value,
                            outcome,
                        });
                    }
                }
                Kind::Released { .. } | Kind::Lost { .. } => {
                    if let Some(g) = gi.map(|g| &mut h.grants[g]) {
                        g.released.get_or_insert(e.t);
                    }
                }
                Kind::Error { kind, message } => {
                    if let Some((r, None)) = cur {
                        h.requests[r].error = Some((e.t, kind, message));
                    }
                }
                _ => {}
            }
        }
        Ok(h)
    }

    fn apply_injected(&mut self, e: &Event) {
        match &e.kind {
            Kind::Kill { target } => {
                let w = self.workers.entry(target.clone()).or_default();
                w.killed.get_or_insert(e.t);
            }
            Kind::Died { target, status } => {
                let w = self.workers.entry(target.clone()).or_default();
                w.died.get_or_insert(status.clone());
            }
            Kind::Stop { target, what } => {
                self.workers
                    .entry(target.clone())
                    .or_default()
                    .stops
                    .push(Stop {
                        at: e.t,
                        until: None,
                        what: what.clone(),
                    });
            }
            Kind::Cont { target } => {
                if let Some(s) = self
                    .workers
                    .entry(target.clone())
                    .or_default()
                    .stops
                    .iter_mut()
                    .rev()
                    .find(|s| s.until.is_none())
                {
                    s.until = Some(e.t);
                }
            }
            _ => {}
        }
    }

    /// Whether `a` and `b` may not be held at once: one lock, overlapping scopes, and one of
    /// them exclusive (a semaphore's shared grants are counted instead).
    pub fn conflict(a: &Grant, b: &Grant) -> bool {
        a.lock == b.lock
            && a.scope.overlaps(&b.scope)
            && (a.mode == Mode::Exclusive || b.mode == Mode::Exclusive)
    }
}
