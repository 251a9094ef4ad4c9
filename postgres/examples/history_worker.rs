//! The worker of the real-process histories (postgres/tests/history.py, which drives the
//! Python, Node and Go workers the same way). It holds a lease and runs OPS read-modify-write
//! transactions on a counter, each fenced on RESOURCE, and prints what happened to each:
//!
//! ```text
//! history_worker DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE
//!   PAUSE: none | before-fence | after-read | before-commit  (SIGSTOP itself there, first op)
//!   FENCE: fence | nofence                                    (nofence: the negative control)
//! env: LEASE_PG_TTL_MS (lease ttl, default 1000), LEASE_PG_IDLE_TIMEOUT_MS (the fence's
//!      idle_timeout), LEASE_PG_TOKEN (use this token and hold no lease), LEASE_PG_THINK_MS
//!      (sleep that long after the lease check, half as long after the read: where pauses
//!      hurt)
//! out: holding EPOCH TOKEN | paused PHASE | ack OP READ_N EPOCH | fenced OP EPOCH
//!      | lost OP | error OP KIND MESSAGE | done
//! ```

// A worker in real time, paused by real signals: not the protocol's injected clock.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::time::Duration;

use lease::{Client, ErrorKind, FencingToken, LeaseOptions};
use lease_postgres::{error, fence_with, FenceOptions};

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn pause(at: &str, wanted: &str, op: u32) {
    if op == 1 && at == wanted {
        say(format!("paused {at}"));
        // SAFETY: raise(2) stops this process until SIGCONT.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}

fn env_ms(name: &str) -> Option<Duration> {
    std::env::var(name)
        .ok()
        .map(|v| Duration::from_millis(v.parse().expect(name)))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dsn, url, resource, name, ops, at, fencing] = &args[..] else {
        eprintln!("usage: history_worker DSN LEASE_URL RESOURCE NAME OPS PAUSE FENCE");
        std::process::exit(64);
    };
    let ops: u32 = ops.parse().expect("OPS");
    let fenced = fencing == "fence";
    let (db, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let mut db = db;

    let held = match std::env::var("LEASE_PG_TOKEN") {
        Ok(_) => None,
        Err(_) => {
            let (client, key) = Client::for_url(url).expect("lease url");
            let ttl = env_ms("LEASE_PG_TTL_MS").unwrap_or(Duration::from_secs(1));
            let opts = LeaseOptions::new(ttl).wait_forever();
            Some(client.acquire(&key, &opts).await.expect("acquire"))
        }
    };
    let token: FencingToken = match &held {
        Some(l) => l.token(),
        None => std::env::var("LEASE_PG_TOKEN")
            .unwrap()
            .parse()
            .expect("LEASE_PG_TOKEN"),
    };
    say(format!("holding {} {token}", token.epoch()));
    let think = env_ms("LEASE_PG_THINK_MS").unwrap_or_default();
    let mut opts = FenceOptions::new();
    if let Some(idle) = env_ms("LEASE_PG_IDLE_TIMEOUT_MS") {
        opts = opts.idle_timeout(idle);
    }

    for i in 1..=ops {
        let op = format!("{name}-{i}");
        if let Some(l) = &held {
            if l.ensure_held(Duration::from_millis(100)).is_err() {
                say(format!("lost {op}"));
                std::process::exit(5);
            }
        }
        let result: lease::Result<i64> = async {
            tokio::time::sleep(think).await;
            let tx = db.transaction().await.map_err(error)?;
            pause(at, "before-fence", i);
            if fenced {
                fence_with(&tx, resource, &token, &opts).await?;
            }
            let read: i64 = tx
                .query_one("SELECT n FROM pg_counter WHERE id = $1", &[resource])
                .await
                .map_err(error)?
                .get(0);
            pause(at, "after-read", i);
            tokio::time::sleep(think / 2).await;
            tx.execute(
                "UPDATE pg_counter SET n = $1 WHERE id = $2",
                &[&(read + 1), resource],
            )
            .await
            .map_err(error)?;
            tx.execute(
                "INSERT INTO pg_history (op, worker, epoch, read_n, resource) \
                 VALUES ($1, $2, $3::text::numeric, $4, $5)",
                &[&op, name, &token.epoch().to_string(), &read, resource],
            )
            .await
            .map_err(error)?;
            pause(at, "before-commit", i);
            tx.commit().await.map_err(error)?;
            Ok(read)
        }
        .await;
        match result {
            Ok(read) => say(format!("ack {op} {read} {}", token.epoch())),
            Err(e) if e.kind() == ErrorKind::Fenced => {
                say(format!("fenced {op} {}", e.epoch().map_or(0, |e| e)));
                std::process::exit(3);
            }
            Err(e) => {
                say(format!(
                    "error {op} {} {}",
                    e.kind(),
                    e.to_string().replace('\n', " ")
                ));
                std::process::exit(4);
            }
        }
    }
    if let Some(l) = held {
        let _ = l.release().await;
    }
    say("done".into());
}
