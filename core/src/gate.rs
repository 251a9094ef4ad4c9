//! Fencing for resources outside the store: a [`FencingGate`] admits or rejects a token by the
//! highest epoch seen per resource, kept in memory or in one store object per resource (changed
//! by conditional writes, with the retries of fenced writes: `fence.rs`).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

use crate::client::Client;
use crate::error::{ErrorKind, Result};
use crate::fence::{read_meta, Retries, REQUEST_TIMEOUT};
use crate::protocol::fence::{admission, Admission, Stamp};
use crate::store::url::object_key;
use crate::store::{validate_key, Cond, DynStore, Put};
use crate::token::FencingToken;

/// Admit or reject fencing tokens by the highest epoch seen per resource, for resources outside
/// the store (a database row, an HTTP API): the resource asks the gate before acting on a
/// request that carries a token.
///
/// In memory, the gate protects one process (its state dies with it). In a store, it keeps one
/// small object per resource (`PREFIX/RESOURCE`) changed only by conditional writes, so a fleet
/// of stateless services on many machines can share it.
pub struct FencingGate {
    backend: GateBackend,
}

enum GateBackend {
    Memory(Mutex<HashMap<String, Stamp>>),
    Store { client: Client, prefix: String },
}

impl FencingGate {
    pub fn in_memory() -> FencingGate {
        FencingGate {
            backend: GateBackend::Memory(Mutex::default()),
        }
    }

    /// A gate kept in `store`, one object per resource under `prefix` (read from the store's
    /// root, like [`Client::fenced_get`]'s keys: `fencing`, `./fencing` and `/fencing` are the
    /// same; `..` above the root is refused).
    pub fn in_store(store: DynStore, prefix: &str) -> Result<FencingGate> {
        FencingGate::in_store_of(Client::new(store), prefix)
    }

    /// The store of a gate given by a store URL, and the prefix in it of the gate's objects:
    /// `prefix` read like a relative path from the URL's path (`s3://bucket/locks` with
    /// `fencing`: `locks/fencing`; `/fencing` from the store's root; never above it), as on a
    /// file store opened on that directory. What every binding's `FencingGate(url, prefix)`
    /// opens.
    pub fn store_and_prefix(url: &str, prefix: &str) -> Result<(crate::StoreUrl, String)> {
        let (store, path) = crate::StoreUrl::parse_with_path(url)?;
        let placed = crate::store::url::key_in_dir(&path, prefix.trim_end_matches('/'))
            .map_err(|e| e.context(format!("FencingGate prefix under {url}")))?;
        validate_key(&format!("{placed}/x"))?;
        Ok((store, placed))
    }

    /// A gate kept in `client`'s store (on its clock), one object per resource under `prefix`.
    pub fn in_store_of(client: Client, prefix: &str) -> Result<FencingGate> {
        let prefix = object_key("", prefix.trim_end_matches('/'))?;
        validate_key(&format!("{prefix}/x"))?;
        Ok(FencingGate {
            backend: GateBackend::Store { client, prefix },
        })
    }

    /// Admit `token` for `resource` if its epoch is above the highest admitted so far for that
    /// resource, or equal to it and of the same holder (and remember it); otherwise fail with
    /// [`ErrorKind::Fenced`]. A resource is guarded by one lease: a token of another lease is
    /// refused too.
    pub async fn admit(&self, resource: &str, token: &FencingToken) -> Result<()> {
        match &self.backend {
            GateBackend::Memory(seen) => {
                let mut seen = seen.lock().unwrap();
                if let Admission::Record(fence) = admission(resource, token, seen.get(resource))? {
                    let meta = Stamp::meta(token.lease(), &fence, None, None);
                    seen.insert(resource.to_string(), Stamp::of(&meta));
                }
                Ok(())
            }
            GateBackend::Store { client, prefix } => {
                let key = format!("{prefix}/{resource}");
                validate_key(&key)?;
                let key_url = client.lease_url(&key);
                let mut retries = Retries::new(client, &key_url, "gate admission");
                loop {
                    let (cond, fence) = match read_meta(client, &key).await {
                        Ok(None) => match admission(&key_url, token, None)? {
                            Admission::Record(fence) => (Cond::Create, fence),
                            Admission::AlreadyRecorded => return Ok(()),
                        },
                        Ok(Some(obj)) => {
                            let stamp = Stamp::of(&obj.meta);
                            match admission(&key_url, token, Some(&stamp))? {
                                Admission::AlreadyRecorded => return Ok(()),
                                Admission::Record(fence) => (Cond::Match(obj.version), fence),
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::Unavailable => {
                            retries.unavailable(e).await?;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    // The body names the admission: on S3 a version is the MD5 of the bytes, and
                    // gate objects with equal bodies would all share one version.
                    let body = Bytes::from(format!("{token} {}\n", client.rng.nonce()));
                    let meta = Stamp::meta(token.lease(), &fence, None, None);
                    let put = client.store().put(&key, body, cond, &meta);
                    match client.timed(REQUEST_TIMEOUT, "gate write", put).await {
                        Ok(Put::Written { .. }) => return Ok(()),
                        // Lost a race or an unknown outcome: the next read decides.
                        Ok(Put::ConditionFailed) => retries.another_round()?,
                        Err(e) if e.kind() == ErrorKind::Unavailable => {
                            retries.unavailable(e).await?;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}
