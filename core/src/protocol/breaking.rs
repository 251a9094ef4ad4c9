//! An operator's break: what to write over the record seen.
//!
//! [`BreakMode::WaitOutHolder`] (the default) writes a record held by the breaker with the
//! broken holder's ttl, epoch + 1, and `broken` naming that holder: the holder learns of it at
//! its next renewal and stops believing; waiters take the record over by the usual rules, `ttl +
//! grace` after the break, when the broken holder's deadline has surely passed — or at once
//! when the broken holder acknowledges by releasing. [`BreakMode::AllowTwoHolders`] writes
//! `released`: the next holder may start while the broken one may still believe it holds.

use std::time::SystemTime;

use super::view::{Seen, View};
use super::Entropy;
use crate::options::Timing;
use crate::record::{timestamp, Displaced, Holder, Parsed, Record, RecordState, FORMAT};
use crate::store::Cond;

/// How [`crate::Client::break_lease`] lets the next holder in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BreakMode {
    /// Nobody may acquire until the broken holder's deadline has surely passed (`ttl + grace`
    /// after the break), unless the broken holder acknowledges the loss by releasing.
    #[default]
    WaitOutHolder,
    /// The next holder may acquire at once, while the broken holder may still believe it holds
    /// for up to its ttl. Safe only where every write the holders make is fenced.
    AllowTwoHolders,
}

/// What a break does with the record seen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per break, moved at once
pub enum BreakPlan {
    /// Released or absent: nothing to break.
    Nothing,
    /// Already broken and waiting out its holder: nothing more to do.
    AlreadyBroken,
    /// Write `record` under `cond`.
    Write { record: Record, cond: Cond },
}

/// Plan a break of the record in `view` by `breaker`, knowing epochs up to `known`.
pub fn plan(
    view: &View,
    known: u64,
    mode: BreakMode,
    breaker: Holder,
    timing: &Timing,
    wall: SystemTime,
    entropy: &dyn Entropy,
) -> BreakPlan {
    let Some(Seen::Present {
        version, parsed, ..
    }) = &view.seen
    else {
        return BreakPlan::Nothing;
    };
    let now_wall = timestamp(wall);
    let by = breaker.by();
    let (epoch, rev, ttl_ms, broken, history) = match parsed {
        Parsed::Valid(r) if r.state == RecordState::Released => return BreakPlan::Nothing,
        // Already broken: nobody believes this record, so only releasing it is left to do.
        Parsed::Valid(r) if r.broken.is_some() => {
            if mode == BreakMode::WaitOutHolder {
                return BreakPlan::AlreadyBroken;
            }
            (
                r.epoch,
                r.rev + 1,
                r.ttl_ms,
                r.broken.clone(),
                r.history.clone(),
            )
        }
        Parsed::Valid(r) => {
            let broken = Displaced {
                id: r.holder.id.clone(),
                epoch: r.epoch,
            };
            let history = r.history_after("broken", Some(now_wall.clone()), by);
            (
                r.epoch.max(known) + 1,
                r.rev + 1,
                r.ttl_ms,
                Some(broken),
                history,
            )
        }
        Parsed::Corrupt { epoch, .. } => (
            (epoch.unwrap_or(0).max(known) + 1).max(view.time_epoch(wall)),
            1,
            timing.ttl.as_millis() as u64,
            None,
            Default::default(),
        ),
    };
    let record = Record {
        history,
        format: FORMAT,
        epoch,
        rev,
        state: match mode {
            BreakMode::WaitOutHolder => RecordState::Held,
            BreakMode::AllowTwoHolders => RecordState::Released,
        },
        ttl_ms,
        holder: breaker,
        acquired_at: Some(now_wall.clone()),
        renewed_at: Some(now_wall),
        data: None,
        prev: view.prev(),
        write: Some(entropy.nonce()),
        broken,
        preempted: None,
        attached: None,
    };
    BreakPlan::Write {
        record,
        cond: Cond::Match(version.clone()),
    }
}

#[cfg(test)]
mod tests;
