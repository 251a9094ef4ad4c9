//! Options from JavaScript (a number of milliseconds, or a string with its unit such as `'30s'`)
//! to the core's `LeaseOptions`.
//!
//! Types are checked by the JavaScript layer (`TypeError`); this checks values and reports a bad
//! one as `LEASE_INVALID`. The core then checks ranges (ttl 100 ms ..= 24 h, label length, …).

use std::time::Duration;

use napi::bindgen_prelude::Either;
use napi_derive::napi;

/// A duration: a number of milliseconds, or a string with its unit (`'30s'`, `'500ms'`, `'5m'`).
pub type Time = Either<f64, String>;

/// Options of `acquire`, `tryAcquire` and `new Election`. Times are numbers of milliseconds, or
/// strings with their unit (`'30s'`, `'500ms'`, `'5m'`, `'1h'`).
#[napi(object)]
#[derive(Default)]
pub struct LeaseOptions {
    /// How long the lease lasts without renewal (default 30 000, at least 100, at most one day).
    /// The holder renews it in the background every `ttl / 3`.
    pub ttl: Option<Either<f64, String>>,
    /// How long `acquire` (or `Election.campaign`) waits for a lease held by someone else:
    /// `undefined` (or `Infinity`) waits as long as it takes, `0` tries once.
    pub wait: Option<Either<f64, String>>,
    /// A label for people, shown by `status` (at most 256 bytes).
    pub label: Option<String>,
    /// A small payload stored in the lease record while held (at most 16 KiB), e.g. an address.
    pub data: Option<String>,
    /// Cancels a waiting `acquire`: the promise rejects with an `AbortError`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<Signal>,
    /// How often a waiter re-reads the record (default `ttl / 10`, within 50 ms ..= 2 s).
    pub poll_interval: Option<Either<f64, String>>,
    /// Extra time a waiter allows another holder beyond its ttl (default max(1 s, ttl / 10)).
    pub grace: Option<Either<f64, String>>,
    /// How often the holder renews (default `ttl / 3`).
    pub renew_interval: Option<Either<f64, String>>,
    /// How long `acquire` keeps trying a store that does not answer, in a row, before it
    /// rejects with `LEASE_UNAVAILABLE`, also when waiting for a holder without `wait`
    /// (default: the ttl, at least 10 s).
    pub unavailable_timeout: Option<Either<f64, String>>,
    /// A shared holder (a reader) of a queued lock: it holds beside other shared holders, while
    /// an exclusive holder (a writer) holds alone. Grants follow arrival order among
    /// conflicting requests, so a waiting writer is not starved by later readers.
    pub shared: Option<bool>,
    /// Use the lock as a semaphore of this many permits (1 ..= 128): a shared holder takes one.
    /// Implies `shared`.
    #[napi(ts_type = "number")]
    pub permits: Option<f64>,
    /// Hold only this path of the lock (`'tables/users'`): it conflicts with the paths above
    /// and under it, not with its siblings.
    pub scope: Option<String>,
    /// Hold only the bytes `[start, end)` of one object: overlapping ranges conflict.
    #[napi(ts_type = "[number, number]")]
    pub range: Option<Vec<f64>>,
    /// Queue an exclusive request in arrival order (a queued lock) instead of racing for a
    /// plain lease. Shared, permits, a scope or a range always queue.
    pub queue: Option<bool>,
    /// Priority among waiters that conflict (a whole number from -1e9 to 1e9, default 0; a
    /// queued lock when not 0): the higher is granted first, arrival order within a priority,
    /// and a waiter is passed over by at most 8 later ones. A holder is never preempted.
    #[napi(ts_type = "number")]
    pub priority: Option<f64>,
    /// Who in this process asks, named by the caller (as Go's `Owner`): acquiring a lease (or a
    /// conflicting grant) that the same owner holds rejects at once with `LEASE_HELD` instead of
    /// waiting for itself. Unset: nobody in particular, it waits like any other (one thread runs
    /// every async function, and any of them may release the lease).
    pub owner: Option<String>,
    /// Where a waiter of a queued lock can be woken by the write that grants it, so that it reads
    /// at once rather than at its next poll (docs/protocol.md §10, "Wake hints"): `'loopback'`
    /// (the default: 127.0.0.1, hints from writers on this host), `'off'` (it learns of its
    /// grant at its next poll), `'route'` (the address this host's default route leaves from,
    /// for writers on other hosts), or the IP address of an interface to listen on
    /// (`'10.0.0.5'`). Anything else rejects with `LEASE_INVALID`.
    #[napi(ts_type = "'loopback' | 'off' | 'route' | (string & {})")]
    pub wake_hints: Option<String>,
    /// Once waiting, ask the holders in this request's way to step aside for it (a queued
    /// request; docs/protocol.md §10, "Yield on request"): their `onYield` callbacks are told,
    /// with this waiter's id as `by` and `to`, and each decides when to release. `acquire` only.
    pub ask_yield: Option<bool>,
    /// With `askYield`: why, told to the holders (at most 256 bytes).
    pub yield_reason: Option<String>,
    /// `'every-effect-fenced'`: take a live holder's plain lease at once, with the next epoch,
    /// instead of waiting out its deadline (docs/protocol.md §5, "Preemption for fenced
    /// workloads"), asserting that every effect of every holder of this lease goes through
    /// fenced writes or a `FencingGate`: the preempted holder goes on believing it holds until
    /// its next renewal (it then loses it, reason `preempted`). `'never'` (the default) waits;
    /// any other string, or a queued request with it, rejects with `LEASE_INVALID`.
    #[napi(ts_type = "'every-effect-fenced' | 'never'")]
    pub preempt: Option<String>,
}

/// Options of `openSession`.
#[napi(object)]
#[derive(Default)]
pub struct SessionOptions {
    /// The ttl of the session and of every grant held through it (milliseconds, or a string
    /// with its unit; default 30 000, at least 100, at most one day): one renewal of the
    /// session's record every `ttl / 3` keeps them all.
    pub ttl: Option<Either<f64, String>>,
    /// A label for people, shown by `status` and `lease status` (at most 256 bytes).
    pub label: Option<String>,
    /// Where the session's record goes: `PREFIX.lease-sessions/SID` (default `''`: the store's
    /// root; else a prefix ending in `/`, such as `'team-a/'`).
    pub prefix: Option<String>,
}

impl SessionOptions {
    /// The core's options.
    pub fn to_core(&self) -> lease::Result<lease::SessionOptions> {
        let mut o = lease::SessionOptions::new(ttl(self.ttl.as_ref())?);
        if let Some(label) = &self.label {
            o = o.label(label.clone());
        }
        if let Some(prefix) = &self.prefix {
            o = o.prefix(prefix.clone());
        }
        Ok(o)
    }
}

/// Stands in for the `signal` field: the JavaScript layer turns an `AbortSignal` into a
/// `CancelToken` argument and never passes the signal itself down here.
pub type Signal = napi::bindgen_prelude::Undefined;

/// A number of milliseconds, or a string with its unit, as a `Duration`.
pub fn time(what: &str, t: &Time) -> lease::Result<Duration> {
    match t {
        Either::A(ms) => millis(what, *ms),
        Either::B(text) => lease::parse_duration(text)
            .map_err(|e| lease::Error::invalid(format!("{what}: {}", e.message()))),
    }
}

/// A time in milliseconds as a `Duration`; `what` names it in the message.
pub fn millis(what: &str, ms: f64) -> lease::Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(lease::Error::invalid(format!(
            "{what} must be a finite number of milliseconds, at least 0 (got {ms})"
        )));
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| lease::Error::invalid(format!("{what} of {ms} ms is too large")))
}

/// A ttl (`acquire`'s, `openSession`'s): the default when absent; a number below the shortest
/// ttl is refused with a hint that it is in milliseconds. The core checks the range.
pub fn ttl(ttl: Option<&Time>) -> lease::Result<Duration> {
    let Some(t) = ttl else {
        return Ok(lease::options::DEFAULT_TTL);
    };
    let d = time("ttl", t)?;
    // A number below the shortest ttl was most likely meant as seconds.
    if let Either::A(ms) = t {
        if *ms > 0.0 && d < lease::options::MIN_TTL {
            return Err(lease::Error::invalid(format!(
                "ttl of {ms} ms is below {}: ttl is in milliseconds ({} for {ms} s), or write \
                 it with its unit ('{ms}s')",
                lease::format_duration(lease::options::MIN_TTL),
                ms * 1000.0
            )));
        }
    }
    Ok(d)
}

impl LeaseOptions {
    /// The core's options.
    pub fn to_core(&self) -> lease::Result<lease::LeaseOptions> {
        let mut o = lease::LeaseOptions::new(ttl(self.ttl.as_ref())?);
        o.wait = match &self.wait {
            None => None,
            Some(Either::A(w)) if *w == f64::INFINITY => None,
            Some(w) => Some(time("wait", w)?),
        };
        o.label = self.label.clone();
        o.data = self.data.clone();
        // "" is the core's "nobody": no check (not the tokio task, which is new for each call).
        o.owner = Some(self.owner.clone().unwrap_or_default());
        if let Some(p) = &self.poll_interval {
            o.poll_interval = Some(time("pollInterval", p)?);
        }
        if let Some(g) = &self.grace {
            o.grace = Some(time("grace", g)?);
        }
        if let Some(r) = &self.renew_interval {
            o.renew_interval = Some(time("renewInterval", r)?);
        }
        if let Some(u) = &self.unavailable_timeout {
            o.unavailable_timeout = Some(time("unavailableTimeout", u)?);
        }
        self.queue_options(o)
    }

    /// The queued-lock options (docs/protocol.md §10), checked as the core checks them.
    fn queue_options(&self, mut o: lease::LeaseOptions) -> lease::Result<lease::LeaseOptions> {
        if self.shared == Some(true) {
            o = o.shared();
        }
        if let Some(n) = self.permits {
            if !(n.is_finite() && n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&n)) {
                return Err(lease::Error::invalid(format!(
                    "permits must be a whole number from 1 to {} (got {n})",
                    lease::scope::MAX_PERMITS
                )));
            }
            o = o.permits(n as u32);
        }
        let range = match &self.range {
            None => None,
            Some(r) => Some(byte_range(r)?),
        };
        match (&self.scope, range) {
            (Some(_), Some(_)) => {
                return Err(lease::Error::invalid(
                    "give a scope (a path) or a range (bytes), not both: one request covers one \
                     scope",
                ))
            }
            (Some(path), None) => o = o.scope(lease::Scope::path(path)?),
            (None, Some(r)) => o = o.scope(r),
            (None, None) => {}
        }
        if self.queue == Some(true) {
            o = o.queue();
        }
        if let Some(hints) = &self.wake_hints {
            o = o.wake_hints(hints.parse()?);
        }
        if let Some(n) = self.priority {
            let (lo, hi) = (
                lease::protocol::queue::MIN_PRIORITY,
                lease::protocol::queue::MAX_PRIORITY,
            );
            if !(n.is_finite() && n.fract() == 0.0 && (f64::from(lo)..=f64::from(hi)).contains(&n))
            {
                return Err(lease::Error::invalid(format!(
                    "priority must be a whole number from {lo} to {hi} (got {n})"
                )));
            }
            o = o.priority(n as i32);
        }
        // The core checks the reason's length, and a reason without `askYield`.
        o.ask_yield = self.ask_yield == Some(true);
        o.yield_reason = self.yield_reason.clone();
        if let Some(p) = &self.preempt {
            o = o.preempt(p.parse()?);
        }
        o.check_queue()?;
        Ok(o)
    }
}

/// `range: [start, end]`: two whole numbers of bytes, the end excluded.
fn byte_range(r: &[f64]) -> lease::Result<lease::Scope> {
    let bound = |what: &str, v: f64| -> lease::Result<u64> {
        // Whole numbers that a double holds exactly (up to 2^53).
        if !v.is_finite() || v.fract() != 0.0 || !(0.0..=9_007_199_254_740_991.0).contains(&v) {
            return Err(lease::Error::invalid(format!(
                "range {what} must be a whole number of bytes, at least 0 (got {v})"
            )));
        }
        Ok(v as u64)
    };
    match r {
        [start, end] => lease::Scope::range(bound("start", *start)?, bound("end", *end)?),
        _ => Err(lease::Error::invalid(format!(
            "range must be [start, end] (bytes, the end excluded), not {} numbers",
            r.len()
        ))),
    }
}

/// A `Duration` as milliseconds (fractional).
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
