//! Fencing the store enforces.
//!
//! A lease cannot stop a holder that was paused (GC, SIGSTOP, a frozen VM) between checking its
//! lease and acting, and wakes up after someone else took over. The epoch is the fencing token;
//! here the *store* rejects the zombie's writes:
//!
//! - `Lease::fenced_put(key, bytes)` stamps the object with the writer's lease and epoch
//!   (metadata: S3 user metadata, an extended attribute on a file) and writes it with
//!   `Match(version)` / `Create` after checking that the stored epoch is not higher. On a failed
//!   condition it reads again and checks again. Once a writer with epoch E has written an object,
//!   no writer with a lower epoch can change it: the zombie's conditional write names a version
//!   that E's write replaced, so it fails, and the re-read shows E.
//! - A write whose outcome is unknown is resolved by reading back: each write carries a nonce.
//! - Cost: 1 conditional write when this holder wrote the object last (its version is cached),
//!   else 1 read + 1 conditional write.
//! - `FencingGate` serves resources outside the store: admit or reject a token by the highest
//!   epoch seen per resource, kept in memory or in a store object.
//!
//! `fenced_put` does not consult the holder's own deadline: that is `ensure_held`'s job, and the
//! store's check is what holds when the holder is paused right after `ensure_held`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::store::{validate_key, Cond, Delete, DynStore, Get, GetOptions, Meta, Put, Version};
use crate::token::FencingToken;

/// Metadata keys of fenced objects.
pub const META_EPOCH: &str = "lease-epoch";
pub const META_LEASE: &str = "lease-name";
pub const META_WRITE: &str = "lease-write";

/// How many times a fenced write re-reads after losing a race before giving up.
const MAX_ROUNDS: usize = 32;
/// Timeout of one store request of a fenced operation.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// An object as written by a fenced write.
#[derive(Debug, Clone)]
pub struct FencedObject {
    pub bytes: Bytes,
    /// The epoch of the writer, when a fenced write wrote it.
    pub epoch: Option<u64>,
    /// The lease (URL) the writer held.
    pub lease: Option<String>,
    pub version: Version,
}

/// Metadata values are printable ASCII (what S3 headers keep intact): escape the rest.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The (lease, epoch) a fenced object carries, if any.
fn stamp_of(meta: &Meta) -> (Option<String>, Option<u64>) {
    (
        meta.get(META_LEASE).map(|l| unescape(l)),
        meta.get(META_EPOCH).and_then(|e| e.parse().ok()),
    )
}

/// May a writer holding `token` change something last changed under (`lease`, `epoch`)?
fn verdict(
    what: &str,
    token: &FencingToken,
    lease: Option<&str>,
    epoch: Option<u64>,
) -> Result<()> {
    if let Some(lease) = lease.filter(|l| *l != token.lease()) {
        return Err(Error::new(
            ErrorKind::Fenced,
            format!(
                "{what} was written under another lease ({lease}); a token of {} cannot change it",
                token.lease()
            ),
        )
        .with_lease(token.lease()));
    }
    match epoch {
        Some(stored) if stored > token.epoch() => Err(Error::new(
            ErrorKind::Fenced,
            format!(
                "{what} was written at epoch {stored}, newer than this holder's epoch {}: refused",
                token.epoch()
            ),
        )
        .with_lease(token.lease())
        .with_epoch(stored)),
        _ => Ok(()),
    }
}

/// May a writer holding `token` change an object carrying `meta`?
fn check(key_url: &str, token: &FencingToken, meta: &Meta) -> Result<()> {
    let (lease, epoch) = stamp_of(meta);
    verdict(key_url, token, lease.as_deref(), epoch)
}

impl Lease {
    /// Write `bytes` at `key` (in this lease's store) unless a holder with a higher epoch of
    /// this lease has written it; then fail with [`ErrorKind::Fenced`]. Returns the new version.
    pub async fn fenced_put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        let bytes = bytes.into();
        let client = self.client();
        let key_url = client.lease_url(key);
        self.check_fenced_key(key)?;
        let token = self.token();
        let nonce = client.inner.rng.hex_id();
        let meta = Meta::from([
            (META_EPOCH.to_string(), token.epoch().to_string()),
            (META_LEASE.to_string(), escape(token.lease())),
            (META_WRITE.to_string(), nonce.clone()),
        ]);
        let mut cond = self
            .fence_cache()
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .map(Cond::Match);
        for _ in 0..MAX_ROUNDS {
            let cond_now = match cond.take() {
                Some(c) => c,
                None => match client
                    .timed(
                        REQUEST_TIMEOUT,
                        "read",
                        client.store().get(
                            key,
                            GetOptions {
                                if_none_match: None,
                                max_len: Some(0),
                            },
                        ),
                    )
                    .await
                {
                    Ok(Get::NotFound { .. }) => Cond::Create,
                    Ok(Get::Found(obj)) => {
                        if obj.meta.get(META_WRITE) == Some(&nonce) {
                            // Our write landed; its reply was lost or it was resent.
                            self.fence_cache()
                                .lock()
                                .unwrap()
                                .insert(key.to_string(), obj.version.clone());
                            return Ok(obj.version);
                        }
                        check(&key_url, &token, &obj.meta)?;
                        Cond::Match(obj.version)
                    }
                    Ok(Get::NotModified { .. }) => unreachable!("no if-none-match was sent"),
                    Err(e) if e.kind() == ErrorKind::Unavailable => {
                        client.clock().sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(e) => return Err(e.with_lease(&key_url)),
                },
            };
            let put = client.store().put(key, bytes.clone(), cond_now, &meta);
            match client.timed(REQUEST_TIMEOUT, "fenced write", put).await {
                Ok(Put::Written { version, .. }) => {
                    self.fence_cache()
                        .lock()
                        .unwrap()
                        .insert(key.to_string(), version.clone());
                    return Ok(version);
                }
                // Someone else wrote, or the outcome is unknown: read, and check again.
                Ok(Put::ConditionFailed) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => {}
                Err(e) => return Err(e.with_lease(&key_url)),
            }
            self.fence_cache().lock().unwrap().remove(key);
        }
        Err(Error::unavailable(format!(
            "{key_url} kept changing under a fenced write; giving up after {MAX_ROUNDS} rounds"
        ))
        .with_lease(key_url))
    }

    /// Delete `key` unless a holder with a higher epoch has written it (then `Fenced`).
    /// Returns false if there was nothing to delete. Needs a store with conditional deletes.
    ///
    /// A deleted key carries no fence any more: a zombie could create it again. Where that
    /// matters, write an empty value with [`Lease::fenced_put`] instead of deleting.
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        let client = self.client();
        let key_url = client.lease_url(key);
        self.check_fenced_key(key)?;
        if !client.store().capabilities().conditional_delete {
            return Err(Error::store(format!(
                "{} has no conditional delete, so fenced deletes are impossible there; write an empty value with fenced_put instead",
                client.store().url()
            )));
        }
        let token = self.token();
        for _ in 0..MAX_ROUNDS {
            let obj = match client
                .timed(
                    REQUEST_TIMEOUT,
                    "read",
                    client.store().get(
                        key,
                        GetOptions {
                            if_none_match: None,
                            max_len: Some(0),
                        },
                    ),
                )
                .await
            {
                Ok(Get::NotFound { .. }) => return Ok(false),
                Ok(Get::Found(obj)) => obj,
                Ok(Get::NotModified { .. }) => unreachable!("no if-none-match was sent"),
                Err(e) if e.kind() == ErrorKind::Unavailable => continue,
                Err(e) => return Err(e.with_lease(&key_url)),
            };
            check(&key_url, &token, &obj.meta)?;
            match client
                .timed(
                    REQUEST_TIMEOUT,
                    "fenced delete",
                    client.store().delete(key, &obj.version),
                )
                .await
            {
                Ok(Delete::Deleted) => {
                    self.fence_cache().lock().unwrap().remove(key);
                    return Ok(true);
                }
                Ok(Delete::ConditionFailed) => {}
                Err(e) if e.kind() == ErrorKind::Unavailable => {}
                Err(e) => return Err(e.with_lease(&key_url)),
            }
        }
        Err(
            Error::unavailable(format!("{key_url} kept changing under a fenced delete"))
                .with_lease(key_url),
        )
    }

    fn check_fenced_key(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        if key == self.key() {
            return Err(Error::invalid(format!(
                "{key:?} is the lease record itself; fenced writes are for other objects"
            )));
        }
        Ok(())
    }
}

impl Client {
    /// Read an object with the epoch and lease of the fenced write that wrote it.
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        let url = self.lease_url(key);
        validate_key(key).map_err(|e| e.with_lease(&url))?;
        match self
            .timed(
                REQUEST_TIMEOUT,
                "read",
                self.store().get(key, GetOptions::default()),
            )
            .await
            .map_err(|e| e.with_lease(&url))?
        {
            Get::Found(obj) => {
                let (lease, epoch) = stamp_of(&obj.meta);
                Ok(Some(FencedObject {
                    bytes: obj.bytes.unwrap_or_default(),
                    epoch,
                    lease,
                    version: obj.version,
                }))
            }
            _ => Ok(None),
        }
    }
}

/// Admit or reject fencing tokens by the highest epoch seen per resource, for resources outside
/// the store (a database row, an HTTP API): the resource asks the gate before acting on a
/// request that carries a token.
///
/// In memory, the gate protects one process. In a store, it keeps one small object per resource
/// (`PREFIX/RESOURCE`) changed only by conditional writes, so a fleet of stateless services can
/// share it.
pub struct FencingGate {
    backend: GateBackend,
}

enum GateBackend {
    Memory(Mutex<HashMap<String, (String, u64)>>),
    Store { client: Client, prefix: String },
}

impl FencingGate {
    pub fn in_memory() -> FencingGate {
        FencingGate {
            backend: GateBackend::Memory(Mutex::default()),
        }
    }

    /// A gate kept in `store`, one object per resource under `prefix`.
    pub fn in_store(store: DynStore, prefix: &str) -> Result<FencingGate> {
        let prefix = prefix.trim_matches('/').to_string();
        validate_key(&format!("{prefix}/x"))?;
        Ok(FencingGate {
            backend: GateBackend::Store {
                client: Client::new(store),
                prefix,
            },
        })
    }

    /// Admit `token` for `resource` if its epoch is at least the highest admitted so far for
    /// that resource (and remember it); otherwise fail with [`ErrorKind::Fenced`]. A resource
    /// is guarded by one lease: a token of another lease is refused too.
    pub async fn admit(&self, resource: &str, token: &FencingToken) -> Result<()> {
        match &self.backend {
            GateBackend::Memory(seen) => {
                let mut seen = seen.lock().unwrap();
                let entry = seen
                    .entry(resource.to_string())
                    .or_insert_with(|| (token.lease().to_string(), 0));
                verdict(resource, token, Some(&entry.0), Some(entry.1))?;
                entry.1 = entry.1.max(token.epoch());
                Ok(())
            }
            GateBackend::Store { client, prefix } => {
                let key = format!("{prefix}/{resource}");
                validate_key(&key)?;
                let key_url = client.lease_url(&key);
                let meta = Meta::from([
                    (META_EPOCH.to_string(), token.epoch().to_string()),
                    (META_LEASE.to_string(), escape(token.lease())),
                ]);
                for _ in 0..MAX_ROUNDS {
                    let cond = match client
                        .timed(
                            REQUEST_TIMEOUT,
                            "read",
                            client.store().get(
                                &key,
                                GetOptions {
                                    if_none_match: None,
                                    max_len: Some(0),
                                },
                            ),
                        )
                        .await
                    {
                        Ok(Get::NotFound { .. }) => Cond::Create,
                        Ok(Get::Found(obj)) => {
                            check(&key_url, token, &obj.meta)?;
                            if stamp_of(&obj.meta).1 == Some(token.epoch()) {
                                return Ok(()); // already recorded
                            }
                            Cond::Match(obj.version)
                        }
                        Ok(Get::NotModified { .. }) => unreachable!("no if-none-match was sent"),
                        Err(e) if e.kind() == ErrorKind::Unavailable => continue,
                        Err(e) => return Err(e),
                    };
                    match client
                        .timed(
                            REQUEST_TIMEOUT,
                            "gate write",
                            client.store().put(&key, Bytes::new(), cond, &meta),
                        )
                        .await
                    {
                        Ok(Put::Written { .. }) => return Ok(()),
                        // Lost a race or an unknown outcome: the next read decides.
                        Ok(Put::ConditionFailed) => {}
                        Err(e) if e.kind() == ErrorKind::Unavailable => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(Error::unavailable(format!(
                    "{key_url} kept changing; the gate could not decide"
                )))
            }
        }
    }
}
