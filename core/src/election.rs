//! Leader election: acquire + observe.
//!
//! `campaign` blocks until this participant leads (it holds the lease, renewed in the
//! background), `resign` releases it, `leader` and `observe` tell everyone who leads and at
//! which epoch. The epoch is the leader's fencing token.

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::Result;
use crate::lease::Lease;
use crate::options::LeaseOptions;
use crate::record::Holder;
use crate::status::{HolderJson, LeaseState, Status, Watcher};

/// The current leader of an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub holder: Holder,
    pub epoch: u64,
    pub data: Option<String>,
}

/// A leader as every binding shows it: `{ holder, epoch, data }` (holder as in the status JSON).
impl Serialize for Leader {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct LeaderJson<'a> {
            holder: HolderJson<'a>,
            epoch: u64,
            data: Option<&'a str>,
        }
        LeaderJson {
            holder: HolderJson::from(&self.holder),
            epoch: self.epoch,
            data: self.data.as_deref(),
        }
        .serialize(serializer)
    }
}

impl Leader {
    /// See the `Serialize` impl.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a leader serializes to JSON")
    }

    fn from_status(s: &Status) -> Option<Leader> {
        match (s.state, &s.holder, s.epoch) {
            (LeaseState::Held, Some(h), Some(epoch)) => Some(Leader {
                holder: h.clone(),
                epoch,
                data: s.data.clone(),
            }),
            _ => None,
        }
    }
}

/// One participant in an election on one lease.
pub struct Election {
    client: Client,
    key: String,
    opts: LeaseOptions,
    lease: Mutex<Option<Lease>>,
}

impl Election {
    /// `opts.wait` bounds how long `campaign` waits (unset: as long as it takes); `opts.data`
    /// is published to everyone while this participant leads (an address, say).
    pub fn new(client: Client, key: impl Into<String>, opts: LeaseOptions) -> Election {
        Election {
            client,
            key: key.into(),
            opts,
            lease: Mutex::new(None),
        }
    }

    /// Block until this participant is the leader, and return its lease. Returns the current
    /// lease if it already leads.
    pub async fn campaign(&self) -> Result<Lease> {
        self.campaign_with_cancel(&CancellationToken::new()).await
    }

    pub async fn campaign_with_cancel(&self, cancel: &CancellationToken) -> Result<Lease> {
        if let Some(lease) = self.lease() {
            return Ok(lease);
        }
        let lease = self
            .client
            .acquire_with_cancel(&self.key, &self.opts, cancel)
            .await?;
        *self.lease.lock().unwrap() = Some(lease.clone());
        Ok(lease)
    }

    /// The lease while this participant leads.
    pub fn lease(&self) -> Option<Lease> {
        self.lease.lock().unwrap().clone().filter(Lease::is_held)
    }

    /// Stop leading (release the lease). Does nothing when not leading; fails with
    /// `Lost` if leadership had already been lost.
    pub async fn resign(&self) -> Result<()> {
        let lease = self.lease.lock().unwrap().take();
        match lease {
            Some(lease) => lease.release().await,
            None => Ok(()),
        }
    }

    /// Who leads now, by the store's record.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(Leader::from_status(&self.client.status(&self.key).await?))
    }

    /// Leadership changes: the first `next()` returns the leader now, each later one returns
    /// when the leader (or its epoch) changes, `None` meaning nobody leads.
    pub fn observe(&self, poll: Duration) -> Result<LeaderWatch> {
        Ok(LeaderWatch {
            watcher: self.client.watch(&self.key, poll)?,
            last: None,
        })
    }
}

/// See [`Election::observe`].
pub struct LeaderWatch {
    watcher: Watcher,
    last: Option<Option<(String, u64)>>,
}

impl LeaderWatch {
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            let leader = Leader::from_status(&self.watcher.next().await?);
            let id = leader.as_ref().map(|l| (l.holder.id.clone(), l.epoch));
            if self.last.as_ref() != Some(&id) {
                self.last = Some(id);
                return Ok(leader);
            }
        }
    }
}
