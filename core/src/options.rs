//! Options of a lease, their defaults and limits, and the timings derived from them.

use std::time::Duration;

use crate::duration::format_duration;
use crate::error::{Error, Result};
use crate::record::{MAX_DATA_LEN, MAX_LABEL_LEN};
use crate::scope::{Mode, Scope, MAX_PERMITS, MAX_PRIORITY, MIN_PRIORITY};
use crate::store::Capabilities;

/// Shortest ttl accepted.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Longest ttl accepted (and the longest a waiter believes a record's own ttl).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default ttl.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// How a lease is acquired and held.
///
/// ```
/// # use std::time::Duration;
/// let opts = lease::LeaseOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(60)).label("gc-1");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseOptions {
    /// How long the lease lasts without renewal.
    pub ttl: Duration,
    /// How long `acquire` waits for the lease, whatever is in the way (a holder, or a store
    /// that does not answer): `None` waits as long as a holder keeps it, `Some(ZERO)` tries
    /// once. A call to the store in flight when it ends may add one request timeout.
    pub wait: Option<Duration>,
    /// How long `acquire` keeps trying a store that does not answer (every call failing
    /// [`Unavailable`](crate::ErrorKind::Unavailable): refused, timed out, 5xx) in a row before
    /// it fails with `Unavailable`, also when waiting for a holder forever. Default
    /// [`default_unavailable_timeout`]: the ttl, at least 10 s. `wait`, when shorter, ends it
    /// first.
    pub unavailable_timeout: Option<Duration>,
    /// A label for people (shown by `status`), at most 256 bytes.
    pub label: Option<String>,
    /// A small user payload stored in the record (at most 16 KiB), e.g. the leader's address.
    pub data: Option<String>,
    /// Margin a waiter adds to another holder's ttl before taking over; bounds clock-rate
    /// drift and store-node skew. Default `max(1 s, ttl / 10)` of the record's ttl.
    pub grace: Option<Duration>,
    /// How often a waiter re-reads the record. Default `ttl / 10`, within 50 ms ..= 2 s.
    pub poll_interval: Option<Duration>,
    /// How often the holder renews. Default `ttl / 3`.
    pub renew_interval: Option<Duration>,
    /// Timeout of one request to the store. Default half the renew interval, so a hung
    /// request leaves time for another attempt before the holder's deadline.
    pub request_timeout: Option<Duration>,
    /// Take over a record seen unchanged for `ttl + grace` on this machine's monotonic clock.
    pub observation_rule: bool,
    /// Take over a record whose age by the store's own clock exceeds `ttl + grace +
    /// resolution`. `None` follows the store's default.
    pub store_clock_rule: Option<bool>,
    /// Take over at once a record whose holder, on this machine, is provably gone: same boot,
    /// same pid namespace, its processes absent or replaced (docs/protocol.md §4). `None`
    /// follows the store's default: on for the local file store, off elsewhere.
    pub dead_holder_rule: Option<bool>,
    /// Other processes of this machine that act under the lease while it is held (`lease
    /// run`'s watchdog): the holder record names them, and a waiter takes over early only once
    /// they are gone too.
    pub companion_pids: Vec<u32>,
    /// Exclusive (the default) or shared with other shared holders (docs/protocol.md §10).
    /// Shared makes the lock a queued lock.
    pub mode: Mode,
    /// A semaphore: at most this many grants at once (each shared grant takes one permit). Set
    /// by whoever creates the lock; every participant must ask for the same number, or none.
    pub permits: Option<u32>,
    /// The part of the lock this holder needs: a path or a byte range (only overlapping scopes
    /// conflict). Default: the whole lock.
    pub scope: Scope,
    /// Queue for the lock in arrival order, with hand-over in the releasing write, even when
    /// exclusive over the whole lock. Shared, permits and scopes always queue; so does every
    /// request on a lock that is already a queued lock.
    pub queue: bool,
    /// A queued request's priority among competing waiters: higher goes first, FIFO within a
    /// priority, and a waiter is passed over by at most `MAX_BYPASS` (8) later ones
    /// (docs/protocol.md §10, "Priorities"). Default 0; from [`MIN_PRIORITY`] to
    /// [`MAX_PRIORITY`]. Any other value makes the request a queued one. It never preempts a
    /// holder.
    pub priority: i32,
    /// A queued request asks the grants in its way to step aside, naming itself to be granted
    /// next (docs/protocol.md §10, "Yield on request"): once it waits in the lock's record, and
    /// again only when a later holder gets in its way, never twice for one tenure. The holders
    /// learn it as a yield request (`on_yield`) and decide when to release. Implies a queued
    /// request. Default off.
    pub ask_yield: bool,
    /// Why this waiter asks (`ask_yield`), told to the holders: at most 256 bytes.
    pub yield_reason: Option<String>,
    /// When a held lease's health turns `unknown`: once no more than `kill_after` plus
    /// [`stop_margin`] is left before the deadline (`lease run --kill-after`: when its command
    /// gets SIGTERM). Default [`default_kill_after`]: `ttl/3`, at most 10 s.
    pub kill_after: Option<Duration>,
    /// Record each tenure of this lease in its record's bounded history when taking it over
    /// (docs/protocol.md §3). On by default; off writes no history (records already carrying
    /// one keep it).
    pub history: bool,
    /// Who in this process asks: an acquisition that would wait for a lease (or a conflicting
    /// grant) the same owner holds in this process fails at once with
    /// [`Held`](crate::ErrorKind::Held), since it would wait for itself. `None` (the default):
    /// the tokio task that acquires, if any; the bindings name the thread (Python, C) or the
    /// asyncio task; an empty string: nobody (no check). Leases are not re-entrant.
    pub owner: Option<String>,
    /// Where a queued lock's waiter can be woken when a write grants it (docs/protocol.md §10,
    /// "Wake hints"): its entry names a UDP address that the granting writer sends one datagram
    /// to. Default [`WakeHints::Loopback`]. The poll stays the fallback.
    pub wake_hints: WakeHints,
    /// Take a live holder's lease at once instead of waiting out its deadline (docs/protocol.md
    /// §5, "Preemption for fenced workloads"). Default [`Preempt::Never`]. The preempted holder
    /// believes it holds until its next renewal: safe only where every effect of every holder
    /// goes through fenced writes or a `FencingGate`. Plain (exclusive, unqueued) leases only.
    pub preempt: Preempt,
}

/// Whether an acquisition may take a live holder's lease at once (docs/protocol.md §5,
/// "Preemption for fenced workloads"). No boolean: the only value that preempts names the
/// condition the caller asserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Preempt {
    /// Wait out a live holder (the takeover rules, §4).
    #[default]
    Never,
    /// Every effect of every holder of this lease goes through fenced writes or a
    /// `FencingGate`: take a live holder's lease at once, with the next epoch, so its fenced
    /// writes are refused from then on. It still believes it holds until its next renewal (it
    /// then loses with `LostReason::Preempted`): any unfenced effect may overlap the new
    /// holder's. One tenure preempted per acquire call: the holder it found, again if a
    /// renewal beat the preemption; a later holder (another preemptor) is waited for.
    EveryEffectFenced,
}

impl std::str::FromStr for Preempt {
    type Err = crate::error::Error;

    /// `never` or `every-effect-fenced`.
    fn from_str(s: &str) -> Result<Preempt, Self::Err> {
        match s {
            "never" => Ok(Preempt::Never),
            "every-effect-fenced" => Ok(Preempt::EveryEffectFenced),
            other => Err(crate::error::Error::invalid(format!(
                "preempt {other:?}: expected `never` or `every-effect-fenced`. Preemption takes a \
                 live holder's lease at once, and the preempted holder goes on believing it \
                 holds until its next renewal: any effect that is not a fenced write or behind a \
                 fencing gate (a local file, an unfenced table, an external API) may then \
                 overlap the new holder's. Use `every-effect-fenced` only when that is true of \
                 every holder"
            ))),
        }
    }
}

/// Where a queued lock's waiter listens for wake hints (docs/protocol.md §10, "Wake hints").
/// A hint carries no authority (the waiter only reads the record sooner), so a hint that is
/// dropped, late or forged costs at most one conditional read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WakeHints {
    /// No address in the entry and no socket: the waiter learns of its grant at its next poll.
    Off,
    /// Listen on 127.0.0.1 (an ephemeral port): hints from writers on this host. Opens nothing
    /// to the network.
    #[default]
    Loopback,
    /// Listen on this interface's address (an ephemeral port): the address other hosts reach
    /// this one at.
    Listen(std::net::IpAddr),
    /// Listen on the address this host's default route leaves from (found once, without
    /// sending anything: `wake_hint::route_address`): for waiters on several hosts of one
    /// network, without naming an interface. Loopback when the host has no route. Not the
    /// default: it opens a UDP port to the network, which a library should not do unasked.
    Route,
}

impl std::str::FromStr for WakeHints {
    type Err = crate::error::Error;

    /// `off`, `loopback`, `route`, or an IP address to listen on.
    fn from_str(s: &str) -> Result<WakeHints, Self::Err> {
        match s {
            "off" | "none" => Ok(WakeHints::Off),
            "loopback" | "on" => Ok(WakeHints::Loopback),
            "route" => Ok(WakeHints::Route),
            ip => ip.parse().map(WakeHints::Listen).map_err(|_| {
                crate::error::Error::invalid(format!(
                    "wake hints {s:?}: expected `off`, `loopback`, `route` (the address this \
                     host's default route leaves from), or the IP address of an interface to \
                     listen on (e.g. 10.0.0.5)"
                ))
            }),
        }
    }
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions::new(DEFAULT_TTL)
    }
}

impl LeaseOptions {
    pub fn new(ttl: Duration) -> Self {
        LeaseOptions {
            ttl,
            wait: None,
            unavailable_timeout: None,
            label: None,
            data: None,
            grace: None,
            poll_interval: None,
            renew_interval: None,
            request_timeout: None,
            observation_rule: true,
            store_clock_rule: None,
            dead_holder_rule: None,
            companion_pids: Vec::new(),
            mode: Mode::Exclusive,
            permits: None,
            scope: Scope::Whole,
            queue: false,
            priority: 0,
            ask_yield: false,
            yield_reason: None,
            kill_after: None,
            history: true,
            owner: None,
            wake_hints: WakeHints::default(),
            preempt: Preempt::Never,
        }
    }

    /// Take a live holder's lease at once, asserting that every effect is fenced (see the
    /// `preempt` field and [`Preempt`]).
    pub fn preempt(mut self, preempt: Preempt) -> Self {
        self.preempt = preempt;
        self
    }

    /// Hold the lock shared with other shared holders (readers); exclusive holders wait for
    /// them and they for exclusive ones, in arrival order.
    pub fn shared(mut self) -> Self {
        self.mode = Mode::Shared;
        self
    }

    /// Use the lock as a semaphore of `n` permits: a shared holder takes one. Implies shared.
    pub fn permits(mut self, n: u32) -> Self {
        self.permits = Some(n);
        self.mode = Mode::Shared;
        self
    }

    /// Hold only `scope` of the lock: a path ([`Scope::path`]) or a byte range
    /// ([`Scope::range`]).
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Queue for the lock in arrival order (see the `queue` field).
    pub fn queue(mut self) -> Self {
        self.queue = true;
        self
    }

    /// Wait with priority `n` among competing waiters (see the `priority` field). Implies a
    /// queued request when not 0.
    pub fn priority(mut self, n: i32) -> Self {
        self.priority = n;
        self
    }

    /// Ask the grants in the way to step aside once waiting, saying `reason` if given (see the
    /// `ask_yield` field). Implies a queued request.
    pub fn ask_yield(mut self, reason: Option<&str>) -> Self {
        self.ask_yield = true;
        self.yield_reason = reason.map(str::to_string);
        self
    }

    /// Whether this request needs a queued lock.
    pub fn wants_queue(&self) -> bool {
        self.queue
            || self.ask_yield
            || self.priority != 0
            || self.mode == Mode::Shared
            || self.permits.is_some()
            || self.scope != Scope::Whole
    }

    /// Check the queued-lock options.
    pub fn check_queue(&self) -> Result<()> {
        if self.yield_reason.is_some() && !self.ask_yield {
            return Err(Error::invalid(
                "a yield reason is for a waiter that asks the holders to yield: set ask_yield \
                 too (`lease run --ask-yield --yield-reason TEXT`), or drop the reason",
            ));
        }
        if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&self.priority) {
            return Err(Error::invalid(format!(
                "priority {} is out of range: use {MIN_PRIORITY} to {MAX_PRIORITY} (higher goes \
                 first among waiters; the default is 0)",
                self.priority
            )));
        }
        if let Some(n) = self.permits {
            if n == 0 || n > MAX_PERMITS {
                return Err(Error::invalid(format!(
                    "permits {n} is out of range: use 1 to {MAX_PERMITS}"
                )));
            }
            if self.mode == Mode::Exclusive {
                return Err(Error::invalid(
                    "permits are for shared holders: an exclusive holder takes every permit",
                ));
            }
        }
        Ok(())
    }

    /// Who in this process asks (see the `owner` field; `""`: nobody).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The calling thread asks (see the `owner` field): what blocking bindings use, whose calls
    /// run in tasks of their own.
    pub fn owned_by_this_thread(self) -> Self {
        self.owner(this_thread())
    }

    /// Wait at most `wait` for the lease (`Duration::ZERO`: try once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Wait for the lease as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Give up on a store that has not answered for this long in a row (see
    /// the `unavailable_timeout` field).
    pub fn unavailable_timeout(mut self, timeout: Duration) -> Self {
        self.unavailable_timeout = Some(timeout);
        self
    }

    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    pub fn data(mut self, data: impl Into<String>) -> Self {
        self.data = Some(data.into());
        self
    }

    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// When health turns `unknown`: once `kill_after` plus [`stop_margin`] is left.
    pub fn kill_after(mut self, kill_after: Duration) -> Self {
        self.kill_after = Some(kill_after);
        self
    }

    /// Whether to append the tenure an acquisition replaces to the record's history.
    pub fn history(mut self, on: bool) -> Self {
        self.history = on;
        self
    }

    /// Where a queued lock's waiter listens for wake hints ([`WakeHints`]).
    pub fn wake_hints(mut self, hints: WakeHints) -> Self {
        self.wake_hints = hints;
        self
    }

    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll_interval = Some(poll);
        self
    }

    pub fn renew_interval(mut self, renew: Duration) -> Self {
        self.renew_interval = Some(renew);
        self
    }

    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    pub fn observation_rule(mut self, on: bool) -> Self {
        self.observation_rule = on;
        self
    }

    pub fn store_clock_rule(mut self, on: bool) -> Self {
        self.store_clock_rule = Some(on);
        self
    }

    pub fn dead_holder_rule(mut self, on: bool) -> Self {
        self.dead_holder_rule = Some(on);
        self
    }

    /// Check every option and derive the timings, given what the store offers.
    pub fn timing(&self, caps: &Capabilities) -> Result<Timing> {
        let ttl = self.ttl;
        if ttl < MIN_TTL || ttl > MAX_TTL {
            return Err(Error::invalid(format!(
                "ttl {} is out of range: use {} to {}",
                format_duration(ttl),
                format_duration(MIN_TTL),
                format_duration(MAX_TTL)
            )));
        }
        let renew = self.renew_interval.unwrap_or(ttl / 3);
        if renew.is_zero() || renew >= ttl {
            return Err(Error::invalid(format!(
                "renew interval {} must be above zero and below the ttl {}",
                format_duration(renew),
                format_duration(ttl)
            )));
        }
        let request_timeout = self.request_timeout.unwrap_or(renew / 2);
        if request_timeout.is_zero() || request_timeout >= ttl {
            return Err(Error::invalid(format!(
                "request timeout {} must be above zero and below the ttl {}",
                format_duration(request_timeout),
                format_duration(ttl)
            )));
        }
        let poll = self
            .poll_interval
            .unwrap_or_else(|| (ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(2)));
        if poll < Duration::from_millis(1) || poll > Duration::from_secs(3600) {
            return Err(Error::invalid(format!(
                "poll interval {} is out of range: use 1ms to 1h",
                format_duration(poll)
            )));
        }
        if let Some(grace) = self.grace {
            if grace > MAX_TTL {
                return Err(Error::invalid(format!(
                    "grace {} is longer than {}",
                    format_duration(grace),
                    format_duration(MAX_TTL)
                )));
            }
        }
        if let Some(wait) = self.wait {
            if wait > Duration::from_secs(100 * 365 * 24 * 3600) {
                return Err(Error::invalid(
                    "wait is longer than 100 years: leave it unset to wait forever",
                ));
            }
        }
        let unavailable_timeout = self
            .unavailable_timeout
            .unwrap_or_else(|| default_unavailable_timeout(ttl));
        if unavailable_timeout.is_zero() || unavailable_timeout > MAX_UNAVAILABLE_TIMEOUT {
            return Err(Error::invalid(format!(
                "unavailable timeout {} is out of range: use 1ms to {}",
                format_duration(unavailable_timeout),
                format_duration(MAX_UNAVAILABLE_TIMEOUT)
            )));
        }
        if let Some(label) = &self.label {
            if label.len() > MAX_LABEL_LEN || label.chars().any(char::is_control) {
                return Err(Error::invalid(format!(
                    "label must be at most {MAX_LABEL_LEN} bytes without control characters"
                )));
            }
        }
        if let Some(data) = &self.data {
            if data.len() > MAX_DATA_LEN {
                return Err(Error::invalid(format!(
                    "data is {} bytes; at most {MAX_DATA_LEN} bytes fit in a lease",
                    data.len()
                )));
            }
        }
        Ok(Timing {
            ttl,
            renew,
            request_timeout,
            poll,
            grace: self.grace,
            unavailable_timeout,
            resolution: caps.clock_resolution,
            observation_rule: self.observation_rule,
            store_clock_rule: self.store_clock_rule.unwrap_or(caps.store_clock_rule),
            unknown_within: self
                .kill_after
                .unwrap_or_else(|| default_kill_after(ttl, renew, request_timeout))
                .min(longest_kill_after(ttl, renew, request_timeout))
                + stop_margin(ttl),
        })
    }
}

/// The calling thread as an owner ([`LeaseOptions::owner`]); thread ids are never reused within
/// a process.
pub(crate) fn this_thread() -> String {
    let thread = std::thread::current();
    match thread.name() {
        Some(name) => format!("thread {name:?} ({:?})", thread.id()),
        None => format!("thread {:?}", thread.id()),
    }
}

/// Timings derived from [`LeaseOptions`], checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timing {
    pub ttl: Duration,
    pub renew: Duration,
    pub request_timeout: Duration,
    pub poll: Duration,
    grace: Option<Duration>,
    /// How long an acquire keeps trying a store that does not answer, in a row.
    pub unavailable_timeout: Duration,
    pub resolution: Duration,
    pub observation_rule: bool,
    pub store_clock_rule: bool,
    /// A held lease's health is `unknown` once no more than this is left before its deadline:
    /// `kill_after + stop_margin(ttl)`, the moment `lease run` sends its command SIGTERM
    /// (docs/protocol.md §4, "Health").
    pub unknown_within: Duration,
}

impl Timing {
    /// A held lease's health is `late` once this long has passed since the last renewal's
    /// send without a newer one landing: the renewal due at `renew` has had a whole request
    /// timeout.
    pub fn late_after(&self) -> Duration {
        self.renew + self.request_timeout
    }

    /// The grace a waiter allows a record with the given ttl.
    pub fn grace_for(&self, record_ttl: Duration) -> Duration {
        self.grace.unwrap_or_else(|| default_grace(record_ttl))
    }

    /// These timings for a holder whose ttl becomes `ttl` ([`crate::Lease::set_ttl`]): the renew
    /// interval and the request timeout stay the same fractions of the ttl (ttl/3 and ttl/6 by
    /// default), so whatever held for the old ttl holds for the new one. `Invalid` for a ttl
    /// out of range.
    pub fn with_ttl(&self, ttl: Duration) -> Result<Timing> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(Error::invalid(format!(
                "ttl {} is out of range: use {} to {}",
                format_duration(ttl),
                format_duration(MIN_TTL),
                format_duration(MAX_TTL)
            )));
        }
        let scale = |d: Duration| {
            let nanos = d.as_nanos() * ttl.as_nanos() / self.ttl.as_nanos().max(1);
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
                .max(Duration::from_millis(1))
        };
        Ok(Timing {
            ttl,
            renew: scale(self.renew),
            request_timeout: scale(self.request_timeout),
            ..*self
        })
    }
}

/// Longest unavailable timeout accepted: a store down for a week is not coming back for a
/// waiting acquire.
pub const MAX_UNAVAILABLE_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long an acquire keeps trying a store that does not answer by default: `max(ttl, 10 s)`.
///
/// As long as a holder keeps a lease without the store (its ttl), so a store that is back
/// within that time finds the waiter still waiting, and at least 10 s, so that a blip of the
/// network (a restart, a failover) never fails an acquire that may wait. Like the dial and
/// request timeouts of etcd's and Consul's clients, it turns a store that is down into an error
/// the caller sees, instead of a wait that looks like a held lease.
pub fn default_unavailable_timeout(ttl: Duration) -> Duration {
    ttl.max(Duration::from_secs(10))
}

/// How long before a lease's deadline `lease run` has its command killed (SIGKILL), and the
/// margin its SIGTERM adds to `kill_after`: `ttl/10`, within 20 ms ..= 1 s.
pub fn stop_margin(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// The longest `kill_after` a timing allows: stopping must not begin before the renewal due at
/// `renew` has had a whole request timeout.
pub fn longest_kill_after(ttl: Duration, renew: Duration, request_timeout: Duration) -> Duration {
    ttl.saturating_sub(renew + request_timeout + stop_margin(ttl))
}

/// `lease run`'s default `--kill-after`: `ttl/3`, at most 10 s (and at most
/// [`longest_kill_after`]).
pub fn default_kill_after(ttl: Duration, renew: Duration, request_timeout: Duration) -> Duration {
    (ttl / 3)
        .min(Duration::from_secs(10))
        .min(longest_kill_after(ttl, renew, request_timeout))
}

/// `max(1 s, ttl / 10)`.
pub fn default_grace(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Capabilities {
        Capabilities {
            versions_are_unique: true,
            conditional_delete: true,
            clock_resolution: Duration::from_secs(1),
            store_clock_rule: true,
            wall_clock: true,
        }
    }

    #[test]
    fn defaults() {
        let t = LeaseOptions::default().timing(&caps()).unwrap();
        assert_eq!(t.ttl, Duration::from_secs(30));
        assert_eq!(t.renew, Duration::from_secs(10));
        assert_eq!(t.request_timeout, Duration::from_secs(5));
        assert_eq!(t.poll, Duration::from_secs(2));
        assert_eq!(t.unavailable_timeout, Duration::from_secs(30));
        let short = LeaseOptions::new(Duration::from_secs(1))
            .timing(&caps())
            .unwrap();
        assert_eq!(short.unavailable_timeout, Duration::from_secs(10));
        assert_eq!(t.grace_for(Duration::from_secs(30)), Duration::from_secs(3));
        assert_eq!(t.grace_for(Duration::from_secs(5)), Duration::from_secs(1));
    }

    #[test]
    fn rejects_bad_options() {
        let bad = [
            LeaseOptions::new(Duration::ZERO),
            LeaseOptions::new(Duration::from_millis(99)),
            LeaseOptions::new(Duration::from_secs(10 * 365 * 24 * 3600)),
            LeaseOptions::default().renew_interval(Duration::from_secs(30)),
            LeaseOptions::default().renew_interval(Duration::ZERO),
            LeaseOptions::default().request_timeout(Duration::ZERO),
            LeaseOptions::default().poll_interval(Duration::ZERO),
            LeaseOptions::default().unavailable_timeout(Duration::ZERO),
            LeaseOptions::default().unavailable_timeout(Duration::from_secs(8 * 24 * 3600)),
            LeaseOptions::default().label("x".repeat(300)),
            LeaseOptions::default().label("a\nb"),
            LeaseOptions::default().data("x".repeat(20_000)),
        ];
        for o in bad {
            let e = o.timing(&caps()).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{o:?}");
        }
        let e = LeaseOptions::new(Duration::ZERO)
            .timing(&caps())
            .unwrap_err();
        assert!(e.message().contains("ttl 0ms is out of range"), "{e}");
    }
}
