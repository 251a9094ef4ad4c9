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
//! ```

use std::io::Write;
use std::time::Duration;

use lease::{Client, LeaseOptions};

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
    LeaseOptions::new(Duration::from_millis(ttl)).wait(Duration::from_secs(600))
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
        _ => fail("usage: lease-contender loop|hold|take URL …"),
    }
}
