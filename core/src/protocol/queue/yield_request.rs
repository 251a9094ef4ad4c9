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

use serde::{Deserialize, Serialize};

use super::QueueRecord;
use crate::error::{Error, ErrorKind, Result};

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

impl YieldAsk {
    /// Check the ask's bounds: a clear error, nothing written.
    pub fn check(&self) -> Result<()> {
        if self.by.is_empty() || self.by.len() > MAX_YIELD_BY_LEN {
            return Err(Error::invalid(format!(
                "a yield request must say who asks in 1 to {MAX_YIELD_BY_LEN} bytes, not {}",
                self.by.len()
            )));
        }
        if let Some(r) = &self.reason {
            if r.len() > MAX_YIELD_REASON_LEN {
                return Err(Error::invalid(format!(
                    "a yield request's reason is at most {MAX_YIELD_REASON_LEN} bytes, not {}: \
                     shorten it",
                    r.len()
                )));
            }
        }
        if self.to.as_deref() == Some("") {
            return Err(Error::invalid(
                "a yield request's `to` must name a waiting participant's id",
            ));
        }
        Ok(())
    }
}

impl QueueRecord {
    /// The request `ask` makes of this record, or `None` when it changes nothing (the same
    /// request is there already, or no grant is in the way). A later request replaces the
    /// standing one and keeps the union of their tokens (both asked those grants).
    pub(super) fn asked(&self, ask: &YieldAsk) -> Result<Option<YieldRequest>> {
        ask.check()?;
        let waiter = |id: &str| self.queue.iter().find(|e| e.id() == id);
        let to = ask
            .to
            .as_deref()
            .map(|to| self.waiter_named(to))
            .transpose()?;
        let tokens: Vec<u64> = match (to, waiter(&ask.by)) {
            (Some(w), _) => self.in_the_way(w).iter().filter_map(|g| g.token).collect(),
            (None, Some(me)) => self.in_the_way(me).iter().filter_map(|g| g.token).collect(),
            (None, None) => self.grants.iter().filter_map(|g| g.token).collect(),
        };
        if tokens.is_empty() {
            return Ok(None);
        }
        let mut all = tokens;
        if let Some(standing) = &self.yield_request {
            all.extend(standing.tokens.iter().copied().filter(|t| self.granted(*t)));
        }
        all.sort_unstable();
        all.dedup();
        let request = YieldRequest {
            tokens: all,
            by: ask.by.clone(),
            to: to.map(|w| w.id.clone()),
            reason: ask.reason.clone(),
        };
        if self.yield_request.as_ref() == Some(&request) {
            return Ok(None);
        }
        Ok(Some(request))
    }

    /// The waiter `to` names: its id, or a prefix of one id only (`lease status` shows the
    /// first 8 hex digits).
    fn waiter_named(&self, to: &str) -> Result<&super::Entry> {
        if let Some(w) = self.queue.iter().find(|e| e.id() == to) {
            return Ok(w);
        }
        let mut matching = self.queue.iter().filter(|e| e.id().starts_with(to));
        match (matching.next(), matching.next()) {
            (Some(w), None) => Ok(w),
            (Some(_), Some(_)) => Err(Error::new(
                ErrorKind::Invalid,
                format!("{to:?} is the start of more than one waiter's id: give more of it"),
            )),
            (None, _) => Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "no participant {to:?} waits for this lock: `to` must name a waiter (see \
                     `lease status`)"
                ),
            )),
        }
    }

    /// The standing request that names the grant of `token`.
    pub fn yield_for(&self, token: u64) -> Option<&YieldRequest> {
        if super::super::mutants::on(super::super::mutants::Mutant::YieldOutlivesTenure) {
            return self.yield_request.as_ref();
        }
        self.yield_request.as_ref().filter(|y| y.names(token))
    }

    /// The waiter the standing request hands over to, while it waits.
    pub fn yield_to(&self) -> Option<&str> {
        let to = self.yield_request.as_ref()?.to.as_deref()?;
        self.queue.iter().any(|e| e.id() == to).then_some(to)
    }

    /// Drop from the request the tokens no longer granted, and the request with the last of
    /// them; drop its `to` once that one no longer waits (granted, or gone).
    pub(super) fn prune_yield(&mut self) {
        if super::super::mutants::on(super::super::mutants::Mutant::YieldOutlivesTenure) {
            return;
        }
        let Some(mut request) = self.yield_request.take() else {
            return;
        };
        request.tokens.retain(|t| self.granted(*t));
        if request.tokens.is_empty() {
            return;
        }
        let waits = request
            .to
            .as_deref()
            .is_some_and(|to| self.queue.iter().any(|e| e.id() == to));
        if !waits {
            request.to = None;
        }
        self.yield_request = Some(request);
    }

    /// Whether a grant of `token` is listed.
    fn granted(&self, token: u64) -> bool {
        self.grants.iter().any(|g| g.token == Some(token))
    }
}

#[cfg(test)]
mod tests;
