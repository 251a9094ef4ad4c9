//! Yield on request (docs/protocol.md §10, "Yield on request"): a waiter or an operator asks the
//! holders in its way to step aside. The request is one field of the lock's record,
//! `"yield":{"tokens":[T…],"by":WHO,"to":ID,"reason":…}`, written by one conditional write like
//! a join ([`Change::Yield`](super::Change::Yield)). It names the grants it asks by their
//! tokens, so it belongs to those tenures: a later holder (another token) is never told, and
//! the write that removes the last of them drops it. It changes no grant and no belief: a
//! holder learns it at its confirmation read ([`GrantHold`](super::holder::GrantHold)) and
//! steps aside, when it chooses, by its ordinary release.
//!
//! With `to` (a waiting participant's id), that waiter is *due* (docs/protocol.md §10,
//! "Priorities") while the request stands, so the release that ends the named grants grants it
//! if it fits. Unlike a waiter due by its bypass count, it does not make the earlier waiters of
//! its priority due: in a queue of one priority that would leave everyone in arrival order and
//! the `to` would do nothing. The waiters it passes count the bypass as for any later grant, so
//! the bound on being passed over still holds.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Position, QueueRecord};
use crate::error::{Error, Result};

/// The feature a record requires while its yield request names a `to`: it changes who is
/// granted next, which an older writer would not know (docs/protocol.md §10, "Evolution").
pub const YIELD_FEATURE: &str = "yield";

/// The longest `by` (who asks) a request may carry, in bytes.
pub const MAX_YIELD_BY_LEN: usize = 128;

/// The longest `reason` a request may carry, in bytes.
pub const MAX_YIELD_REASON_LEN: usize = 256;

/// The request in a lock's record: the grants asked to step aside (by token), who asks, to whom
/// to hand over, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct YieldRequest {
    /// The tokens of the grants asked, ascending; only grants still listed.
    pub tokens: Vec<u64>,
    /// Who asks: a waiter's id, or an operator's label.
    pub by: String,
    /// A waiting participant's id that goes next when it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an asker asks: the change [`Change::Yield`](super::Change::Yield) carries. The tokens
/// are chosen from the record the write is applied to (so a write retried after a failed
/// condition asks the grants then in the way): those in the way of the `to` waiter, else of
/// the asker when it waits itself, else every grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct YieldAsk {
    pub by: String,
    pub to: Option<String>,
    pub reason: Option<String>,
}

/// What a holder is told, once per request that names its grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct YieldRequested {
    pub by: String,
    pub to: Option<String>,
    pub reason: Option<String>,
}

impl YieldRequest {
    /// What a holder is told of this request (all but the tokens: a later request that only
    /// adds tokens is, to a holder already told, the same request).
    pub fn told(&self) -> YieldRequested {
        YieldRequested {
            by: self.by.clone(),
            to: self.to.clone(),
            reason: self.reason.clone(),
        }
    }

    /// Whether it asks the grant of `token`.
    pub fn names(&self, token: u64) -> bool {
        self.tokens.contains(&token)
    }
}

/// A request's reason is at most [`MAX_YIELD_REASON_LEN`] bytes: a clear error, nothing written.
fn check_reason(reason: Option<&str>) -> Result<()> {
    match reason {
        Some(r) if r.len() > MAX_YIELD_REASON_LEN => Err(Error::invalid(format!(
            "a yield request's reason is at most {MAX_YIELD_REASON_LEN} bytes, not {}: shorten it",
            r.len()
        ))),
        _ => Ok(()),
    }
}

impl YieldAsk {
    /// Check the ask's bounds: a clear error, nothing written.
    pub fn check(&self) -> Result<()> {
        if self.by.is_empty() || self.by.len() > MAX_YIELD_BY_LEN {
            return Err(Error::invalid(format!(
                "a yield request must say who asks in 1 to {MAX_YIELD_BY_LEN} bytes, not {}",
                self.by.len()
            )));
        }
        check_reason(self.reason.as_deref())?;
        if self.to.as_deref() == Some("") {
            return Err(Error::invalid(
                "a yield request's `to` must name a waiting participant's id",
            ));
        }
        Ok(())
    }
}

/// A waiter's own request (`LeaseOptions::ask_yield`, docs/protocol.md §10, "Yield on
/// request"): once it waits in the record, it asks the grants in its way to step aside, naming
/// itself as `to`. It asks once per set of tenures in its way: again only when a grant in its way
/// is named by no standing request and was never asked by it (a later holder got in its way),
/// and never twice for one tenure, even when its request was not written (a store that failed)
/// or was replaced. The driver (`core/src/queue.rs`) feeds it each record the waiter read and
/// writes what it returns ([`Change::Yield`](super::Change::Yield), which picks the tokens from
/// the record it is applied to).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnAsk {
    reason: Option<String>,
    /// The tokens of the grants this waiter asked (those still granted when it last looked).
    asked: BTreeSet<u64>,
}

impl OwnAsk {
    /// A waiter that asks, saying `reason`: `Invalid` when it is too long (as
    /// [`YieldAsk::check`] says), before anything is written.
    pub fn new(reason: Option<String>) -> Result<OwnAsk> {
        check_reason(reason.as_deref())?;
        Ok(OwnAsk {
            reason,
            asked: BTreeSet::new(),
        })
    }

    /// What waiter `me` asks, given the record it just read: `None` when it is not waiting
    /// there (not joined yet, granted, removed), when nothing is in its way, or when every
    /// grant in its way is named by the standing request or was asked by it before.
    pub fn decide(&mut self, record: &QueueRecord, me: &str) -> Option<YieldAsk> {
        let Position::Waiting { .. } = record.position(me) else {
            return None;
        };
        let entry = record.queue.iter().find(|e| e.id() == me)?;
        let in_the_way: BTreeSet<u64> = record
            .in_the_way(entry)
            .iter()
            .filter_map(|g| g.token)
            .collect();
        // Tenures that ended never come back (tokens only grow): forget them.
        self.asked.retain(|t| record.granted(*t));
        let fresh = in_the_way
            .iter()
            .any(|t| !self.asked.contains(t) && record.yield_for(*t).is_none());
        if !fresh {
            return None;
        }
        self.asked.extend(in_the_way);
        Some(YieldAsk {
            by: me.to_string(),
            to: Some(me.to_string()),
            reason: self.reason.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
