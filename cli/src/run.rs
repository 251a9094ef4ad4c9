//! `lease run`: run a command only while holding a lease.
//!
//! The command runs under a reaper (`reaper.rs`) in a process group of its own, so everything
//! it starts can be stopped together, and it dies with `lease run` whatever kills `lease run`.
//! Signals sent to `lease run` (INT, TERM, HUP) are passed on to that group; `lease run` then
//! waits for the command, releases the lease and exits with the command's status.
//!
//! The command must be dead before the lease's deadline, after which another holder may start:
//! - a loss (a break, a takeover, the deadline passed): SIGKILL at once;
//! - renewals late (the store is slow or unreachable): SIGTERM when `kill-after + margin` is
//!   left, SIGKILL `margin` before the deadline (the reaper's fuse), even if a late renewal
//!   lands in between: stopping, once begun, is not taken back;
//! - `lease run` itself stopped (SIGSTOP) or starved, so it cannot act: the reaper's fuse still
//!   sends SIGKILL `margin` before the last deadline it was given.
//!
//! Job control: Ctrl-Z (SIGTSTP) stops the command's group, then `lease run` itself; once
//! continued, `lease run` continues the command only if the lease is still held with more than
//! `kill-after + margin` left (after giving the renewal that was due while it was stopped a
//! chance), and otherwise kills it and exits with the lost code. Stopping with the command
//! rather than refusing keeps Ctrl-Z/`fg`/`bg` working as users expect, and the command never
//! runs while its supervisor cannot renew. SIGTTIN and SIGTTOU are refused (blocked, see
//! [`refuse_terminal_stops`]).

use std::io::Write;
use std::time::Duration;

use lease::clock::{Clock, SystemClock};
use lease::options::{default_kill_after, longest_kill_after, stop_margin, Timing};
use lease::{format_duration, Client, ErrorKind, Lease, LeaseOptions, Scope};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::exit::{self, Exit};
use crate::health::HealthFile;
use crate::reaper::{boot_clock, kill_group, Reaper, Report};
use crate::RunArgs;

/// A line on stderr that cannot fail (a closed stderr must not stop the supervisor).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), "lease: {}", format_args!($($arg)*));
    }};
}

/// Block SIGTTIN and SIGTTOU in every thread of `lease run` (call before any thread starts).
///
/// The kernel sends them to a background process that reads or writes its terminal. `lease run`
/// never reads the terminal, and it must be able to write that it lost the lease while in the
/// background (with `stty tostop`), not stop there and leave its command to the reaper's fuse.
/// The command, in its own process group, still gets its own SIGTTIN/SIGTTOU, which stop only
/// the command: the safe direction. Blocked rather than ignored: children inherit ignored
/// signals, while Rust's process spawning clears the blocked mask in every child.
pub fn refuse_terminal_stops() {
    // SAFETY: building a signal set and changing this thread's mask; no memory is shared.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTIN);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// What a signal to `lease run` asks for.
enum Event {
    /// Pass this signal on to the command's group.
    Forward(i32),
    /// Ctrl-Z: stop, together with the command.
    Suspend,
}

/// The signals `lease run` catches.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
    tstp: Signal,
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
            tstp: sig(SignalKind::from_raw(libc::SIGTSTP))?,
        })
    }

    async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.int.recv() => Event::Forward(libc::SIGINT),
            _ = self.term.recv() => Event::Forward(libc::SIGTERM),
            _ = self.hup.recv() => Event::Forward(libc::SIGHUP),
            _ = self.tstp.recv() => Event::Suspend,
        }
    }
}

/// Stop this process as SIGTSTP's default action would, then put tokio's handler back.
///
/// Re-raised with the default action rather than SIGSTOP, so the shell sees an ordinary
/// Ctrl-Z, and so that in an orphaned process group (no shell left to continue it) the kernel
/// discards the stop, as it does for any program. `raise` targets this thread, which stops
/// before `raise` returns; it returns once the process is continued.
fn stop_self() {
    // SAFETY: sigaction(2) with valid structs, saved and restored around raise(3).
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        let mut saved: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTSTP, &default, &mut saved);
        libc::raise(libc::SIGTSTP);
        libc::sigaction(libc::SIGTSTP, &saved, std::ptr::null_mut());
    }
}

/// When `lease run` stops its command, relative to the lease's deadline.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// SIGKILL lands at least this long before the deadline: time for the reaper to wake and
    /// for the processes to die.
    margin: Duration,
    /// SIGTERM this long before that SIGKILL when renewals are late.
    kill_after: Duration,
    /// How often the reaper's copy of the deadline is brought up to date.
    sync_every: Duration,
}

impl Limits {
    fn new(timing: &Timing, kill_after: Option<Duration>) -> Result<Limits, Exit> {
        let ttl = timing.ttl;
        let margin = stop_margin(ttl);
        // A renewal is due when ttl − renew is left and may take a whole request timeout;
        // stopping must not begin before that, or a healthy command would be stopped.
        let longest = longest_kill_after(ttl, timing.renew, timing.request_timeout);
        let kill_after = match kill_after {
            None => default_kill_after(ttl, timing.renew, timing.request_timeout),
            Some(k) if k > longest => {
                return Err(Exit::fail(
                    exit::USAGE,
                    format!(
                        "--kill-after {} is too long for --ttl {}: use at most {}, or a longer \
                         ttl (SIGTERM goes out when kill-after + {} is left before the lease's \
                         deadline, and must wait for a renewal, due at {} left, to have a whole \
                         request timeout of {})",
                        format_duration(k),
                        format_duration(ttl),
                        format_duration(longest),
                        format_duration(margin),
                        format_duration(ttl.saturating_sub(timing.renew)),
                        format_duration(timing.request_timeout),
                    ),
                ))
            }
            Some(k) => k,
        };
        Ok(Limits {
            margin,
            kill_after,
            sync_every: (timing.renew / 4).max(Duration::from_millis(5)),
        })
    }

    /// SIGTERM when no more than this is left.
    fn term_at(&self) -> Duration {
        self.kill_after + self.margin
    }
}

/// The lease's deadline on the boot clock, never later than the holder's own.
fn deadline_of(held: &Lease) -> Duration {
    // Read first: `remaining()` reads the same clock later, so the sum is at or before it.
    let now = boot_clock();
    now + held.remaining()
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

fn lease_options(args: &RunArgs) -> Result<LeaseOptions, Exit> {
    let mut opts = LeaseOptions::new(args.ttl).label(
        args.label
            .clone()
            .unwrap_or_else(|| label_for(&args.command)),
    );
    if args.shared {
        opts = opts.shared();
    }
    if let Some(n) = args.permits {
        opts = opts.permits(n);
    }
    if let Some(path) = &args.scope {
        opts = opts.scope(Scope::path(path)?);
    }
    if let Some(range) = &args.range {
        opts = opts.scope(Scope::parse_range(range)?);
    }
    if args.queue {
        opts = opts.queue();
    }
    if let Some(n) = args.priority {
        opts = opts.priority(n);
    }
    if args.ask_yield {
        opts = opts.ask_yield(args.yield_reason.as_deref());
    }
    opts.poll_interval = args.poll;
    if let Some(hints) = args.wake_hints {
        opts.wake_hints = hints;
    }
    if let Some(preempt) = args.preempt {
        opts = opts.preempt(preempt);
    }
    // Health turns `unknown` when the command gets SIGTERM (kill-after + margin left).
    opts.kill_after = args.kill_after;
    opts.data = args.data.clone();
    opts.unavailable_timeout = args.unavailable_timeout;
    opts.wait = if args.no_wait {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    Ok(opts)
}

async fn acquire(
    args: &RunArgs,
    client: &Client,
    key: &str,
    opts: &LeaseOptions,
    signals: &mut Signals,
) -> Result<Lease, Exit> {
    let cancel = CancellationToken::new();
    let acquiring = client.acquire_with_cancel(key, opts, &cancel);
    tokio::pin!(acquiring);
    let mut interrupted_by = None;
    let result = loop {
        tokio::select! {
            r = &mut acquiring => break r,
            event = signals.next() => match event {
                // No command yet: Ctrl-Z stops only this process.
                Event::Suspend => stop_self(),
                Event::Forward(sig) => if interrupted_by.is_none() {
                    // Let the acquire finish resolving any write it sent, then give up.
                    interrupted_by = Some(sig);
                    cancel.cancel();
                }
            }
        }
    };
    result.map_err(|e| match e.kind() {
        ErrorKind::Held | ErrorKind::Timeout | ErrorKind::QueueFull => {
            Exit::fail(args.conflict_exit_code, e.to_string())
        }
        ErrorKind::Cancelled => Exit::code(128 + interrupted_by.unwrap_or(libc::SIGINT) as u8),
        _ => exit::from_error(&e),
    })
}

pub async fn run(args: RunArgs) -> Result<Exit, Exit> {
    let (client, key) = Client::for_url(&args.lease)?;
    let opts = lease_options(&args)?;
    let limits = Limits::new(
        &opts.timing(&client.store().capabilities())?,
        args.kill_after,
    )?;
    let metrics = match args.metrics {
        Some(addr) => Some(crate::metrics::Server::start(addr).await?),
        None => None,
    };
    let result = run_held(&args, &client, &key, opts, limits).await;
    if let (Some(server), Some(bound)) = (&metrics, args.metrics_linger) {
        server.linger(bound).await;
    }
    result
}

async fn run_held(
    args: &RunArgs,
    client: &Client,
    key: &str,
    mut opts: LeaseOptions,
    limits: Limits,
) -> Result<Exit, Exit> {
    let mut signals = Signals::new()?;
    // The reaper first, so that the lease's record names it: a waiter on this machine takes
    // the lease over early only once this process and the reaper, which outlives the command,
    // are both gone (docs/protocol.md §4).
    let cannot_start = |e: std::io::Error| {
        Exit::fail(
            exit::INTERNAL,
            format!("cannot start the command's reaper: {e}"),
        )
    };
    let mut reaper = Reaper::spawn(&args.command, limits.margin).map_err(cannot_start)?;
    opts.companion_pids = reaper.pid().into_iter().collect();
    let held = match acquire(args, client, key, &opts, &mut signals).await {
        Ok(held) => held,
        Err(e) => {
            reaper.abandon().await;
            return Err(e);
        }
    };
    // Paused between acquiring and starting: do not start on a lease about to run out.
    if let Err(e) = held.ensure_held(limits.term_at()) {
        let _ = held.release().await;
        reaper.abandon().await;
        return Err(Exit::fail(
            args.lost_exit_code,
            format!("{e}; the command was not started"),
        ));
    }

    let health = match HealthFile::create() {
        Ok(file) => file,
        Err(e) => {
            let _ = held.release().await;
            reaper.abandon().await;
            return Err(Exit::fail(
                exit::INTERNAL,
                format!("cannot create the health file in the temporary directory: {e}"),
            ));
        }
    };
    health.follow(&held);
    let env = [
        ("LEASE_URL", held.url().to_string()),
        ("LEASE_EPOCH", held.epoch().to_string()),
        ("LEASE_TOKEN", held.token().to_string()),
        ("LEASE_HOLDER_ID", held.holder().id.clone()),
        ("LEASE_HEALTH_FILE", health.path().display().to_string()),
    ];
    if let Err(e) = reaper.start(&env, deadline_of(&held)) {
        let _ = held.release().await;
        reaper.abandon().await;
        return Err(cannot_start(e));
    }
    let group = match reaper.next_report().await {
        Some(Report::Started(pid)) => pid,
        other => {
            reaper.wait().await;
            let _ = held.release().await;
            return Err(match other {
                Some(Report::Failed { code, message }) => Exit::fail(code, message),
                _ => Exit::fail(
                    exit::INTERNAL,
                    "the command's reaper ended without starting the command",
                ),
            });
        }
    };
    Supervisor {
        args,
        held: &held,
        health: &health,
        reaper: &mut reaper,
        group,
        limits,
        ending: None,
    }
    .supervise(&mut signals)
    .await
}

/// Why the command is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Renewals were late: SIGTERM sent, the reaper's fuse sends SIGKILL.
    Late,
    /// The lease is lost (or could not be kept across a stop): SIGKILL sent.
    Lost,
}

struct Supervisor<'a> {
    args: &'a RunArgs,
    held: &'a Lease,
    /// The file the command reads its lease's health from.
    health: &'a HealthFile,
    reaper: &'a mut Reaper,
    /// The command's process group.
    group: i32,
    limits: Limits,
    ending: Option<Ending>,
}

impl Supervisor<'_> {
    async fn supervise(mut self, signals: &mut Signals) -> Result<Exit, Exit> {
        let held = self.held;
        let lost = held.lost();
        tokio::pin!(lost);
        // Asked to yield: signal the command once; the release follows its exit.
        let asked = held.yield_request();
        tokio::pin!(asked);
        let mut yielding = false;
        let code = loop {
            let mut wake = None;
            // Once lost, the `lost` branch below kills the command; nothing is late any more.
            if self.ending.is_none() && held.lost_reason().is_none() {
                self.reaper.extend_deadline(deadline_of(held));
                let left = held.remaining();
                if left <= self.limits.term_at() {
                    say!(
                        "could not renew {} (epoch {}) in time, {} left; stopping the command \
                         (SIGTERM now, SIGKILL {} before the deadline)",
                        held.url(),
                        held.epoch(),
                        format_duration(left),
                        format_duration(self.limits.margin)
                    );
                    // The command may read its health file when SIGTERM comes: it says
                    // `unknown` by then (SIGTERM goes out when `unknown` begins).
                    self.health.write_now(held);
                    kill_group(self.group, libc::SIGTERM);
                    self.ending = Some(Ending::Late);
                } else {
                    wake = Some((left - self.limits.term_at()).min(self.limits.sync_every));
                }
            }
            tokio::select! {
                report = self.reaper.next_report() => match report {
                    Some(Report::Ended(code)) => break Some(code),
                    Some(_) => {}
                    None => break None,
                },
                event = signals.next() => match event {
                    Event::Forward(sig) => kill_group(self.group, sig),
                    Event::Suspend => self.suspend().await,
                },
                request = &mut asked, if !yielding => {
                    yielding = true;
                    let why = request.reason.map(|r| format!(": {r}")).unwrap_or_default();
                    match self.args.on_yield {
                        Some(sig) => {
                            say!(
                                "{} (token {}): asked to yield by {}{why}; sending signal {sig} \
                                 to the command, releasing when it exits",
                                held.url(),
                                held.epoch(),
                                request.by
                            );
                            kill_group(self.group, sig);
                        }
                        None => say!(
                            "{} (token {}): asked to yield by {}{why}; holding on (give \
                             --on-yield SIGNAL to pass it on to the command)",
                            held.url(),
                            held.epoch(),
                            request.by
                        ),
                    }
                }
                reason = &mut lost, if self.ending != Some(Ending::Lost) => {
                    say!(
                        "lost {} (epoch {}): {reason}; killing the command (SIGKILL)",
                        held.url(),
                        held.epoch()
                    );
                    self.kill();
                }
                _ = sleep_for(wake) => {}
            }
        };
        self.reaper.wait().await;
        let Some(code) = code else {
            // The reaper died without a word (killed?): the command is unwatched.
            kill_group(self.group, libc::SIGKILL);
            wait_for_group_gone(self.group).await;
            let _ = held.release().await;
            return Err(Exit::fail(
                exit::INTERNAL,
                format!(
                    "the command's reaper (pid {}) died; the command was killed",
                    self.reaper.pid().unwrap_or(0)
                ),
            ));
        };
        if self.ending.is_some() {
            let _ = held.release().await; // tidies our record if nobody took it over
            return Ok(Exit::code(self.args.lost_exit_code));
        }
        // The command finished; was the lease still held when it did?
        let held_throughout = held.ensure_held(Duration::ZERO).is_ok();
        match held.release().await {
            Ok(()) => Ok(Exit::code(code)),
            Err(e) if e.kind() == ErrorKind::Lost || !held_throughout => Err(Exit::fail(
                self.args.lost_exit_code,
                format!("{e}; the command may have run without the lease at the end"),
            )),
            // Held until the command ended, but the release could not be written: the next
            // holder waits until the lease expires (its ttl and grace). Not "all is well".
            Err(e) => Err(Exit::fail(
                exit::STORE,
                format!(
                    "the command exited with status {code}, but {e}; the next holder waits \
                     until it expires (its ttl and grace)",
                ),
            )),
        }
    }

    fn kill(&mut self) {
        kill_group(self.group, libc::SIGKILL);
        self.ending = Some(Ending::Lost);
    }

    /// Ctrl-Z: stop the command's group, then this process. Once continued, let the command
    /// run again only if the lease is still held with more than kill-after + margin left.
    async fn suspend(&mut self) {
        let held = self.held;
        kill_group(self.group, libc::SIGSTOP);
        stop_self();
        if self.ending == Some(Ending::Lost) {
            return;
        }
        if let Err(e) = held.ensure_held(Duration::ZERO) {
            say!("{e} while lease run was stopped; killing the command (SIGKILL)");
            return self.kill();
        }
        if self.ending.is_none() && held.ensure_held(self.limits.term_at()).is_err() {
            // The renewals stopped with this process: give the one that is due a chance,
            // with the command still stopped, until the SIGKILL would be due anyway.
            let wait = held.remaining().saturating_sub(self.limits.margin);
            tokio::select! {
                _ = held.renew() => {}
                _ = SystemClock.sleep(wait) => {}
            }
            if let Err(e) = held.ensure_held(self.limits.term_at()) {
                say!(
                    "{} (epoch {}) is about to be lost after lease run was stopped ({e}); \
                     killing the command (SIGKILL)",
                    held.url(),
                    held.epoch()
                );
                return self.kill();
            }
            self.reaper.extend_deadline(deadline_of(held));
        }
        // Stopping because renewals were late: the SIGTERM is pending, the fuse stands.
        kill_group(self.group, libc::SIGCONT);
    }
}

async fn sleep_for(d: Option<Duration>) {
    match d {
        Some(d) => SystemClock.sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Wait (at most a second) until no process of `group` is left.
async fn wait_for_group_gone(group: i32) {
    for _ in 0..100 {
        // SAFETY: kill(2) with signal 0 only checks that the group exists.
        if unsafe { libc::kill(-group, 0) } != 0 {
            return;
        }
        SystemClock.sleep(Duration::from_millis(10)).await;
    }
}
