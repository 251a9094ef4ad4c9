//! A worker of the queued-lock history test (`tests/tests/queue_history.rs`), in Rust and as
//! the `lease` CLI's driver. It appends its history to LOG as JSON lines on CLOCK_MONOTONIC
//! (the events are listed in `lease_systests::history`); the Python and Node workers
//! (`tests/workers/`) do exactly the same from the same SPEC.
//!
//! ```text
//! lease-queue-worker run LOG SPEC    acquire, act, release, SPEC.iterations times, with the library
//! lease-queue-worker cli LOG SPEC    the same through `lease run` (SPEC.lease_bin), one per iteration
//! lease-queue-worker body LOG SPEC   the command `lease run` runs: it acts until done or killed
//! ```
//!
//! SPEC is one JSON object: `name`, `url`, `lock` (the lock's name in the history), `mode`
//! (`shared`, `exclusive`), `permits`, `scope` (`whole`, `path:P`, `range:A..B`), `queue`
//! (queue an exclusive request; else a plain lease), `ttl_ms`, `poll_ms`, `wait_ms`,
//! `iterations`, `hold_ms` (per grant, spread over `acts` acts), `pause_ms` (between
//! grants), `data` (the key of the data object), `role` (`reader`: reads it at each act;
//! `writer`: writes it with a fenced write at each act; `none`; a reader reads with
//! `Lease::fenced_read`, which fences what it read: issue 22 item 5), `gate` (a writer: at its
//! first act it writes, reads the version, prints `gate` and waits for a line on stdin, then
//! writes conditionally on that version without checking its belief again: the zombie of
//! issue 22 item 5), `rogue` (the negative control: it acts as if it held, without acquiring),
//! `mutant` (a negative control: the name of a `Mutant` brought back in this process; needs
//! the `languages` feature, which turns on the core's `negative-controls`), `go` (a file:
//! before its first request the worker makes one read of the lock's state, which builds its
//! client and opens its first connection, logs `ready` and waits until the file exists; the
//! round starts every worker's first request at once, on a machine done starting processes).

#![allow(clippy::disallowed_methods)] // a test worker in real time

use std::io::{BufRead, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::store::Version;
use lease::{Client, Lease, LeaseOptions, Scope};
use lease_systests::monotonic_ns;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize, Clone)]
struct Spec {
    name: String,
    url: String,
    lock: String,
    mode: String,
    permits: Option<u32>,
    scope: String,
    #[serde(default)]
    queue: bool,
    ttl_ms: u64,
    poll_ms: u64,
    #[serde(default = "default_wait")]
    wait_ms: u64,
    iterations: u32,
    hold_ms: u64,
    acts: u32,
    #[serde(default)]
    pause_ms: u64,
    data: Option<String>,
    #[serde(default)]
    role: String,
    #[serde(default)]
    gate: bool,
    /// The negative control: act as if granted (token 1) without acquiring anything.
    #[serde(default)]
    rogue: bool,
    /// A negative control: the bug of `core/src/protocol/mutants.rs` this process brings back.
    mutant: Option<String>,
    lease_bin: Option<String>,
    /// The round's start: wait until this file exists before the first request.
    go: Option<String>,
}

/// Log `ready`, then wait until the round's start (SPEC.go) exists. A worker that never sees
/// it gives up: the harness failed, and it must not hang.
fn wait_for_go(spec: &Spec, log: &Log) {
    let Some(go) = &spec.go else { return };
    log.now("ready", json!({}));
    let until = std::time::Instant::now() + Duration::from_secs(120);
    while !std::path::Path::new(go).exists() {
        if std::time::Instant::now() > until {
            fail(format!("the round's start {go} never came"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn default_wait() -> u64 {
    120_000
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("lease-queue-worker: {msg}");
    std::process::exit(2)
}

/// The worker's log: one JSON line per event, appended (O_APPEND: a `lease run` command and
/// its driver write to the same file).
#[derive(Clone)]
struct Log {
    path: String,
    name: String,
}

impl Log {
    fn at(&self, t: u64, ev: &str, fields: Value) {
        let mut v = json!({ "t": t, "w": self.name, "ev": ev });
        if let Value::Object(m) = fields {
            v.as_object_mut().unwrap().extend(m);
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .unwrap_or_else(|e| fail(format!("{}: {e}", self.path)));
        f.write_all(format!("{v}\n").as_bytes())
            .unwrap_or_else(|e| fail(e));
    }

    fn now(&self, ev: &str, fields: Value) {
        self.at(monotonic_ns(), ev, fields)
    }
}

impl Spec {
    fn request(&self) -> Value {
        json!({ "lock": self.lock, "mode": self.mode, "scope": self.scope,
                "permits": self.permits, "ttl_ms": self.ttl_ms, "poll_ms": self.poll_ms })
    }

    fn queued(&self) -> bool {
        self.queue || self.mode == "shared" || self.permits.is_some() || self.scope != "whole"
    }

    fn scope(&self) -> Option<Scope> {
        if let Some(p) = self.scope.strip_prefix("path:") {
            return Some(Scope::path(p).unwrap_or_else(|e| fail(e)));
        }
        let r = self.scope.strip_prefix("range:")?;
        Some(Scope::parse_range(r).unwrap_or_else(|e| fail(e)))
    }

    fn options(&self) -> LeaseOptions {
        let mut o = LeaseOptions::new(Duration::from_millis(self.ttl_ms))
            .wait(Duration::from_millis(self.wait_ms))
            .poll_interval(Duration::from_millis(self.poll_ms))
            .label(self.name.clone());
        if self.mode == "shared" {
            o = o.shared();
        }
        if let Some(n) = self.permits {
            o = o.permits(n);
        }
        if let Some(s) = self.scope() {
            o = o.scope(s);
        }
        if self.queue {
            o = o.queue();
        }
        o
    }

    /// `lease run`'s flags for this request.
    fn cli_flags(&self) -> Vec<String> {
        let mut f = vec![
            "--ttl".to_string(),
            format!("{}ms", self.ttl_ms),
            "--poll".into(),
            format!("{}ms", self.poll_ms),
            "--wait".into(),
            format!("{}ms", self.wait_ms),
            "--label".into(),
            self.name.clone(),
        ];
        if self.mode == "shared" && self.permits.is_none() {
            f.push("--shared".into());
        }
        if let Some(n) = self.permits {
            f.extend(["--permits".into(), n.to_string()]);
        }
        if let Some(p) = self.scope.strip_prefix("path:") {
            f.extend(["--scope".into(), p.to_string()]);
        }
        if let Some(r) = self.scope.strip_prefix("range:") {
            f.extend(["--range".into(), r.to_string()]);
        }
        if self.queue {
            f.push("--queue".into());
        }
        f
    }

    fn act_pause(&self) -> Duration {
        Duration::from_millis(self.hold_ms / u64::from(self.acts.max(1)))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, log, spec] = &args[..] else {
        fail("usage: lease-queue-worker run|cli|body LOG SPEC")
    };
    let spec: Spec = serde_json::from_str(spec).unwrap_or_else(|e| fail(format!("SPEC: {e}")));
    let log = Log {
        path: log.clone(),
        name: spec.name.clone(),
    };
    match mode.as_str() {
        "run" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(&spec, &log));
        }
        "cli" => cli(&spec, &log),
        "body" => body(&spec, &log),
        _ => fail("usage: lease-queue-worker run|cli|body LOG SPEC"),
    }
}

/// Log every renewal of the lease in `current` (a jump of its deadline) with its send time.
fn watch_renewals(current: Arc<Mutex<Option<Lease>>>, log: Log, ttl: Duration) {
    tokio::spawn(async move {
        let mut last_deadline = 0u64;
        loop {
            let lease = current.lock().unwrap().clone();
            match lease {
                Some(l) => {
                    let now = monotonic_ns();
                    let remaining = l.remaining();
                    if !remaining.is_zero() {
                        let deadline = now + remaining.as_nanos() as u64;
                        if deadline > last_deadline + 5_000_000 {
                            let t_send = deadline.saturating_sub(ttl.as_nanos() as u64);
                            log.at(now, "renewed", json!({ "t_send": t_send }));
                        }
                        last_deadline = last_deadline.max(deadline);
                    }
                }
                None => last_deadline = 0,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// Bring back the bug `name` of `core/src/protocol/mutants.rs` in this process.
fn bring_back(name: &str) {
    #[cfg(feature = "languages")]
    {
        use lease::protocol::mutants::{set, Mutant};
        let mutant = match name {
            "QueueHolderSkipsConfirmation" => Mutant::QueueHolderSkipsConfirmation,
            _ => fail(format!("mutant {name}: not one this worker knows")),
        };
        set(Some(mutant));
    }
    #[cfg(not(feature = "languages"))]
    fail(format!(
        "mutant {name}: built without the languages feature (no negative-controls)"
    ));
}

async fn run(spec: &Spec, log: &Log) {
    if let Some(m) = &spec.mutant {
        bring_back(m);
    }
    log.now(
        "start",
        json!({ "pid": std::process::id(), "lang": "rust", "gated": true }),
    );
    let (client, key) = Client::for_url(&spec.url).unwrap_or_else(|e| fail(e));
    let opts = spec.options();
    if spec.go.is_some() {
        // Warm: the client's first request (credentials, connection) before the clock runs.
        let _ = client.status(&key).await;
        let (spec, log) = (spec.clone(), log.clone());
        let _ = tokio::task::spawn_blocking(move || wait_for_go(&spec, &log)).await;
    }
    let current: Arc<Mutex<Option<Lease>>> = Arc::default();
    watch_renewals(
        current.clone(),
        log.clone(),
        Duration::from_millis(spec.ttl_ms),
    );
    for i in 0..spec.iterations {
        log.now("request", spec.request());
        if spec.rogue {
            log.now("grant", json!({ "token": 1, "queued": true }));
            for _ in 0..spec.acts {
                log.now("act", json!({}));
                tokio::time::sleep(spec.act_pause()).await;
            }
            log.now("end", json!({}));
            log.now("released", json!({ "outcome": "ok" }));
            continue;
        }
        let held = match client.acquire(&key, &opts).await {
            Ok(l) => l,
            Err(e) => {
                log.now(
                    "error",
                    json!({ "kind": e.kind().as_str(), "message": e.to_string() }),
                );
                tokio::time::sleep(Duration::from_millis(spec.pause_ms.max(100))).await;
                continue;
            }
        };
        log.now(
            "grant",
            json!({ "token": held.epoch(), "queued": held.grant().is_some() }),
        );
        *current.lock().unwrap() = Some(held.clone());
        hold(spec, log, &held, i).await;
        *current.lock().unwrap() = None;
        let outcome = match held.release().await {
            Ok(()) => "ok".to_string(),
            Err(e) => e.kind().as_str().to_string(),
        };
        log.now("released", json!({ "outcome": outcome }));
        tokio::time::sleep(Duration::from_millis(spec.pause_ms)).await;
    }
    log.now("done", json!({}));
}

/// What a holder does: `acts` times, check its belief, log it, read or write the data.
async fn hold(spec: &Spec, log: &Log, held: &Lease, iteration: u32) {
    for a in 0..spec.acts {
        let t = monotonic_ns();
        if held.ensure_held(Duration::ZERO).is_err() {
            let reason = held
                .lost_reason()
                .map_or("not held".to_string(), |r| r.to_string());
            log.now("lost", json!({ "reason": reason }));
            return;
        }
        log.at(t, "act", json!({}));
        if let Some(data) = &spec.data {
            match spec.role.as_str() {
                "reader" => {
                    // Readers fence what they read (issue 22 item 5): a stale writer's
                    // write cannot land under them.
                    let read = held.fenced_read(data).await;
                    log.now("read", read_fields(data, read));
                }
                "writer" if spec.gate && iteration == 0 && a == 0 => zombie(log, held, data).await,
                "writer" => {
                    let value = format!("{}:{}:{iteration}:{a}", spec.name, held.epoch());
                    let sent = monotonic_ns();
                    let r = held.fenced_put(data, value.clone()).await;
                    log_write(log, data, &value, sent, r.map(|_| ()), true);
                }
                _ => {}
            }
        }
        tokio::time::sleep(spec.act_pause()).await;
    }
    let t = monotonic_ns();
    if held.ensure_held(Duration::ZERO).is_ok() {
        log.at(t, "end", json!({}));
    } else {
        log.now("lost", json!({ "reason": "at the end" }));
    }
}

/// A `read` event: the value read (`null`: absent), or the error (it saw nothing).
fn read_fields(key: &str, read: lease::Result<Option<lease::FencedObject>>) -> Value {
    match read {
        Ok(o) => {
            let value = o.map(|o| String::from_utf8_lossy(&o.bytes).into_owned());
            json!({ "key": key, "value": value })
        }
        Err(e) => json!({ "key": key, "error": e.to_string() }),
    }
}

fn log_write(log: &Log, key: &str, value: &str, sent: u64, r: lease::Result<()>, checked: bool) {
    let outcome = match r {
        Ok(()) => "ok".to_string(),
        Err(e) => e.kind().as_str().to_string(),
    };
    log.now(
        "write",
        json!({ "key": key, "value": value, "outcome": outcome, "sent": sent,
                "checked": checked }),
    );
}

/// Issue 22 item 5: write, read the version, wait at the gate (where the test stops this
/// process past its ttl), then write conditionally on the version read, unchecked.
async fn zombie(log: &Log, held: &Lease, data: &str) {
    let first = format!("{}:{}:before", log.name, held.epoch());
    let sent = monotonic_ns();
    let r = held.fenced_put(data, first.clone()).await;
    log_write(log, data, &first, sent, r.map(|_| ()), true);
    let version: Option<Version> = match held.fenced_get(data).await {
        Ok(Some(o)) => Some(o.version),
        _ => None,
    };
    log.now("read", json!({ "key": data, "value": first }));
    println!("gate");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = tokio::task::spawn_blocking(move || std::io::stdin().lock().read_line(&mut line)).await;
    let value = format!("{}:{}:after-pause", log.name, held.epoch());
    let sent = monotonic_ns();
    let r = held
        .fenced_put_if(data, value.clone(), version.as_ref())
        .await;
    log_write(log, data, &value, sent, r.map(|_| ()), false);
}

/// The CLI worker: one `lease run` per iteration, with this program's `body` as its command.
fn cli(spec: &Spec, log: &Log) {
    log.now(
        "start",
        json!({ "pid": std::process::id(), "lang": "cli", "gated": false }),
    );
    let bin = spec
        .lease_bin
        .clone()
        .unwrap_or_else(|| fail("SPEC.lease_bin (the lease CLI) is needed"));
    let me = std::env::current_exe().unwrap();
    let spec_json = std::env::args().nth(3).unwrap();
    if spec.go.is_some() {
        // Warm: the CLI's first start (its pages read from disk), before the clock runs.
        let _ = std::process::Command::new(&bin)
            .args(["status", &spec.url])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        wait_for_go(spec, log);
    }
    for _ in 0..spec.iterations {
        log.now("request", spec.request());
        let out = std::process::Command::new(&bin)
            .arg("run")
            .args(spec.cli_flags())
            .args([&spec.url, "--"])
            .arg(&me)
            .args(["body", &log.path, &spec_json])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap_or_else(|e| fail(format!("{bin}: {e}")));
        let code = out.status.code();
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said.lines().last().unwrap_or("").to_string();
        // A grant shows as the body's lines; without one, the request failed.
        let granted = std::fs::read_to_string(&log.path)
            .unwrap_or_default()
            .lines()
            .next_back()
            .is_some_and(|l| !l.contains("\"ev\":\"request\""));
        match code {
            Some(0) => log.now("released", json!({ "outcome": "ok" })),
            _ if granted => log.now(
                "released",
                json!({ "outcome": format!("exit {code:?}: {last}") }),
            ),
            _ => log.now(
                "error",
                json!({ "kind": format!("exit {code:?}"), "message": last }),
            ),
        }
        std::thread::sleep(Duration::from_millis(spec.pause_ms));
    }
    log.now("done", json!({}));
}

/// `lease run`'s command: it holds while it runs (LEASE_EPOCH), acting without a check of its
/// own (its supervisor kills it when the grant is lost).
fn body(spec: &Spec, log: &Log) {
    let token: u64 = std::env::var("LEASE_EPOCH")
        .ok()
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| fail("LEASE_EPOCH is not set: run me under `lease run`"));
    log.now(
        "grant",
        json!({ "token": token, "queued": spec.queued(), "pid": std::process::id() }),
    );
    let reader = spec.role == "reader" && spec.data.is_some();
    let (rt, client, key) = if reader {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = std::env::var("LEASE_URL").unwrap_or_else(|_| spec.url.clone());
        let (client, key) = Client::for_url(&url).unwrap_or_else(|e| fail(e));
        (Some(rt), Some(client), key)
    } else {
        (None, None, String::new())
    };
    for _ in 0..spec.acts {
        log.now("act", json!({}));
        if let (Some(rt), Some(client), Some(data)) = (&rt, &client, &spec.data) {
            let object = lease::object_key(&key, data).unwrap_or_else(|e| fail(e));
            let read = rt.block_on(client.fenced_get(&format!("/{object}")));
            log.now("read", read_fields(data, read));
        }
        std::thread::sleep(spec.act_pause());
    }
    log.now("end", json!({}));
}
