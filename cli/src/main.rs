//! `lease`: run a command only while holding a lease; inspect, watch and break leases.
//!
//! Habits from flock(1) and `consul lock`: `-w/--wait`, `-n/--no-wait`, a distinct exit code
//! for "held by someone else", the child stopped when the lease is lost, the fencing token
//! exported to the child.

mod exit;
mod health;
mod hints;
mod metrics;
mod reaper;
mod run;
mod show;
mod waiting;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::Exit;

#[derive(Parser, Debug)]
#[command(name = "lease", version, about = "Leases, leader election and fencing on object storage", after_help = exit::HELP)]
struct Cli {
    /// More log output on stderr (-v: info, -vv: debug, including the AWS SDK). LEASE_LOG=filter
    /// (tracing syntax, e.g. `lease=debug`) overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
enum Command {
    /// Run CMD only while holding LEASE; stop it if the lease is lost.
    Run(RunArgs),
    /// Show who holds LEASE.
    Status {
        /// A lease URL (s3://bucket/key, gs://bucket/key, az://account/container/key,
        /// file:///path, memory://ns/key) or a bare name.
        lease: String,
        /// Print JSON: state, epoch, holder (id, label, host, pid), ttl_ms, expires_in_ms,
        /// history.
        #[arg(long)]
        json: bool,
        /// Also list the earlier tenures (epoch, holder, acquired and ended at, how each
        /// ended), most recent first; `--json` always has them as `history`.
        #[arg(long)]
        history: bool,
    },
    /// Print one line per change of LEASE until interrupted.
    Watch {
        /// A lease URL (s3://bucket/key, gs://bucket/key, az://account/container/key,
        /// file:///path, memory://ns/key) or a bare name.
        lease: String,
        /// Print one JSON object per change, with the fields of `lease status --json` plus
        /// `reason` (initial, acquired, taken_over, released, expired, broken, deleted,
        /// corrupt, data, changed) and `time`: lines for alerting. Read-only: never contends.
        #[arg(long)]
        json: bool,
        /// How often to poll the store.
        #[arg(long, default_value = "1s", value_parser = duration)]
        poll: Duration,
    },
    /// Check that a store really honours conditional writes, also under concurrency (16
    /// racing creates, 16 racing updates), and that its clock is usable, so leases are safe on
    /// it: writes, probes and removes objects under the URL's path, in PREFIX.
    Doctor {
        /// A store URL: s3://bucket?options, gs://bucket, az://account/container, file:///dir,
        /// memory://namespace, with a path where the leases go (s3://bucket/locks?options):
        /// the probes go under it, where a worker's permissions apply.
        store: String,
        /// Where the probe objects go, under the URL's path.
        #[arg(long, default_value = "lease-doctor")]
        prefix: String,
        /// Print the report as JSON; on an error, {"ok": false, "error": {"kind", "message"}}.
        #[arg(long)]
        json: bool,
    },
    /// Forced takeover by an operator: the holder loses LEASE at its next renewal (epoch + 1).
    /// The next holder may start once the broken holder's deadline has surely passed (its ttl +
    /// grace after the break), or at once if the broken holder lets go first.
    Break {
        /// The lease: a URL (s3://bucket/key, gs://bucket/key, az://account/container/key,
        /// file:///dir/key) or a bare name.
        lease: String,
        /// Confirm: the holder will lose the lease.
        #[arg(long)]
        yes: bool,
        /// Let the next holder in at once, while the broken holder may still believe it holds
        /// for up to its ttl: two holders at once. Safe only where every write is fenced.
        #[arg(long)]
        allow_two_holders: bool,
    },
    /// Change the permits of a queued lock while it is in use: in one conditional write that
    /// also grants whoever may go under the new limit. Grants already made stay (with fewer
    /// permits, nobody new is granted until fewer than N hold); later requests must ask for N,
    /// or for no number.
    Permits {
        /// The lock: a URL or a bare name.
        lease: String,
        /// The new number of permits, or `none` for no limit on shared holders.
        permits: String,
    },
    /// Ask the holders of a queued lock, or a plain lease's holder, to step aside: one write
    /// (the lock's record; a plain lease's request object LEASE.yield) that its holders read at
    /// their next renewal (within ttl/3; a plain lease's holder only while it listens, as
    /// `lease run` does). Nothing is taken from them: each releases when it chooses (`lease
    /// run --on-yield SIGNAL` signals its command and releases when it exits), and a queued
    /// lock's release grants the next waiter — the one named by --to first.
    Yield {
        /// The lock: a URL or a bare name.
        lease: String,
        /// A waiter's id (`lease status` lists them) to hand over to: the holders in its way
        /// are asked, and it goes next when it fits [default: ask every holder; the queue's
        /// order decides who goes next]. A queued lock only: a plain lease has no waiters.
        #[arg(long, value_name = "ID")]
        to: Option<String>,
        /// Why, for the holders (at most 256 bytes).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Internal: the watchdog between `lease run` and its command (cli/src/reaper.rs).
    #[command(name = "__reaper", hide = true)]
    Reaper(reaper::ReaperArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// How long the lease lasts without renewal (renewed every ttl/3 while CMD runs).
    #[arg(long, default_value = "30s", value_parser = ttl)]
    pub ttl: Duration,
    /// Wait at most this long for the lease, whatever is in the way: a holder (exit 75) or a
    /// store that does not answer (exit 69) [default: as long as a holder keeps it].
    #[arg(short, long, value_parser = duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Do not wait: fail at once if someone else holds the lease (exit 75) or the store does
    /// not answer (exit 69).
    #[arg(short = 'n', long)]
    pub no_wait: bool,
    /// Give up (exit 69) once the store has not answered for this long in a row, also when
    /// waiting for a holder without --wait [default: the ttl, at least 10s].
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub unavailable_timeout: Option<Duration>,
    /// A label for `lease status` (default: the command line).
    #[arg(long)]
    pub label: Option<String>,
    /// A small payload stored in the lease record while CMD runs.
    #[arg(long)]
    pub data: Option<String>,
    /// Hold the lock shared with other `--shared` holders (readers); exclusive holders wait
    /// for them and they for exclusive ones, in arrival order (a queued lock).
    #[arg(long)]
    pub shared: bool,
    /// Use the lock as a semaphore of N permits: at most N holders at once, in arrival order
    /// (a queued lock; implies --shared).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub permits: Option<u32>,
    /// Hold only this path of the lock (e.g. tables/users): only overlapping paths conflict
    /// (a/b conflicts with a and a/b/c, not a/bc). A queued lock.
    #[arg(long, value_name = "PATH", conflicts_with = "range")]
    pub scope: Option<String>,
    /// Hold only bytes START..END of the object the lock guards (END excluded): only
    /// overlapping ranges conflict. A queued lock.
    #[arg(long, value_name = "START..END")]
    pub range: Option<String>,
    /// Queue in arrival order and take the lock in the releasing write, also when exclusive
    /// (a queued lock; --shared, --permits, --scope and --range always queue).
    #[arg(long)]
    pub queue: bool,
    /// Wait with this priority among competing waiters: higher goes first, arrival order
    /// within a priority, and a waiter is passed over by at most 8 later ones; a holder is
    /// never preempted (a queued lock when not 0) [default: 0].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// How often a waiter re-reads the lock [default: ttl/10, within 50ms..2s].
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub poll: Option<Duration>,
    /// Where a queued lock's waiter listens for wake hints, so the release that grants it
    /// wakes it at once instead of at its next poll: `loopback` (hints from this host),
    /// `route` (the address this host's default route leaves from), the IP address of an
    /// interface other hosts reach this one at, or `off` [default: loopback].
    #[arg(long, value_name = "off|loopback|route|IP", value_parser = wake_hints)]
    pub wake_hints: Option<lease::WakeHints>,
    /// When the holder is asked to yield (`lease yield`), send this signal to the
    /// command (TERM, INT, HUP, USR1, USR2, QUIT, or a number); the lock is released, and the
    /// next waiter granted, when the command exits [default: the request is only logged].
    #[arg(long, value_name = "SIGNAL", value_parser = signal_number)]
    pub on_yield: Option<i32>,
    /// Once waiting, ask the holders in the way to step aside and hand over to this waiter
    /// (as `lease yield LOCK --to ID` would): once per set of tenures in the way, never twice
    /// for one; the holders decide when to release (`--on-yield`). A queued lock.
    #[arg(long)]
    pub ask_yield: bool,
    /// With --ask-yield: why, told to the holders (at most 256 bytes).
    #[arg(long, value_name = "TEXT", requires = "ask_yield")]
    pub yield_reason: Option<String>,
    /// Take a live holder's lease at once instead of waiting out its deadline: the only value
    /// is `every-effect-fenced`, asserting that every effect of every holder of this lease
    /// goes through fenced writes or a fencing gate. The preempted holder goes on believing it
    /// holds until its next renewal (up to ttl/3 and a request timeout), so any other effect
    /// (a local file, an unfenced table, an external API) may overlap. Plain leases only; one
    /// preemption per run (docs/protocol.md §5) [default: never].
    #[arg(long, value_name = "every-effect-fenced", value_parser = preempt)]
    pub preempt: Option<lease::Preempt>,
    /// When renewals are late, send CMD SIGTERM this long before the SIGKILL that lands just
    /// before the lease's deadline [default: ttl/3, at most 10s]. A lost lease means SIGKILL at
    /// once.
    #[arg(long, value_parser = duration)]
    pub kill_after: Option<Duration>,
    /// Serve this process's metrics in the Prometheus text format at http://ADDR/metrics
    /// (e.g. 127.0.0.1:9464) while `lease run` runs.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// With --metrics: once the command has ended and the lease is released, wait at most
    /// this long for one more scrape, so the last counts reach Prometheus.
    #[arg(long, value_parser = duration, value_name = "DUR", requires = "metrics")]
    pub metrics_linger: Option<Duration>,
    /// Exit code when the lease is held by someone else (with -n, or after --wait ran out).
    #[arg(short = 'E', long, default_value_t = exit::HELD, value_name = "CODE")]
    pub conflict_exit_code: u8,
    /// Exit code when the lease is lost (or renewals are too late) while CMD runs.
    #[arg(long, default_value_t = exit::LOST, value_name = "CODE")]
    pub lost_exit_code: u8,
    /// The lease: a URL (s3://bucket/key, file:///path, memory://ns/key) or a bare name in the
    /// default local store ($LEASE_HOME, else $XDG_STATE_HOME/lease, else ~/.local/state/lease).
    pub lease: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

fn duration(s: &str) -> Result<Duration, String> {
    lease::parse_duration(s).map_err(|e| e.message().to_string())
}

/// A signal by name (with or without `SIG`) or number.
fn signal_number(s: &str) -> Result<i32, String> {
    let name = s.trim_start_matches("SIG").to_ascii_uppercase();
    let n = match name.as_str() {
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "QUIT" => libc::SIGQUIT,
        _ => match s.parse::<i32>() {
            Ok(n) if (1..=64).contains(&n) && n != libc::SIGKILL && n != libc::SIGSTOP => n,
            _ => {
                return Err(format!(
                    "{s:?} is not a signal this can send: give TERM, INT, HUP, USR1, USR2, QUIT \
                     or a number from 1 to 64 (not KILL or STOP: the command must be able to \
                     finish)"
                ))
            }
        },
    };
    Ok(n)
}

/// `--preempt`: only `every-effect-fenced` (`never` is the default, not a value to give).
fn preempt(s: &str) -> Result<lease::Preempt, String> {
    match s.parse::<lease::Preempt>() {
        Ok(lease::Preempt::EveryEffectFenced) => Ok(lease::Preempt::EveryEffectFenced),
        Ok(lease::Preempt::Never) => Err(
            "`never` is the default: leave --preempt out (its only value is \
             `every-effect-fenced`)"
                .into(),
        ),
        Err(e) => Err(e.message().to_string()),
    }
}

/// Where to listen for wake hints (`lease::WakeHints`).
fn wake_hints(s: &str) -> Result<lease::WakeHints, String> {
    s.parse::<lease::WakeHints>()
        .map_err(|e| e.message().to_string())
}

/// A ttl: a number without a unit is offered only the units that make a valid ttl.
fn ttl(s: &str) -> Result<Duration, String> {
    use lease::options::{MAX_TTL, MIN_TTL};
    lease::parse_duration_in(s, MIN_TTL..=MAX_TTL).map_err(|e| e.message().to_string())
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;
    // Only lease's own warnings by default: the AWS SDK logs every failed step of its
    // credential chain at WARN, and the error line that follows already says what to do.
    let default = match verbose {
        0 => "error,lease=warn",
        1 => "warn,lease=info",
        _ => "debug",
    };
    // `LEASE_LOG` takes `LEVEL` and `TARGET=LEVEL` directives, comma-separated. (`Targets`
    // rather than `EnvFilter`: the latter's span and field filters need the regex crates, a
    // fifth of a cold build's compile time spent on what nobody asked of this command.)
    let from_env = std::env::var("LEASE_LOG")
        .ok()
        .and_then(|d| match d.parse::<Targets>() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("lease: ignoring LEASE_LOG={d:?}: {e}");
                None
            }
        });
    // The waiting events are printed by `waiting::Waiting`, as plain lines, not here.
    let filter = from_env
        .unwrap_or_else(|| default.parse().expect("the default filter parses"))
        .with_target(
            lease::WAITING_TARGET,
            tracing::level_filters::LevelFilter::OFF,
        );
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let format = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(terminal)
        .with_target(false);
    // Who holds the lease a `lease run` waits for: on a terminal, or with -v.
    let waiting = (terminal || verbose > 0).then(|| {
        waiting::Waiting
            .with_filter(Targets::new().with_target(lease::WAITING_TARGET, tracing::Level::INFO))
    });
    tracing_subscriber::registry()
        .with(format.with_filter(filter))
        .with(waiting)
        .init();
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; every usage error exits 64 (EX_USAGE).
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            if e.kind() == clap::error::ErrorKind::UnknownArgument {
                let args: Vec<String> = std::env::args().skip(1).collect();
                let unexpected = e.get(clap::error::ContextKind::InvalidArg);
                if let Some(tip) =
                    unexpected.and_then(|u| hints::missing_dashes(&args, &u.to_string()))
                {
                    eprintln!("{tip}");
                }
            }
            return ExitCode::from(code);
        }
    };
    let command = match cli.command {
        // The reaper is small and synchronous: no runtime, no logging.
        Command::Reaper(args) => return reaper::main(args),
        command => command,
    };
    if matches!(command, Command::Run(_)) {
        run::refuse_terminal_stops(); // before the runtime starts its threads
    }
    init_logging(cli.verbose);
    lease::set_client_name("cli");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Exit::fail(exit::INTERNAL, format!("cannot start the runtime: {e}")).report()
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Run(args) => run::run(args).await,
            Command::Status {
                lease,
                json,
                history,
            } => show::status(&lease, json, history).await,
            Command::Watch { lease, json, poll } => show::watch(&lease, json, poll).await,
            Command::Break {
                lease,
                yes,
                allow_two_holders,
            } => show::break_lease(&lease, yes, allow_two_holders).await,
            Command::Doctor {
                store,
                prefix,
                json,
            } => show::doctor(&store, &prefix, json).await,
            Command::Permits { lease, permits } => show::set_permits(&lease, &permits).await,
            Command::Yield { lease, to, reason } => show::ask_yield(&lease, to, reason).await,
            Command::Reaper(_) => unreachable!("handled before the runtime starts"),
        }
    });
    // Do not wait for stray blocking tasks (a file read stuck on a dead NFS mount, say).
    runtime.shutdown_timeout(Duration::from_secs(1));
    result.unwrap_or_else(|e| e).report()
}
