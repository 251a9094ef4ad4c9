//! The reaper: a small process between `lease run` and its command, so that the command cannot
//! outlive `lease run` nor outrun the lease.
//!
//! ```text
//! lease run            the supervisor: holds and renews the lease
//! └── lease __reaper   this module, in a process group of its own
//!     └── CMD          leads process group G; everything it starts stays in G
//! ```
//!
//! `lease run` starts the reaper (the same binary, re-executed) before it acquires the lease,
//! so that the lease's record can name it (a waiter on this machine takes the lease over early
//! only once `lease run` *and* its reaper are gone, and the reaper outlives the command it
//! kills: docs/protocol.md §4). It has two pipes:
//! - the *watch* pipe, whose only write end `lease run` keeps. Once the lease is held, `lease
//!   run` sends the command's environment (`env NAME HEX`, the value in hex) and `start
//!   DEADLINE` over it, and the reaper starts the command; if the pipe closes first, the
//!   reaper exits without starting anything. When `lease run` dies, for any reason (kill -9,
//!   the OOM killer, a panic), the kernel closes it and the reaper reads EOF: it sends SIGKILL
//!   to group G at once. Over the same pipe `lease run` sends the lease's deadline after each
//!   renewal (nanoseconds on the boot clock, one per line). The reaper sends SIGKILL to G a
//!   margin before the latest deadline it was given: a fuse that burns even while `lease run`
//!   is stopped (SIGSTOP cannot be caught) or starved, so the command cannot run past the
//!   deadline whatever happens to its supervisor.
//! - the *report* pipe, back to `lease run`: `pid G` once CMD runs (or `error CODE MESSAGE`
//!   if it cannot be started), then `exit N` or `signal N` when it ends.
//!
//! Why a process rather than `PR_SET_PDEATHSIG` on the command: the death signal fires when the
//! *thread* that forked exits (tokio's threads come and go), and it reaches only the direct
//! child, not what the command started. Why a re-executed binary rather than a fork that only
//! does async-signal-safe work: after a fork, `lease run`'s threads (tokio's) are gone and
//! their locks may be held, so the reaper could use no allocator, no std I/O, no threads; a
//! fresh process can. Why its own process group: signals for the command (SIGTERM, SIGSTOP on
//! Ctrl-Z, SIGKILL) go to group G and must never stop or kill the reaper, and a terminal's
//! Ctrl-Z (sent to `lease run`'s group) must not stop it either.
//!
//! The command itself gets `PR_SET_PDEATHSIG(SIGKILL)` towards the reaper (a single-threaded
//! process whose forking thread lives as long as it does), so killing the reaper kills at least
//! the command; `lease run` kills group G when the reaper dies without reporting.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use lease::clock::SLEEP_SLICE;
use tokio::sync::mpsc;

/// Arguments of the hidden `lease __reaper` (only `lease run` starts it).
#[derive(clap::Args, Debug)]
pub struct ReaperArgs {
    /// Read end of the watch pipe.
    #[arg(long)]
    pub watch_fd: RawFd,
    /// Write end of the report pipe.
    #[arg(long)]
    pub report_fd: RawFd,
    /// SIGKILL this long before the deadline, in nanoseconds.
    #[arg(long)]
    pub margin_ns: u64,
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// Time since boot, suspend included (`CLOCK_BOOTTIME`): the time line of
/// `lease::clock::SystemClock::now()`, so `boot_clock() + lease.remaining()` is a deadline that
/// another process on this machine can compare with its own `boot_clock()`.
pub fn boot_clock() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill; the clock id is valid.
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Signal a whole process group.
pub fn kill_group(group: i32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-group, sig);
    }
}

/// What the reaper tells `lease run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The command runs, as this pid, leading a process group of the same id.
    Started(i32),
    /// The command could not be started: exit with this code and message.
    Failed { code: u8, message: String },
    /// The command ended with this exit code (128 + N when signal N killed it, as shells say).
    Ended(u8),
}

impl Report {
    fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "pid" => rest.parse().ok().map(Report::Started),
            "exit" => rest.parse().ok().map(Report::Ended),
            "signal" => rest
                .parse::<u8>()
                .ok()
                .map(|sig| Report::Ended(128u8.saturating_add(sig))),
            "error" => {
                let (code, message) = rest.split_once(' ')?;
                Some(Report::Failed {
                    code: code.parse().ok()?,
                    message: message.to_string(),
                })
            }
            _ => None,
        }
    }
}

/// `lease run`'s side: the running reaper.
pub struct Reaper {
    process: tokio::process::Child,
    /// The watch pipe's write end. Only this process holds it (close-on-exec), so the reaper
    /// reads EOF exactly when this process is gone.
    watch: File,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The latest deadline sent.
    sent: Duration,
}

impl Reaper {
    /// Start the reaper, which waits for [`Reaper::start`] to start `command`.
    pub fn spawn(command: &[String], margin: Duration) -> io::Result<Reaper> {
        let (watch_read, watch_write) = pipe()?;
        let (report_read, report_write) = pipe()?;
        // /proc/self/exe is this very binary even if its file was replaced since (an upgrade).
        let exe = if Path::new("/proc/self/exe").exists() {
            PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg0("lease")
            .arg("__reaper")
            .arg(format!("--watch-fd={}", watch_read.as_raw_fd()))
            .arg(format!("--report-fd={}", report_write.as_raw_fd()))
            .arg(format!("--margin-ns={}", margin.as_nanos()))
            .arg("--")
            .args(command)
            .process_group(0);
        let inherited = [watch_read.as_raw_fd(), report_write.as_raw_fd()];
        // SAFETY: between fork and exec only fcntl(2) and sigprocmask(2), async-signal-safe:
        // the child's copies of two fds this process owns lose close-on-exec (ours keep it),
        // and the signals `lease run` blocks (SIGTTIN, SIGTTOU) are unblocked, as the mask
        // survives exec and the spawn does not reset it.
        unsafe {
            cmd.pre_exec(move || {
                for fd in inherited {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                unblock_all_signals()
            });
        }
        let process = cmd.spawn()?;
        drop(watch_read);
        drop(report_write);
        let (tx, reports) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("lease-reports".into())
            .spawn(move || {
                for line in BufReader::new(File::from(report_read)).lines() {
                    let Ok(line) = line else { break };
                    if let Some(report) = Report::parse(&line) {
                        if tx.send(report).is_err() {
                            break;
                        }
                    }
                }
            })?;
        Ok(Reaper {
            process,
            watch: File::from(watch_write),
            reports,
            sent: Duration::ZERO,
        })
    }

    /// Start the command, with `env` added, under the lease whose deadline (on the boot clock)
    /// is `deadline`.
    pub fn start(&mut self, env: &[(&str, String)], deadline: Duration) -> io::Result<()> {
        let mut message = String::new();
        for (name, value) in env {
            let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
            message += &format!("env {name} {hex}\n");
        }
        message += &format!("start {}\n", deadline.as_nanos());
        // Blocking, once: the pipe is empty and the message far below its capacity.
        self.watch.write_all(message.as_bytes())?;
        self.sent = deadline;
        // A reaper that stopped reading must not block lease run: a deadline that does not fit
        // is sent again at the next update.
        set_nonblocking(&self.watch)
    }

    /// The next report; `None` once the reaper is gone.
    pub async fn next_report(&mut self) -> Option<Report> {
        self.reports.recv().await
    }

    /// Move the fuse to `deadline` if that is later than the last one sent.
    pub fn extend_deadline(&mut self, deadline: Duration) {
        // Each reading of the deadline differs by the time between two clock reads; only a
        // renewal moves it by more than a millisecond.
        if deadline <= self.sent + Duration::from_millis(1) {
            return;
        }
        let line = format!("{}\n", deadline.as_nanos());
        // One write of at most PIPE_BUF bytes: all of it or nothing.
        if let Ok(n) = (&self.watch).write(line.as_bytes()) {
            if n == line.len() {
                self.sent = deadline;
            }
        }
    }

    /// Wait for the reaper process to exit.
    pub async fn wait(&mut self) {
        let _ = self.process.wait().await;
    }

    /// Let a reaper that was not started go: it reads EOF and exits without starting anything.
    pub async fn abandon(self) {
        let Reaper {
            mut process, watch, ..
        } = self;
        drop(watch);
        let _ = process.wait().await;
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.id()
    }
}

/// Async-signal-safe.
fn unblock_all_signals() -> io::Result<()> {
    // SAFETY: an empty set on the stack, passed to sigprocmask(2).
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds on success; each is then owned exactly once.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Take ownership of an fd handed down by `lease run`, and keep it from the command.
fn adopt(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(2) only inspects and flags the descriptor; it is owned once, after it was
    // checked to be open.
    unsafe {
        if fd < 3 || libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
            return Err(io::Error::other(format!("fd {fd} is not open")));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The reaper process: `lease __reaper …`.
pub fn main(args: ReaperArgs) -> ExitCode {
    let (watch, report) = match (adopt(args.watch_fd), adopt(args.report_fd)) {
        (Ok(w), Ok(r)) => (w, r),
        _ => {
            eprintln!("lease __reaper is started by `lease run`, not by hand");
            return ExitCode::from(crate::exit::USAGE);
        }
    };
    let mut report = File::from(report);
    let mut watch = File::from(watch);
    // `lease run` sends the start once it holds the lease; gone before, nothing is started.
    let Some(Start {
        env,
        deadline,
        pending,
    }) = read_start(&mut watch)
    else {
        return ExitCode::SUCCESS;
    };
    let reaper_pid = std::process::id();
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).envs(env).process_group(0);
    // SAFETY: between fork and exec only prctl(2), getppid(2) and sigprocmask(2),
    // async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            unblock_all_signals()?;
            #[cfg(any(target_os = "linux", target_os = "android"))]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The reaper died before the death signal was armed: do not run unwatched.
            if libc::getppid() as u32 != reaper_pid {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == io::ErrorKind::NotFound {
                crate::exit::NOT_FOUND
            } else {
                crate::exit::NOT_EXECUTABLE
            };
            let hint = match crate::hints::shell_line(&args.command) {
                Some(hint) if code == crate::exit::NOT_FOUND => format!("; {hint}"),
                _ => String::new(),
            };
            let _ = writeln!(
                report,
                "error {code} cannot run {:?}: {e}{hint}",
                args.command[0]
            );
            return ExitCode::from(code);
        }
    };
    let group = child.id() as i32;
    let _ = writeln!(report, "pid {group}");
    let fuse = Fuse {
        deadline,
        margin: Duration::from_nanos(args.margin_ns),
    };
    // If this thread cannot start, the command must not run unwatched.
    if std::thread::Builder::new()
        .name("fuse".into())
        .spawn(move || fuse.watch(watch, group, pending))
        .is_err()
    {
        kill_group(group, libc::SIGKILL);
    }
    let line = match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => format!("exit {}", crate::exit::INTERNAL),
        },
        Err(_) => format!("exit {}", crate::exit::INTERNAL),
    };
    let _ = writeln!(report, "{line}");
    ExitCode::SUCCESS
}

/// SIGKILL to the command's group a margin before the latest deadline, or at once when
/// `lease run` is gone.
struct Fuse {
    deadline: Duration,
    margin: Duration,
}

/// What `lease run` sends once it holds the lease: the command's environment, the lease's
/// deadline, and the bytes read after it (deadlines already sent).
struct Start {
    env: Vec<(String, String)>,
    deadline: Duration,
    pending: Vec<u8>,
}

/// Read `lease run`'s start message from the watch pipe; `None` at EOF first.
fn read_start(watch: &mut File) -> Option<Start> {
    let mut env = Vec::new();
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8(line).ok()?;
            let mut words = line.split_whitespace();
            match (words.next()?, words.next(), words.next()) {
                ("env", Some(name), Some(hex)) => env.push((name.to_string(), unhex(hex)?)),
                ("env", Some(name), None) => env.push((name.to_string(), String::new())),
                ("start", Some(ns), None) => {
                    let deadline = Duration::from_nanos(ns.parse().ok()?);
                    return Some(Start {
                        env,
                        deadline,
                        pending,
                    });
                }
                _ => return None,
            }
        }
        match watch.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// `616263` → `abc`.
fn unhex(hex: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

impl Fuse {
    fn watch(mut self, mut watch: File, group: i32, mut pending: Vec<u8>) {
        let mut buf = [0u8; 512];
        loop {
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let ns = std::str::from_utf8(&line)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                if let Some(ns) = ns {
                    // Every deadline sent is at or before the holder's own, and the holder's
                    // only moves forward: the latest is the best.
                    self.deadline = self.deadline.max(Duration::from_nanos(ns));
                }
            }
            let now = boot_clock();
            let burn_at = self.deadline.saturating_sub(self.margin);
            if now >= burn_at {
                break;
            }
            // In slices: poll's timeout runs on CLOCK_MONOTONIC, which stands still while the
            // machine is suspended, and the deadline is on the boot clock, which does not.
            // Round up: waking early would only loop again.
            let wait_ms = (burn_at - now)
                .min(SLEEP_SLICE)
                .as_nanos()
                .div_ceil(1_000_000)
                .min(i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd: watch.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll(2) on one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, wait_ms) };
            if ready == 0 {
                continue;
            }
            if ready < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            match watch.read(&mut buf) {
                Ok(0) => break, // lease run is gone
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        kill_group(group, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        assert_eq!(Report::parse("pid 42"), Some(Report::Started(42)));
        assert_eq!(Report::parse("exit 7"), Some(Report::Ended(7)));
        assert_eq!(Report::parse("signal 9"), Some(Report::Ended(137)));
        assert_eq!(
            Report::parse("error 127 cannot run \"x\": not found"),
            Some(Report::Failed {
                code: 127,
                message: "cannot run \"x\": not found".into()
            })
        );
        assert_eq!(Report::parse("nonsense"), None);
    }
}
