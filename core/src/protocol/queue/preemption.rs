//! Preemption of a queued lock's grants (docs/protocol.md §10, "Preemption"; issue 23): an
//! exclusive request made with `Preempt::EveryEffectFenced` takes the lock at once. Its one
//! conditional write ([`Change::Preempt`](super::Change::Preempt)) removes every grant in its
//! way and grants it, with the next token, ahead of the waiters: the removed grants all
//! conflict with it and hold lower tokens, so every object it writes or fences refuses them
//! from then on (docs/protocol.md §7). What it gives up, as a lease's preemption does, is the
//! exclusion of *belief*: a removed holder believes until its next confirmation of the record,
//! which then reports `LostReason::Preempted`.
//!
//! The record keeps, while the preempting grant is listed, which grants it removed
//! (`"preempted":[{"id","token","by"}]`): that is how a removed holder learns who took its
//! grant. Older versions ignore the field (it changes nothing about who may be granted, so it
//! is not in `requires`); a removed holder of an older version reports its grant removed.

use serde::{Deserialize, Serialize};

use super::{Entry, QueueRecord};
use crate::protocol::mutants::{on, Mutant};

/// A grant a preemption removed, kept while the grant that removed it is listed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PreemptedGrant {
    /// The removed grant's participant id and token.
    pub id: String,
    pub token: u64,
    /// The preempting participant's id.
    pub by: String,
}

impl QueueRecord {
    /// Remove from the queue the preempting `request` (a retried write may find its earlier
    /// join there) and every grant in its way, and put it first in the queue for
    /// [`grant_preemptor`](QueueRecord::grant_preemptor). `false`: it is granted already.
    pub(super) fn preempt_for(&mut self, request: &Entry) -> bool {
        if self.grants.iter().any(|g| g.id() == request.id()) {
            return false;
        }
        self.queue.retain(|e| e.id() != request.id());
        let removed: Vec<(String, u64)> = if on(Mutant::QueuePreemptKeepsGrants) {
            Vec::new()
        } else {
            self.in_the_way(request)
                .iter()
                .map(|g| (g.id().to_string(), g.token.unwrap_or(self.epoch)))
                .collect()
        };
        self.grants
            .retain(|g| !removed.iter().any(|(id, _)| id == g.id()));
        for (id, token) in removed {
            self.preempted.push(PreemptedGrant {
                id,
                token,
                by: request.id().to_string(),
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
    }

    /// The preemption that removed the grant of `id` at `token`: the preemptor's id and token,
    /// while its grant is listed.
    pub fn preempted_by(&self, id: &str, token: u64) -> Option<(&str, u64)> {
        let p = self
            .preempted
            .iter()
            .find(|p| p.id == id && p.token == token)?;
        let by = self.grants.iter().find(|g| g.id() == p.by)?;
        Some((by.id(), by.token.unwrap_or(self.epoch)))
    }

    /// Drop what no longer names a listed preempting grant (its holder left, or was removed).
    pub(super) fn prune_preempted(&mut self) {
        let grants = &self.grants;
        self.preempted
            .retain(|p| grants.iter().any(|g| g.id() == p.by));
    }
}
