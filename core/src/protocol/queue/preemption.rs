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

use super::{Entry, QueueRecord};
use crate::protocol::mutants::{on, Mutant};

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

impl QueueRecord {
    /// Remove from the queue the preempting `request` (a retried write may find its earlier
    /// join there) and every grant in its way, name them as the latest preemption (when it
    /// removes any), and put the request first in the queue for
    /// [`grant_preemptor`](QueueRecord::grant_preemptor). `false`: it is granted already.
    pub(super) fn preempt_for(&mut self, request: &Entry) -> bool {
        if self.grants.iter().any(|g| g.id() == request.id()) {
            return false;
        }
        self.queue.retain(|e| e.id() != request.id());
        let removed: Vec<PreemptedGrant> = if on(Mutant::QueuePreemptKeepsGrants) {
            Vec::new()
        } else {
            self.in_the_way(request)
                .iter()
                .map(|g| PreemptedGrant {
                    id: g.id().to_string(),
                    token: g.token.unwrap_or(self.epoch),
                })
                .collect()
        };
        self.grants
            .retain(|g| !removed.iter().any(|r| r.id == g.id()));
        if !removed.is_empty() {
            self.preempted = Some(Preemption {
                by: request.id().to_string(),
                // Set with its grant, in `grant_preemptor`.
                token: 0,
                removed,
            });
        }
        let mut entry = request.clone();
        entry.token = None;
        entry.passed = 0;
        self.queue.insert(0, entry);
        true
    }

    /// Grant the preempting participant `id` (first in the queue, nothing in its way) with the
    /// next token above `floor`, before the other waiters are settled.
    pub(super) fn grant_preemptor(&mut self, id: &str, floor: u64) {
        let Some(at) = self.queue.iter().position(|e| e.id() == id) else {
            return;
        };
        let mut grant = self.queue.remove(at);
        self.epoch = self.epoch.max(floor) + 1;
        grant.token = Some(self.epoch);
        grant.priority = 0;
        grant.passed = 0;
        self.grants.push(grant);
        if let Some(p) = self.preempted.as_mut().filter(|p| p.by == id) {
            p.token = self.epoch;
        }
    }

    /// The preemption that removed the grant of `id` at `token`: the preemptor's id and token.
    pub fn preempted_by(&self, id: &str, token: u64) -> Option<(&str, u64)> {
        let p = self.preempted.as_ref()?;
        p.removed
            .iter()
            .any(|r| r.id == id && r.token == token)
            .then_some((p.by.as_str(), p.token))
    }
}
