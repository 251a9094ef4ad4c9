//! Wake hints on real stores, with the waiter in another process (docs/protocol.md §10, "Wake
//! hints"; issue 23): a release wakes its waiter by a hint over 127.0.0.1, and a hint sent to a
//! port nobody listens on costs nothing but the poll.
//!
//! The waiter is `lease-queue-bench wait` with a one-hour ttl and, for the first test, a
//! one-hour poll: nothing but a hint can wake it within the test (its poll is an hour away, and
//! it checks the holder's session only when a takeover rule could fire, over an hour away). On
//! S3 (moto, MinIO) there is no other wake-up (the file store's inotify would wake it too, so
//! the file store is measured by the benchmark, not proven here).

#![allow(clippy::disallowed_methods)] // real servers and processes in real time

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use lease::protocol::queue::{classify, Classified, QueueRecord};
use lease::store::{Cond, Get, GetOptions, Meta, Put, Version};
use lease::{Client, LeaseOptions};

fn servers() -> Vec<(&'static str, String)> {
    lease_systests::s3_servers()
}

const HOUR_S: u64 = 3600;

/// A waiter process: on "go" it acquires (exclusive, queued; hints on 127.0.0.1), prints
/// `acquired T`, releases, prints `done`.
struct Waiter {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Waiter {
    fn start(url: &str, poll_ms: u64) -> Waiter {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lease-queue-bench"))
            .args([
                "wait",
                url,
                "queue-hints",
                "0",
                &poll_ms.to_string(),
                &HOUR_S.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in stdout.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
        Waiter { child, lines }
    }

    /// The next line, waiting at most `bound` (a bound on the test, far below an hour).
    fn line(&self, bound: Duration) -> Option<String> {
        self.lines.recv_timeout(bound).ok()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The URL of a fresh lock on the store at `base` (`s3://bucket?query`).
fn lock_url(base: &str, what: &str) -> String {
    let key = format!(
        "wake-hints/{what}-{}-{}",
        std::process::id(),
        lease_systests::monotonic_ns()
    );
    match base.split_once('?') {
        Some((store, query)) => format!("{store}/{key}?{query}"),
        None => format!("{base}/{key}"),
    }
}

/// The lock's record and its version.
async fn record(client: &Client, key: &str) -> Option<(QueueRecord, Version)> {
    let opts = GetOptions {
        if_none_match: None,
        max_len: None,
    };
    match client.store().get(key, opts).await.ok()? {
        Get::Found(obj) => match classify(obj.bytes.as_deref()?) {
            Classified::Queue(r) => Some((r, obj.version)),
            _ => None,
        },
        _ => None,
    }
}

/// Wait (bounded: 30 s in 20 ms steps) until the record lists one waiter; return the record.
async fn joined(client: &Client, key: &str) -> (QueueRecord, Version) {
    for _ in 0..1500 {
        if let Some((r, v)) = record(client, key).await {
            if r.queue.len() == 1 {
                return (r, v);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the waiter never joined {key}");
}

fn holder_opts() -> LeaseOptions {
    LeaseOptions::new(Duration::from_secs(HOUR_S))
        .queue()
        .wait(Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_in_another_process_by_a_hint_long_before_its_poll() {
    for (name, base) in servers() {
        let url = lock_url(&base, "woken");
        let (client, key) = Client::for_url(&url).unwrap();
        let held = client.acquire(&key, &holder_opts()).await.unwrap();
        let w = Waiter::start(&url, HOUR_S * 1000);
        let (r, _) = joined(&client, &key).await;
        let wake = r.queue[0]
            .wake
            .clone()
            .expect("the waiter's entry has a wake address");
        assert!(
            wake.starts_with("udp:127.0.0.1:"),
            "{name}: a loopback address by default: {wake}"
        );
        held.release().await.unwrap();
        // Its poll and its first session check are an hour away: only the hint can wake it.
        let line = w.line(Duration::from_secs(60));
        assert!(
            line.as_deref().is_some_and(|l| l.starts_with("acquired ")),
            "{name}: the waiter was not woken by the release's hint: {line:?}"
        );
        assert_eq!(w.line(Duration::from_secs(60)).as_deref(), Some("done"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_to_a_port_nobody_listens_on_costs_only_the_poll() {
    for (name, base) in servers() {
        let url = lock_url(&base, "dropped");
        let (client, key) = Client::for_url(&url).unwrap();
        let held = client.acquire(&key, &holder_opts()).await.unwrap();
        // A 1 s poll: the fallback.
        let w = Waiter::start(&url, 1000);
        let (mut r, version) = joined(&client, &key).await;
        // Point the waiter's entry at a port nobody listens on (bound, then closed).
        let dead = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        r.queue[0].wake = Some(format!("udp:{dead}"));
        r.rev += 1;
        let put = client
            .store()
            .put(&key, r.to_bytes(), Cond::Match(version), &Meta::default())
            .await
            .unwrap();
        assert!(matches!(put, Put::Written { .. }), "{name}: {put:?}");
        // The release sends its hint into the void, and neither blocks nor fails.
        held.release().await.unwrap();
        let line = w.line(Duration::from_secs(60));
        assert!(
            line.as_deref().is_some_and(|l| l.starts_with("acquired ")),
            "{name}: the waiter did not fall back to its poll: {line:?}"
        );
        assert_eq!(w.line(Duration::from_secs(60)).as_deref(), Some("done"));
    }
}

/// **(changed, issue 23: fewer GETs per waiter)** A process whose waiter was granted by a hint
/// on a lock polls that lock's record at the renew interval on its next wait, not at the default
/// poll (docs/protocol.md §10, "Wake hints": hints trusted). The holder is another process
/// (`lease-queue-bench wait`, holding 8 s; a release in this process would wake the waiter
/// locally, which tells nothing of hints); the waiter's reads are counted at a proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_saw_a_hint_bring_a_grant_polls_the_record_at_the_renew_interval() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    for (name, base) in servers() {
        let url = lock_url(&base, "long-poll");
        let (observer, key) = Client::for_url(&url).unwrap();
        let (proxy, store) = lease_systests::proxy::proxied(&base).await;
        let record_reads = Arc::new(AtomicU64::new(0));
        let (counting, record_key) = (record_reads.clone(), key.clone());
        proxy.set_intercept(Some(Arc::new(
            move |r: &lease_systests::proxy::Request, upstream: Option<u16>| {
                let session = r.target.contains(".q/") || r.target.contains(".q%2F");
                if upstream.is_none()
                    && r.method == "GET"
                    && r.target.contains(&*record_key)
                    && !session
                {
                    counting.fetch_add(1, Ordering::SeqCst);
                }
                None
            },
        )));
        let waiter = Client::new(store);
        // ttl 6 s (the holder's too): the default poll is 600 ms, the renew interval 2 s.
        let opts = LeaseOptions::new(Duration::from_secs(6))
            .queue()
            .wait(Duration::from_secs(60));
        let mut reads = vec![];
        for _ in 0..2 {
            let mut holder = Command::new(env!("CARGO_BIN_EXE_lease-queue-bench"))
                .args(["wait", &url, "queue-hints", "8000", "-", "6"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = BufReader::new(holder.stdout.take().unwrap());
            writeln!(holder.stdin.as_mut().unwrap(), "go").unwrap();
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert!(
                line.starts_with("acquired "),
                "{name}: the holder: {line:?}"
            );
            let wait = {
                let (c, k, o) = (waiter.clone(), key.clone(), opts.clone());
                tokio::spawn(async move { c.acquire(&k, &o).await })
            };
            joined(&observer, &key).await;
            record_reads.store(0, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(5)).await;
            reads.push(record_reads.load(Ordering::SeqCst));
            wait.await.unwrap().unwrap().release().await.unwrap();
            let _ = holder.kill();
            let _ = holder.wait();
        }
        eprintln!("{name}: reads of the record in 5 s of waiting, fresh then hinted: {reads:?}");
        // Fresh: every 600 ms ± 20% (about 8); after the hint: every 2 s (about 3).
        assert!(
            reads[1] * 2 <= reads[0],
            "{name}: the waiter polled as often after a hint brought its grant: {reads:?}"
        );
    }
}
