//! The one registry of stores in a process: every URL naming the same store gets the same
//! [`Client`], whichever entry point or binding asks (`Client::for_url`, `StoreUrl::open`, the
//! C ABI, Python, Node). One client per store shares its connections and what it has learned
//! about keys (the versions it wrote, the highest epochs seen), which the protocol relies on
//! when two handles in one process use the same lease.
//!
//! Fork-aware: a forked child starts with an empty registry. The parent's clients hold
//! connections whose tasks ran on the parent's runtime threads, which the child does not have,
//! and a file store's random temp-file names would repeat in every forked sibling; the child
//! leaks the parent's entries rather than dropping them (dropping could touch that runtime).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::client::Client;
use crate::error::Result;
use crate::store::url::{LeaseUrl, StoreUrl};
use crate::store::DynStore;

/// The registry's entry points (defined here, so the client does not depend on its registry).
impl Client {
    /// The shared client for the store of a lease URL, and the lease's key. Every call for the
    /// same store returns the same client, so what it learns about keys is shared.
    pub fn for_url(url: &str) -> Result<(Client, String)> {
        let lease = LeaseUrl::parse(url)?;
        let client = Client::for_store(&lease.store).map_err(|e| e.with_lease(url))?;
        Ok((client, lease.key))
    }

    /// The client of the store at `url`, shared by everything in this process that names the
    /// same store (one registry; a forked child starts a new one).
    pub fn for_store(url: &StoreUrl) -> Result<Client> {
        client(url)
    }
}

impl StoreUrl {
    /// Open the store, or return the one this process already opened for the same URL (the
    /// store of [`Client::for_store`]).
    pub fn open(&self) -> Result<DynStore> {
        Ok(Client::for_store(self)?.store().clone())
    }
}

struct Registry {
    /// The process these clients belong to.
    pid: u32,
    clients: HashMap<StoreUrl, Client>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The client of `store` in this process, opened on first use. Opening does not contact the
/// store.
pub(crate) fn client(store: &StoreUrl) -> Result<Client> {
    let me = std::process::id();
    let mut slot = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    if slot.as_ref().is_none_or(|r| r.pid != me) {
        std::mem::forget(slot.take());
        *slot = Some(Registry {
            pid: me,
            clients: HashMap::new(),
        });
    }
    let registry = slot.as_mut().expect("set above");
    if let Some(client) = registry.clients.get(store) {
        return Ok(client.clone());
    }
    let client = Client::new(store.open_new()?);
    registry.clients.insert(store.clone(), client.clone());
    Ok(client)
}
