//! Queued locks against today's exclusive lease, in one run (docs/benchmarks.md "Queued locks").
//!
//! `lease-queue-bench URL ROUNDS [POLL_MS]` prints one JSON line per mode (`lease`: the exclusive lease;
//! `queue`: the same exclusive request on a queued lock):
//! - `handoff_ms`: from the moment the holder starts its release to the moment the next
//!   holder's acquire returns, the waiter being another process that has waited 200 ms to
//!   2.2 s, spread evenly over the rounds (median, p90 over ROUNDS);
//! - `in_order` and `grants_per_s`: ten other processes arrive one by one while the lock is
//!   held, then it is released and each takes it once (holding 10 ms): the share of grants
//!   that went to the earliest arrival still waiting, and grants per second from the release
//!   to the last grant. On a queued lock each arrives once the one before is listed as
//!   waiting, so the order of arrivals is the order their joins landed in, the order FIFO
//!   promises (told to go 50 ms apart, processes on a loaded machine had their joins land out
//!   of that order, which the share counted against the queue); the lease's waiters are not
//!   in its record, so they arrive 50 ms apart.
//!
//! `queue-hints`: the same queued lock, its waiters listening for wake hints on 127.0.0.1
//! (`queue` has them off: the waiter learns of its grant at its next poll).
//!
//! `release_ms`: the holder's release call alone (the write that hands over, and the hints
//! sent after it), so that a slow hand-over says whether its time went to the store's write.
//!
//! `POLL_MS` sets every waiter's poll interval (default: ttl/10 within 50 ms..2 s, so 2 s).
//! `LEASE_BENCH_MODES=queue` (or `lease`) runs only that mode: the lease's hand-over waits for
//! a poll, so its rounds take seconds each, where the queue's take milliseconds.
//!
//! Waiters are separate processes (this binary in `wait` mode), so no in-process wake-up helps
//! either side: what a waiter sees is what another machine would see. Times are
//! `CLOCK_MONOTONIC`, shared by every process on this machine.

#![allow(clippy::disallowed_methods)] // a benchmark measures real time

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use lease::{Client, LeaseOptions, WakeHints};
use lease_systests::monotonic_ns;

/// Every waiter's poll interval, when given (the waiter processes get it as an argument).
static POLL_MS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();

/// The ttl (30 s unless a `wait` process is given one: tests/tests/wake_hints.rs gives an hour,
/// so that neither a poll nor a session check can wake its waiter before a hint does).
static TTL_S: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

fn poll_arg() -> String {
    POLL_MS
        .get()
        .copied()
        .flatten()
        .map_or("-".into(), |p| p.to_string())
}

fn options(mode: &str) -> LeaseOptions {
    let ttl = Duration::from_secs(TTL_S.get().copied().unwrap_or(30));
    let mut opts = LeaseOptions::new(ttl).wait(Duration::from_secs(60));
    opts.poll_interval = POLL_MS.get().copied().flatten().map(Duration::from_millis);
    match mode {
        // Today's queued lock: the waiter learns of its grant at its next poll.
        "queue" => opts.queue().wake_hints(WakeHints::Off),
        // Woken by the releaser's hint over 127.0.0.1 (docs/protocol.md §10, "Wake hints").
        "queue-hints" => opts.queue().wake_hints(WakeHints::Loopback),
        _ => opts,
    }
}

/// `wait URL MODE HOLD_MS POLL_MS [TTL_S]`: on "go", acquire; print "acquired T TOKEN"; hold; release; print "done".
async fn waiter(url: &str, mode: &str, hold_ms: u64) {
    let (client, key) = Client::for_url(url).expect("url");
    let stdin = std::io::stdin();
    let mut line = String::new();
    while stdin.lock().read_line(&mut line).unwrap() > 0 {
        if line.trim() == "go" {
            let held = client.acquire(&key, &options(mode)).await.expect("acquire");
            println!("acquired {} {}", monotonic_ns(), held.epoch());
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            held.release().await.expect("release");
            println!("done");
        }
        line.clear();
    }
}

struct Waiter {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Waiter {
    fn start(url: &str, mode: &str, hold_ms: u64) -> Waiter {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["wait", url, mode, &hold_ms.to_string(), &poll_arg()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Waiter {
            child,
            stdin,
            stdout,
        }
    }

    fn go(&mut self) {
        writeln!(self.stdin, "go").unwrap();
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "a waiter died");
        l.trim().to_string()
    }

    fn acquired_at(&mut self) -> u64 {
        let l = self.line();
        if debug() {
            eprintln!("{l}");
        }
        let t = l.strip_prefix("acquired ").expect("acquired T TOKEN");
        t.split(' ').next().unwrap().parse().unwrap()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `LEASE_BENCH_DEBUG=1`: each round's times, and every process's debug log (timed by
/// `CLOCK_MONOTONIC`, as the rounds are) on standard error.
fn debug() -> bool {
    std::env::var_os("LEASE_BENCH_DEBUG").is_some()
}

/// Log lines carry the monotonic clock in ns, comparable across the bench's processes.
struct MonoTime;

impl tracing_subscriber::fmt::time::FormatTime for MonoTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", monotonic_ns())
    }
}

/// With `LEASE_BENCH_DEBUG`, the library's own debug lines (not its HTTP client's), timed as
/// the rounds are.
fn log_lease_debug() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    if debug() {
        let only_lease =
            tracing_subscriber::filter::Targets::new().with_target("lease", tracing::Level::DEBUG);
        let layer = tracing_subscriber::fmt::layer()
            .with_timer(MonoTime)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            // Each store request's span, closed, with its time: which request was slow.
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_filter(only_lease);
        tracing_subscriber::registry().with(layer).init();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `{median, p90, p99}` of sorted times.
fn percentiles(sorted: &[f64]) -> serde_json::Value {
    serde_json::json!({
        "median": percentile(sorted, 0.5),
        "p90": percentile(sorted, 0.9),
        "p99": percentile(sorted, 0.99),
    })
}

/// Hand-overs and, beside them, the holder's release calls (the write that hands over): where
/// a slow hand-over's time went, to the store's write or after it (both sorted, in ms).
async fn handoff(
    client: &Client,
    key: &str,
    url: &str,
    mode: &str,
    rounds: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut w = Waiter::start(url, mode, 0);
    let (mut ms, mut release_ms) = (vec![], vec![]);
    for round in 0..rounds {
        let held = client.acquire(key, &options(mode)).await.expect("acquire");
        w.go();
        // Spread the release over the waiter's poll interval (2 s at the default ttl), so a
        // polling waiter's latency is sampled at every phase of its poll.
        let spread = 200 + (round as u64 * 2000 / rounds as u64);
        tokio::time::sleep(Duration::from_millis(spread)).await;
        let t_release = monotonic_ns();
        held.release().await.expect("release");
        let t_released = monotonic_ns();
        let t_acquired = w.acquired_at();
        assert_eq!(w.line(), "done");
        let (total, release) = (
            t_acquired.saturating_sub(t_release) as f64 / 1e6,
            t_released.saturating_sub(t_release) as f64 / 1e6,
        );
        if debug() {
            eprintln!("round {round}: hand-over {total:.1} ms, the release call {release:.1} ms (began at {t_release}, returned at {t_released})");
        }
        ms.push(total);
        release_ms.push(release);
    }
    ms.sort_by(f64::total_cmp);
    release_ms.sort_by(f64::total_cmp);
    (ms, release_ms)
}

/// Wait until the queued lock at `key` lists `n` waiters (bounded: 10 s).
async fn listed(client: &Client, key: &str, n: usize) {
    for _ in 0..500 {
        let status = client.status(key).await.expect("status");
        if status.queue.is_some_and(|q| q.waiting.len() >= n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{key}: waiter {n} was not listed within 10 s");
}

/// (share of grants in arrival order, grants per second) for ten waiters.
async fn contenders(client: &Client, key: &str, url: &str, mode: &str) -> (f64, f64) {
    let mut ws: Vec<Waiter> = (0..10).map(|_| Waiter::start(url, mode, 10)).collect();
    // Let every waiter's process start before the clock of arrivals begins.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = client.acquire(key, &options(mode)).await.expect("acquire");
    for (i, w) in ws.iter_mut().enumerate() {
        w.go();
        if mode == "lease" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        } else {
            listed(client, key, i + 1).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t_release = monotonic_ns();
    held.release().await.expect("release");
    let mut grants: Vec<(u64, usize)> = ws
        .iter_mut()
        .enumerate()
        .map(|(i, w)| (w.acquired_at(), i))
        .collect();
    grants.sort();
    let in_order = grants
        .iter()
        .enumerate()
        .filter(|(n, (_, i))| n == i)
        .count();
    let last = grants.last().unwrap().0;
    let per_s = grants.len() as f64 / ((last - t_release) as f64 / 1e9);
    (in_order as f64 / grants.len() as f64, per_s)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    log_lease_debug();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("wait") {
        POLL_MS.set(args[5].parse().ok()).unwrap();
        if let Some(ttl) = args.get(6) {
            TTL_S.set(ttl.parse().expect("TTL_S is a number")).unwrap();
        }
        return waiter(&args[2], &args[3], args[4].parse().unwrap()).await;
    }
    if args.len() < 3 {
        eprintln!("usage: lease-queue-bench URL ROUNDS");
        std::process::exit(64);
    }
    let rounds: usize = args[2].parse().expect("ROUNDS is a number");
    POLL_MS
        .set(args.get(3).map(|p| p.parse().expect("POLL_MS is a number")))
        .unwrap();
    let only = std::env::var("LEASE_BENCH_MODES").ok();
    for mode in ["lease", "queue", "queue-hints"] {
        if only
            .as_deref()
            .is_some_and(|m| !m.split(',').any(|m| m == mode))
        {
            continue;
        }
        // One key per mode: a lease record and a queued lock's record.
        let url = match args[1].split_once('?') {
            Some((base, query)) => format!("{base}-{mode}?{query}"),
            None => format!("{}-{mode}", args[1]),
        };
        let (client, key) = Client::for_url(&url).expect("url");
        let (ms, release_ms) = handoff(&client, &key, &url, mode, rounds).await;
        let (mut orders, mut rates) = (vec![], vec![]);
        for _ in 0..3 {
            let (o, r) = contenders(&client, &key, &url, mode).await;
            orders.push(o);
            rates.push(r);
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({
                "url": url, "mode": mode, "rounds": rounds,
                "poll_ms": POLL_MS.get().copied().flatten(),
                "handoff_ms": percentiles(&ms),
                "release_ms": percentiles(&release_ms),
                "in_order": orders.iter().sum::<f64>() / orders.len() as f64,
                "grants_per_s": rates[1],
            })
        );
    }
}
