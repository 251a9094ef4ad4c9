//! A worker process for the multi-process safety tests.
//!
//! ```text
//! lease-contender loop URL N HISTORY COUNTER [TTL_MS]
//!     N times: acquire URL; while holding it, read COUNTER, pause, write COUNTER + 1, and
//!     append "EPOCH START_NS END_NS PID" to HISTORY (CLOCK_MONOTONIC, shared by every process
//!     on this machine); release.
//! lease-contender hold URL TTL_MS
//!     acquire, print "held EPOCH", keep the lease (renewing) until killed.
//! lease-contender take URL TTL_MS
//!     acquire (waiting), print "took EPOCH BOOT_NS WALL_NS": when it acquired, on CLOCK_BOOTTIME
//!     (the file store's clock) and CLOCK_REALTIME (an S3 server's on this machine); release.
//! lease-contender step URL TTL_MS [queue|shared|range=A..B|path=P]…
//!     a worker driven line by line from stdin, answering each command with one line:
//!     `acquire` → `acquired EPOCH` (a queued lock's grant with the options given);
//!     `get KEY` → `got VERSION TEXT` (`-` for none); `read KEY` (fenced_read) → `read
//!     VERSION TEXT` or `err KIND`; `put KEY TEXT`, `put-if KEY VERSION TEXT` (`-`: must be
//!     absent), `append KEY ITEM` (fenced_update appending `,ITEM`) → `ok` or `err KIND`;
//!     `lost` → `lost KIND` (the loss its renewals learnt, `none` before one); `release` →
//!     `released`.
//! lease-contender append URL N OUTCOMES KEY TTL_MS HOLD_MS
//!     N times: acquire, wait HOLD_MS (a stretch of work, when a pause may strike), append
//!     `PID-I@EPOCH` to the list at KEY with fenced_update, write "PID-I@EPOCH ok|KIND" to
//!     OUTCOMES, release.
//! ```
//!
//! `LEASE_CONTENDER_PREEMPT=every-effect-fenced` makes its acquisitions preempt a live holder
//! (`Preempt::EveryEffectFenced`, docs/protocol.md §5); `LEASE_CONTENDER_QUEUE=1` makes them
//! queued (`LeaseOptions::queue`: a queued lock's grants, preempted by §10's rule).

use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use lease::clock::Clock;
use lease::store::Version;
use lease::{Client, FencedObject, Lease, LeaseOptions, Scope};

/// A clock in nanoseconds, comparable between processes on one machine.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("lease-contender: {msg}");
    std::process::exit(2)
}

fn options(ttl_ms: Option<&String>) -> LeaseOptions {
    let ttl = ttl_ms.map_or(5_000, |t| {
        t.parse().unwrap_or_else(|_| fail("TTL_MS is a number"))
    });
    let opts = LeaseOptions::new(Duration::from_millis(ttl)).wait(Duration::from_secs(600));
    // A test of the takeover rules' timing turns off the file store's dead-holder rule, which
    // takes over a killed holder on this machine at once (docs/protocol.md §4).
    let opts = match std::env::var("LEASE_CONTENDER_DEAD_HOLDER_RULE").as_deref() {
        Ok("off") => opts.dead_holder_rule(false),
        _ => opts,
    };
    let opts = match std::env::var("LEASE_CONTENDER_QUEUE").as_deref() {
        Ok("1") => opts.queue(),
        _ => opts,
    };
    match std::env::var("LEASE_CONTENDER_PREEMPT") {
        Ok(mode) => opts.preempt(mode.parse().unwrap_or_else(|e| fail(e))),
        Err(_) => opts,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or_default();
    let url = args
        .get(1)
        .unwrap_or_else(|| fail("usage: lease-contender loop|hold|take URL …"));
    let (client, key) = Client::for_url(url).unwrap_or_else(|e| fail(e));
    match mode {
        "loop" => {
            let n: u64 = args
                .get(2)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| fail("N is a number"));
            let history = args.get(3).unwrap_or_else(|| fail("HISTORY missing"));
            let counter = args.get(4).unwrap_or_else(|| fail("COUNTER missing"));
            let opts = options(args.get(5));
            for _ in 0..n {
                let held = client
                    .acquire(&key, &opts)
                    .await
                    .unwrap_or_else(|e| fail(e));
                let start = monotonic_ns();
                // The critical section: a deliberately non-atomic read-modify-write, so that two
                // holders at once would lose an increment.
                if held.ensure_held(Duration::from_secs(1)).is_ok() {
                    let value: u64 = std::fs::read_to_string(counter)
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0);
                    std::thread::sleep(Duration::from_micros(500 + (start % 1500)));
                    std::fs::write(counter, format!("{}\n", value + 1)).unwrap_or_else(|e| fail(e));
                    let end = monotonic_ns();
                    let line = format!("{} {start} {end} {}\n", held.epoch(), std::process::id());
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(history)
                        .unwrap_or_else(|e| fail(e));
                    f.write_all(line.as_bytes()).unwrap_or_else(|e| fail(e));
                }
                held.release().await.unwrap_or_else(|e| fail(e));
            }
        }
        "hold" => {
            let held = client
                .acquire(&key, &options(args.get(2)))
                .await
                .unwrap_or_else(|e| fail(e));
            println!("held {}", held.epoch());
            std::io::stdout().flush().unwrap();
            let reason = held.lost().await;
            fail(format!("lost: {reason}"));
        }
        "take" => {
            let held = client
                .acquire(&key, &options(args.get(2)))
                .await
                .unwrap_or_else(|e| fail(e));
            let (boot, wall) = (
                clock_ns(libc::CLOCK_BOOTTIME),
                clock_ns(libc::CLOCK_REALTIME),
            );
            println!("took {} {boot} {wall}", held.epoch());
            held.release().await.unwrap_or_else(|e| fail(e));
        }
        "step" => {
            let mut opts = options(args.get(2));
            for extra in args.iter().skip(3) {
                opts = match extra.split_once('=') {
                    None if extra == "queue" => opts.queue(),
                    None if extra == "shared" => opts.shared(),
                    Some(("range", r)) => {
                        opts.scope(Scope::parse_range(r).unwrap_or_else(|e| fail(e)))
                    }
                    Some(("path", p)) => opts.scope(Scope::path(p).unwrap_or_else(|e| fail(e))),
                    _ => fail(format!("unknown step option {extra:?}")),
                };
            }
            step(&client, &key, opts).await
        }
        "append" => {
            let n: u64 = args
                .get(2)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| fail("N is a number"));
            let outcomes = args.get(3).unwrap_or_else(|| fail("OUTCOMES missing"));
            let list = args.get(4).unwrap_or_else(|| fail("KEY missing"));
            let opts = options(args.get(5));
            let hold: u64 = args.get(6).and_then(|h| h.parse().ok()).unwrap_or(0);
            for i in 0..n {
                // A queued request whose session lapsed while it was stopped is removed from
                // the queue (`Lost`, "acquire again"; nothing ran under it): acquire again.
                let held = loop {
                    match client.acquire(&key, &opts).await {
                        Ok(held) => break held,
                        Err(e) if e.kind() == lease::ErrorKind::Lost => continue,
                        Err(e) => fail(e),
                    }
                };
                lease::clock::SystemClock
                    .sleep(Duration::from_millis(hold))
                    .await;
                let item = format!("{}-{i}@{}", std::process::id(), held.epoch());
                let outcome = match held.fenced_update(list, |old| appended(old, &item)).await {
                    Ok(_) => "ok".to_string(),
                    Err(e) => e.kind().to_string(),
                };
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(outcomes)
                    .unwrap_or_else(|e| fail(e));
                writeln!(f, "{item} {outcome}").unwrap_or_else(|e| fail(e));
                let _ = held.release().await;
            }
        }
        _ => fail("usage: lease-contender loop|hold|take|step|append URL …"),
    }
}

/// A list of items, comma-separated, with `item` appended.
fn appended(old: Option<&FencedObject>, item: &str) -> Bytes {
    let mut text = old.map_or(String::new(), |o| {
        String::from_utf8_lossy(&o.bytes).into_owned()
    });
    if !text.is_empty() {
        text.push(',');
    }
    text.push_str(item);
    Bytes::from(text)
}

/// The `step` worker: one command per line on stdin, one answer per line on stdout.
async fn step(client: &Client, key: &str, opts: LeaseOptions) {
    // Lines are read on a blocking thread: the runtime's workers keep renewing meanwhile.
    let next_line = || async {
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(n) if n > 0 => Some(line.trim_end().to_string()),
                _ => None,
            }
        })
        .await
        .ok()
        .flatten()
    };
    let mut held: Option<Lease> = None;
    let answer = |line: String| {
        println!("{line}");
        std::io::stdout().flush().unwrap();
    };
    let outcome = |r: lease::Result<Version>| match r {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("err {}", e.kind()),
    };
    while let Some(line) = next_line().await {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        let lease = || held.as_ref().unwrap_or_else(|| fail("no lease held"));
        match words.as_slice() {
            ["acquire"] => {
                let l = client.acquire(key, &opts).await.unwrap_or_else(|e| fail(e));
                answer(format!("acquired {}", l.epoch()));
                held = Some(l);
            }
            // KEY as `put` places it: beside the lease (read from the store's root, as a
            // client with no lease must).
            ["get", k] => match client
                .fenced_get(&format!(
                    "/{}",
                    lease::object_key(key, k).unwrap_or_else(|e| fail(e))
                ))
                .await
                .unwrap_or_else(|e| fail(e))
            {
                Some(o) => answer(format!(
                    "got {} {}",
                    o.version.etag,
                    String::from_utf8_lossy(&o.bytes)
                )),
                None => answer("got - -".into()),
            },
            ["read", k] => match lease().fenced_read(k).await {
                Ok(Some(o)) => answer(format!(
                    "read {} {}",
                    o.version.etag,
                    String::from_utf8_lossy(&o.bytes)
                )),
                Ok(None) => answer("read - -".into()),
                Err(e) => answer(format!("err {}", e.kind())),
            },
            ["put", k, text] => answer(outcome(lease().fenced_put(k, text.to_string()).await)),
            ["put-if", k, version, text] => {
                let expected = (*version != "-").then(|| Version::etag(*version));
                let r = lease()
                    .fenced_put_if(k, text.to_string(), expected.as_ref())
                    .await;
                answer(outcome(r))
            }
            ["append", k, item] => {
                let r = lease().fenced_update(k, |old| appended(old, item)).await;
                answer(outcome(r))
            }
            ["lost"] => answer(format!(
                "lost {}",
                lease().lost_reason().map_or("none", |r| r.kind())
            )),
            ["release"] => {
                if let Some(l) = held.take() {
                    let _ = l.release().await;
                }
                answer("released".into());
            }
            _ => fail(format!("unknown command {line:?}")),
        }
    }
}
