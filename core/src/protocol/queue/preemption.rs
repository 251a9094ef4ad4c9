//! Preemption of a queued lock's grants (docs/protocol.md §10, "Preemption"; issue 23): an
//! exclusive request made with `Preempt::EveryEffectFenced` takes the lock at once. Its one
//! conditional write ([`Change::Preempt`](super::Change::Preempt)) removes every grant in its
//! way and grants it, with the next token, ahead of the waiters: the removed grants all
//! conflict with it and hold lower tokens, so every object it writes or fences refuses them
//! from then on (docs/protocol.md §7). What it gives up, as a lease's preemption does, is the
//! exclusion of *belief*: a removed holder believes until its next confirmation of the record,
//! which then reports `LostReason::Preempted`.
//!
//! The record keeps the latest preemption that removed anyone — who preempted, at which token,
//! and which grants it removed (`"preempted":{"by","token","removed":[{"id","token"}]}`) —
//! until the next one that removes anyone replaces it: that is how a removed holder learns
//! who took its grant, however soon the preemptor released (a `lease run -n` preemptor may
//! release before the removed holder's next confirmation). Older versions ignore the field (it
//! changes nothing about who may be granted, so it is not in `requires`); a removed holder of an
//! older version reports its grant removed.

use serde::{Deserialize, Serialize};

/// The latest preemption that removed grants.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Preemption {
    /// The preempting participant's id and the token it was granted.
    pub by: String,
    pub token: u64,
    /// The grants it removed.
    pub removed: Vec<PreemptedGrant>,
}

/// A grant a preemption removed: its participant id and token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PreemptedGrant {
    pub id: String,
    pub token: u64,
}
