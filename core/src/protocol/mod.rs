//! The protocol's decisions, apart from I/O.
//!
//! Everything here is pure: given what a client has observed (records, versions, the store's
//! times, its own monotonic time, what it knows of a key) it says what to do next — read, write
//! this record under this condition, sleep until then, give up, report the lease lost. Nothing
//! here touches a store, a clock or a random generator: times come in as arguments and
//! randomness through [`Entropy`]. The async drivers (`client`, `acquire`, `lease`, `fence`,
//! `status`) only carry out the steps; the model checker (`verify/`) runs the very
//! same state machines against a modelled store, network and clocks. This is the shape of
//! sans-IO protocol crates (quinn-proto, rustls' state machines).
//!
//! - [`view`]: what a client has seen of a record.
//! - [`takeover`]: create, take over or wait — the two takeover rules.
//! - [`dead_holder`]: a holder on this machine whose processes are provably gone.
//! - [`mod@write`]: one conditional write, its read-back and resends, until its outcome is known.
//! - [`acquire`]: acquiring a lease, from the first read to a landed write.
//! - [`hold`]: a held lease — deadline, renewal, loss, release, tidying up after a loss.
//! - [`lease_yield`]: a plain lease's yield request (`KEY.yield`) and what its holder is told.
//! - [`breaking`]: an operator's break.
//! - [`fence`]: fenced writes' verdicts and the outcome of a fenced write.
//! - [`queue`]: queued locks — grants and waiters, FIFO order, shared, permits, scopes.
//! - [`session`]: shared sessions — one heartbeat for many grants (what is decided so far).
//! - [`mutants`]: the model checker's negative controls (off unless a test turns one on).
//!
//! See docs/model.md for the state machine and its assumptions.

pub mod acquire;
pub mod breaking;
pub mod dead_holder;
pub mod fence;
pub mod hold;
pub mod lease_yield;
pub mod mutants;
pub mod queue;
pub mod session;
pub mod takeover;
#[cfg(test)]
mod testing;
pub mod view;
pub mod write;

use std::time::Duration;

use crate::clock::Rng;

/// The randomness a decision may need: a nonce for each write, jitter for waits. Drivers pass
/// the client's [`Rng`]; the model checker passes a deterministic source.
pub trait Entropy {
    /// A fresh nonce naming one write.
    fn nonce(&self) -> String;
    /// `d` scaled by a random factor in [1 - spread, 1 + spread].
    fn jitter(&self, d: Duration, spread: f64) -> Duration;
}

impl Entropy for Rng {
    fn nonce(&self) -> String {
        Rng::nonce(self)
    }

    fn jitter(&self, d: Duration, spread: f64) -> Duration {
        Rng::jitter(self, d, spread)
    }
}

/// Exponential backoff with jitter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// For a lease's own requests: from `min(50 ms, renew/10)` up to half the renew interval.
    pub fn for_timing(timing: &crate::options::Timing) -> Self {
        let initial = Duration::from_millis(50)
            .min(timing.renew / 10)
            .max(Duration::from_millis(1));
        Backoff::between(initial, (timing.renew / 2).max(initial))
    }

    /// Starting at `initial`, doubling up to `max`.
    pub fn between(initial: Duration, max: Duration) -> Self {
        Backoff { next: initial, max }
    }

    /// The next pause (and double the one after).
    pub fn next(&mut self, entropy: &dyn Entropy) -> Duration {
        let d = entropy.jitter(self.next, 0.25);
        self.next = (self.next * 2).min(self.max);
        d
    }
}

#[cfg(test)]
mod tests;
