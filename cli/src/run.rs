//! `lease run`: run a command only while holding a lease.
//!
//! The child runs in its own process group, so everything it starts can be stopped together.
//! Signals sent to `lease run` (INT, TERM, HUP) are passed on to that group; `lease run` then
//! waits for the child, releases the lease and exits with the child's status. If the lease is
//! lost, the group gets SIGTERM, then SIGKILL after --kill-after, and `lease run` exits with the
//! lost code.

use std::process::ExitStatus;
use std::time::Duration;

use lease::clock::{Clock, SystemClock};
use lease::{format_duration, Client, ErrorKind, Lease, LeaseOptions};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::exit::{self, Exit};
use crate::RunArgs;

/// The signals `lease run` catches and passes on.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> Result<Signals, Exit> {
        let sig = |kind| {
            signal(kind)
                .map_err(|e| Exit::fail(exit::INTERNAL, format!("cannot handle signals: {e}")))
        };
        Ok(Signals {
            int: sig(SignalKind::interrupt())?,
            term: sig(SignalKind::terminate())?,
            hup: sig(SignalKind::hangup())?,
        })
    }

    /// The next signal received, as its number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

fn kill_group(pgid: u32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-(pgid as i32), sig);
    }
}

/// A child's exit status as a shell reports it.
fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        _ => exit::INTERNAL,
    }
}

fn label_for(command: &[String]) -> String {
    let mut label = command.join(" ");
    if label.len() > 200 {
        let mut end = 200;
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        label.truncate(end);
        label.push('…');
    }
    label
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

async fn acquire(
    args: &RunArgs,
    client: &Client,
    key: &str,
    signals: &mut Signals,
) -> Result<Lease, Exit> {
    let mut opts = LeaseOptions::new(args.ttl).label(
        args.label
            .clone()
            .unwrap_or_else(|| label_for(&args.command)),
    );
    opts.data = args.data.clone();
    opts.wait = if args.no_wait {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    let cancel = CancellationToken::new();
    let acquiring = client.acquire_with_cancel(key, &opts, &cancel);
    tokio::pin!(acquiring);
    let mut interrupted_by = None;
    let result = loop {
        tokio::select! {
            r = &mut acquiring => break r,
            sig = signals.next(), if interrupted_by.is_none() => {
                // Let the acquire finish resolving any write it sent, then give up.
                interrupted_by = Some(sig);
                cancel.cancel();
            }
        }
    };
    result.map_err(|e| match e.kind() {
        ErrorKind::Held | ErrorKind::Timeout => Exit::fail(args.conflict_exit_code, e.to_string()),
        ErrorKind::Cancelled => Exit::code(128 + interrupted_by.unwrap_or(libc::SIGINT) as u8),
        _ => exit::from_error(&e),
    })
}

pub async fn run(args: RunArgs) -> Result<Exit, Exit> {
    let (client, key) = Client::for_url(&args.lease)?;
    let mut signals = Signals::new()?;
    let held = acquire(&args, &client, &key, &mut signals).await?;

    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LEASE_URL", held.url())
        .env("LEASE_EPOCH", held.epoch().to_string())
        .env("LEASE_TOKEN", held.token().to_string())
        .env("LEASE_HOLDER_ID", &held.holder().id)
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = held.release().await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::NOT_EXECUTABLE
            };
            return Err(Exit::fail(
                code,
                format!("cannot run {:?}: {e}", args.command[0]),
            ));
        }
    };
    let pgid = child.id().expect("a running child has a pid");

    let lost = held.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            sig = signals.next() => kill_group(pgid, sig),
            reason = &mut lost => {
                eprintln!(
                    "lease: lost {} (epoch {}): {reason}; stopping the command (SIGTERM, SIGKILL after {})",
                    held.url(), held.epoch(), format_duration(args.kill_after)
                );
                kill_group(pgid, libc::SIGTERM);
                let stopped = tokio::select! {
                    s = child.wait() => s.ok(),
                    _ = SystemClock.sleep(args.kill_after) => None,
                };
                if stopped.is_none() {
                    kill_group(pgid, libc::SIGKILL);
                    let _ = child.wait().await;
                }
                let _ = held.release().await; // tidies our record if nobody took it over
                return Ok(Exit::code(args.lost_exit_code));
            }
        }
    };
    let status = status
        .map_err(|e| Exit::fail(exit::INTERNAL, format!("cannot wait for the command: {e}")))?;
    // The command finished; was the lease still held when it did?
    let held_throughout = held.ensure_held(Duration::ZERO).is_ok();
    match held.release().await {
        Ok(()) => Ok(Exit::code(status_code(status))),
        Err(e) if e.kind() == ErrorKind::Lost || !held_throughout => Err(Exit::fail(
            args.lost_exit_code,
            format!("{e}; the command may have run without the lease at the end"),
        )),
        Err(e) => {
            // Held until the command ended; the record will expire by itself.
            eprintln!("lease: warning: could not release {}: {e}", held.url());
            Ok(Exit::code(status_code(status)))
        }
    }
}
