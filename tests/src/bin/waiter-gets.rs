//! GETs per waiter per second while it waits on a held queued lock, and what the long poll of
//! issue 23 costs the hand-over and the failover (docs/benchmarks.md, "Fewer GETs per waiter").
//!
//! `lease-waiter-gets URL [SECONDS]` (default 60): one waiter in this process, its requests
//! counted at a pass-through proxy by key (the lock's record, sessions, anything else), waits
//! four times on a lock another process holds (ttl 30 s, default poll 2 s, wake hints on
//! 127.0.0.1), in this order:
//! 1. `fresh, kill`: no hint seen yet for the lock in this process; after SECONDS the holder is
//!    killed with SIGKILL: the failover (kill to grant).
//! 2. `fresh, release`: the holder releases: the hand-over (release start to grant). The grant
//!    a hint brings is what this process remembers (`hints_seen_after`).
//! 3. `hinted, release`: the same with hints seen: the record is polled at the renew interval.
//! 4. `hinted, kill`: the failover with hints seen.
//!
//! Each line of output is one JSON object: the requests counted over the SECONDS of waiting
//! (from 3 s after the wait began, so the join and the first checks are not counted), GETs per
//! second, and the latency of the end.

#![allow(clippy::disallowed_methods)] // a benchmark measures real time

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::{Client, LeaseOptions, WakeHints};
use lease_systests::proxy::{proxied, Request};

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn options() -> LeaseOptions {
    LeaseOptions::new(Duration::from_secs(30))
        .wait(Duration::from_secs(600))
        .queue()
        .wake_hints(WakeHints::Loopback)
}

/// `hold URL`: acquire; print "acquired"; on "release", print "releasing T", release, print
/// "done".
async fn hold(url: &str) {
    let (client, key) = Client::for_url(url).expect("url");
    let held = client.acquire(&key, &options()).await.expect("acquire");
    println!("acquired");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    println!("releasing {}", mono_ns());
    held.release().await.expect("release");
    println!("done");
}

struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Holder {
    fn start(url: &str) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["hold", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut l = String::new();
        stdout.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "acquired", "the holder did not acquire");
        Holder {
            child,
            stdin,
            stdout,
        }
    }

    /// Release; the moment the release began.
    fn release(&mut self) -> u64 {
        writeln!(self.stdin, "release").unwrap();
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        l.trim()
            .strip_prefix("releasing ")
            .expect("releasing T")
            .parse()
            .unwrap()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Requests by (what, kind): what is `record`, `session` or `other`.
type Tally = Arc<Mutex<BTreeMap<(String, String), u64>>>;

fn gets(t: &BTreeMap<(String, String), u64>, what: &str) -> u64 {
    t.iter()
        .filter(|((w, k), _)| w == what && k == "GET")
        .map(|(_, n)| n)
        .sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("hold") {
        return hold(&args[2]).await;
    }
    let Some(url) = args.get(1) else {
        eprintln!("usage: lease-waiter-gets URL [SECONDS]");
        std::process::exit(64);
    };
    let secs: u64 = args.get(2).map_or(60, |s| s.parse().expect("SECONDS"));
    let (_, key) = Client::for_url(url).expect("url");
    // The store's URL (the bucket's): the lease URL without its key.
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let scheme = base.find("://").expect("a URL") + 3;
    let bucket = base[scheme..]
        .find('/')
        .map_or(base, |i| &base[..scheme + i]);
    let (proxy, store) = proxied(&format!("{bucket}?{query}")).await;
    let tally: Tally = Arc::default();
    let counting = tally.clone();
    let record_key = key.clone();
    proxy.set_intercept(Some(Arc::new(move |r: &Request, upstream: Option<u16>| {
        if upstream.is_none() {
            let what = if r.target.contains(".q/") || r.target.contains(".q%2F") {
                "session"
            } else if r.target.contains(&*record_key) {
                "record"
            } else {
                "other"
            };
            *counting
                .lock()
                .unwrap()
                .entry((what.to_string(), r.method.clone()))
                .or_default() += 1;
        }
        None
    })));
    let client = Client::new(store);
    for (label, kill) in [
        ("fresh, kill", true),
        ("fresh, release", false),
        ("hinted, release", false),
        ("hinted, kill", true),
    ] {
        let mut holder = Holder::start(url);
        let (c, k) = (client.clone(), key.clone());
        let wait = tokio::spawn(async move {
            let held = c.acquire(&k, &options()).await.expect("acquire");
            (mono_ns(), held)
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        tally.lock().unwrap().clear();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let counted = tally.lock().unwrap().clone();
        let from = if kill {
            let t = mono_ns();
            let _ = holder.child.kill();
            let _ = holder.child.wait();
            t
        } else {
            holder.release()
        };
        let (granted, held) = wait.await.unwrap();
        let ms = granted.saturating_sub(from) as f64 / 1e6;
        held.release().await.expect("release");
        drop(holder);
        let requests: BTreeMap<String, u64> = counted
            .iter()
            .map(|((w, k), n)| (format!("{w} {k}"), *n))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "url": url, "wait": label, "seconds": secs,
                "gets_per_s": {
                    "record": gets(&counted, "record") as f64 / secs as f64,
                    "session": gets(&counted, "session") as f64 / secs as f64,
                    "other": gets(&counted, "other") as f64 / secs as f64,
                },
                "requests": requests,
                if kill { "failover_ms" } else { "handoff_ms" }: ms,
            })
        );
    }
}
