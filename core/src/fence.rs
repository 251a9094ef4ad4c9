//! Fencing the store enforces.
//!
//! A lease cannot stop a holder that was paused (GC, SIGSTOP, a frozen VM) between checking its
//! lease and acting, and wakes up after someone else took over. The epoch is the fencing token;
//! here the *store* rejects the zombie's writes:
//!
//! - Where: a fenced key is read like a relative path from the lease's own directory, on every
//!   store ([`object_key`]): `x` and `./x` beside the lease, `jobs/x` below, `../x` one level
//!   up (never above the store's root), `/x` at the store's root.
//! - `Lease::fenced_put(key, bytes)` stamps the object with the writer's lease, epoch and holder
//!   (metadata: S3 user metadata, an extended attribute on a file) and writes it with
//!   `Match(version)` / `Create` after checking that the stored epoch is not higher (nor equal
//!   and another holder's). On a failed condition it reads again and checks again. Once a
//!   writer with epoch E has written an object, no writer with a lower epoch can change it: the
//!   zombie's conditional write names a version that E's write replaced, so it fails, and the
//!   re-read shows E.
//! - `Lease::fenced_put_if(key, bytes, expected)` writes only if the object is still at the
//!   version the caller read (or still absent): a read-modify-write that loses no update.
//!   A change by a writer of the same or a lower epoch is `Conflict`; `fenced_update` retries.
//! - Every write carries a nonce, and names the nonce of the object it replaced, so a writer
//!   whose reply was lost recognises its own write even after a newer holder replaced it: a
//!   write that landed is never reported `Fenced`. When that cannot be told (several writes
//!   since), the outcome is reported unknown (`Unavailable`), never `Fenced`.
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
use crate::protocol::fence::{
    admission, user_bytes, verdict, Admission, Expect, FenceEvent, FenceOp, FenceStep, Known,
    PinOp, PinStep, Stamp, MAX_ROUNDS, UNAVAILABLE_BUDGET,
};
use crate::protocol::Backoff;
use crate::store::url::object_key;
use crate::store::{validate_key, Cond, Delete, DynStore, Get, GetOptions, Object, Put, Version};
use crate::token::FencingToken;

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
    /// The holder id of the writer.
    pub holder: Option<String>,
    pub version: Version,
}

/// Retries of a fenced delete or a gate admission: backoff while the store is unavailable (up
/// to a time budget), a bounded number of rounds while others keep changing the object.
struct Retries<'a> {
    client: &'a Client,
    key_url: &'a str,
    what: &'static str,
    backoff: Backoff,
    give_up_at: crate::clock::Instant,
    rounds: usize,
}

impl<'a> Retries<'a> {
    fn new(client: &'a Client, key_url: &'a str, what: &'static str) -> Self {
        Retries {
            client,
            key_url,
            what,
            backoff: Backoff::between(Duration::from_millis(50), Duration::from_secs(2)),
            give_up_at: client.clock().now() + UNAVAILABLE_BUDGET,
            rounds: 0,
        }
    }

    /// After an `Unavailable` error: wait a backoff, or give up with what happened.
    async fn unavailable(&mut self, e: Error) -> Result<()> {
        let clock = self.client.clock();
        if clock.now() >= self.give_up_at {
            return Err(e
                .context(format!(
                    "{}: the store was unavailable for {} during a {}",
                    self.key_url,
                    crate::format_duration(UNAVAILABLE_BUDGET),
                    self.what
                ))
                .with_lease(self.key_url));
        }
        clock.sleep(self.backoff.next(&self.client.inner.rng)).await;
        Ok(())
    }

    /// Before another round against a changed object: fail once there were too many.
    fn another_round(&mut self) -> Result<()> {
        self.rounds += 1;
        if self.rounds > MAX_ROUNDS {
            return Err(Error::unavailable(format!(
                "{} kept changing under a {}; gave up after {MAX_ROUNDS} rounds",
                self.key_url, self.what
            ))
            .with_lease(self.key_url));
        }
        Ok(())
    }
}

/// Read an object's metadata (no contents).
async fn read_meta(client: &Client, key: &str) -> Result<Option<Object>> {
    let get = client.store().get(
        key,
        GetOptions {
            if_none_match: None,
            max_len: Some(0),
        },
    );
    match client.timed(REQUEST_TIMEOUT, "read", get).await? {
        Get::Found(obj) => Ok(Some(obj)),
        Get::NotFound { .. } => Ok(None),
        Get::NotModified { .. } => unreachable!("no if-none-match was sent"),
    }
}

impl Lease {
    /// The key in the store of the object `key` names for this lease: `key` read like a
    /// relative path from the lease's directory (`x`, `./x`: beside the lease; `jobs/x`: below
    /// it; `../x`: one level up, never above the store's root; `/x`: at the store's root). Every
    /// fenced operation of this lease places its key so ([`object_key`]).
    pub fn object_key(&self, key: &str) -> Result<String> {
        object_key(self.key(), key).map_err(|e| e.with_lease(self.url()))
    }

    /// The URL of the object `key` names for this lease (see [`Lease::object_key`]).
    pub fn object_url(&self, key: &str) -> Result<String> {
        Ok(self.client().lease_url(&self.object_key(key)?))
    }

    /// Read the object `key` names for this lease (placed as [`Lease::object_key`] says), with
    /// the epoch, lease and holder of the fenced write that wrote it.
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        let key = self.object_key(key)?;
        self.client().fenced_get(&format!("/{key}")).await
    }

    /// Write `bytes` at `key` (placed as [`Lease::object_key`] says) unless a holder with a higher epoch of
    /// this lease has written it; then fail with [`ErrorKind::Fenced`]. Returns the new version
    /// (empty when the write landed but a newer writer replaced it before this call learned its
    /// version: it happened, and nothing can be conditioned on it any more).
    ///
    /// Not a read-modify-write: another writer of this epoch or a lower one may have written
    /// between a [`Client::fenced_get`] and this write. Use [`Lease::fenced_put_if`] or
    /// [`Lease::fenced_update`] for that.
    pub async fn fenced_put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        self.fenced_write(key, bytes.into(), Expect::Any).await
    }

    /// Write `bytes` at `key` only if the object is still at `expected` (as returned by
    /// [`Client::fenced_get`] or an earlier fenced write; its etag alone will do), or still
    /// absent when `expected` is `None`. A change by a holder with a higher epoch is [`ErrorKind::Fenced`]; any other
    /// change since is [`ErrorKind::Conflict`] (read again and decide again).
    pub async fn fenced_put_if(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: Option<&Version>,
    ) -> Result<Version> {
        let expect = match expected {
            Some(v) => Expect::Version(v.clone()),
            None => Expect::Absent,
        };
        self.fenced_write(key, bytes.into(), expect).await
    }

    /// Read-modify-write `key`: `f` gets the current object (or `None`) and returns the new
    /// contents, written with [`Lease::fenced_put_if`]; on a [`ErrorKind::Conflict`] it reads
    /// and calls `f` again. No update is lost, and none applied twice.
    pub async fn fenced_update<F>(&self, key: &str, mut f: F) -> Result<Version>
    where
        F: FnMut(Option<&FencedObject>) -> Bytes,
    {
        let key_url = self.object_url(key)?;
        let mut retries = Retries::new(self.client(), &key_url, "fenced update");
        loop {
            let current = self.fenced_get(key).await?;
            let next = f(current.as_ref());
            match self
                .fenced_put_if(key, next, current.as_ref().map(|o| &o.version))
                .await
            {
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    retries.another_round()?;
                    let pause = retries.backoff.next(&self.client().inner.rng);
                    self.client().clock().sleep(pause).await;
                }
                other => return other,
            }
        }
    }

    /// Carry out a [`FenceOp`]'s steps.
    async fn fenced_write(&self, key: &str, bytes: Bytes, expect: Expect) -> Result<Version> {
        let client = self.client();
        let key = &self.fenced_key(key)?;
        self.writes_allowed()?;
        let key_url = client.lease_url(key);
        let rng = &client.inner.rng;
        let cached = self.fence_cache().lock().unwrap().get(key).cloned();
        let unique = client.store().capabilities().versions_are_unique;
        let mut op = FenceOp::new(
            &key_url,
            self.token(),
            rng.nonce(),
            bytes,
            expect,
            cached,
            unique,
        );
        let mut event = FenceEvent::Start;
        let outcome = loop {
            match op.step(event, client.clock().now(), rng) {
                FenceStep::ReadMeta => event = FenceEvent::Read(read_meta(client, key).await),
                FenceStep::Put { bytes, cond, meta } => {
                    let put = client.store().put(key, bytes, cond, &meta);
                    event =
                        FenceEvent::Put(client.timed(REQUEST_TIMEOUT, "fenced write", put).await);
                }
                FenceStep::Sleep(d) => {
                    client.clock().sleep(d).await;
                    event = FenceEvent::Slept;
                }
                FenceStep::Done(outcome) => break outcome,
            }
        };
        // What this holder wrote last saves the read of its next write there.
        let mut cache = self.fence_cache().lock().unwrap();
        match &outcome {
            Ok(v) if *v != Version::default() => {
                cache.insert(key.to_string(), op.known(v.clone()));
            }
            _ => {
                cache.remove(key);
            }
        }
        outcome
    }

    /// Read the object `key` names for this lease (placed as [`Lease::object_key`] says) and
    /// fence it with this lease's token: from the moment this returns, no request whose token
    /// this one's refuses can change it — for a shared grant (a reader), no writer whose grant
    /// ended before this one began (docs/protocol.md §7, "What each token fences"). A stale
    /// writer's write, conditional on an older version or not, then fails `Fenced`, so the
    /// data read does not change under this holder while it holds, except by writers of
    /// disjoint scopes (which promise not to touch this one's part).
    ///
    /// Costs 1 GET, plus 1 conditional PUT of the same bytes with this token added to the
    /// object's metadata the first time a grant reads the object (none when the object's fence
    /// already refuses all this token would: read again under the same grant, or after a later
    /// reader). Where nothing is, it leaves an empty marker that every fenced read sees as
    /// absent (`None`), so a stale writer cannot create the object under the readers either.
    /// Returns the object as read, or `None`.
    pub async fn fenced_read(&self, key: &str) -> Result<Option<FencedObject>> {
        let client = self.client();
        let key = &self.fenced_key(key)?;
        let key_url = client.lease_url(key);
        let rng = &client.inner.rng;
        let unique = client.store().capabilities().versions_are_unique;
        let mut op = PinOp::new(&key_url, self.token(), rng.nonce(), unique);
        let mut event = FenceEvent::Start;
        let outcome = loop {
            match op.step(event, client.clock().now(), rng) {
                PinStep::Read => {
                    let get = client.store().get(key, GetOptions::default());
                    event = FenceEvent::Read(
                        match client.timed(REQUEST_TIMEOUT, "fenced read", get).await {
                            Ok(Get::Found(obj)) => Ok(Some(obj)),
                            Ok(_) => Ok(None),
                            Err(e) => Err(e),
                        },
                    );
                }
                PinStep::Put { bytes, cond, meta } => {
                    let put = client.store().put(key, bytes, cond, &meta);
                    event =
                        FenceEvent::Put(client.timed(REQUEST_TIMEOUT, "fenced read", put).await);
                }
                PinStep::Sleep(d) => {
                    client.clock().sleep(d).await;
                    event = FenceEvent::Slept;
                }
                PinStep::Done(outcome) => break outcome,
            }
        };
        let obj = outcome?;
        let mut cache = self.fence_cache().lock().unwrap();
        match obj {
            Some(obj) => {
                let stamp = Stamp::of(&obj.meta);
                // The object as it stands: a write by this holder next needs no read.
                match &stamp.write {
                    Some(w) => cache.insert(
                        key.to_string(),
                        Known {
                            version: obj.version.clone(),
                            write: w.clone(),
                            fence: stamp.fence.clone(),
                        },
                    ),
                    None => cache.remove(key),
                };
                Ok(fenced_object(obj, stamp))
            }
            None => Ok(None),
        }
    }

    /// Delete `key` unless a holder with a higher epoch has written it (then `Fenced`).
    /// Returns false if there was nothing to delete. Needs a store with conditional deletes.
    ///
    /// A deleted key carries no fence any more: a zombie could create it again. Where that
    /// matters, write an empty value with [`Lease::fenced_put`] instead of deleting.
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        let client = self.client();
        let key = &self.fenced_key(key)?;
        let key_url = client.lease_url(key);
        if !client.store().capabilities().conditional_delete {
            return Err(Error::store(format!(
                "{} has no conditional delete, so fenced deletes are impossible there; write an empty value with a fenced put instead",
                client.store().url()
            )));
        }
        self.writes_allowed()?;
        let token = self.token();
        let mut retries = Retries::new(client, &key_url, "fenced delete");
        // A delete was sent whose outcome is unknown: an object found gone is then our doing.
        let mut sent = false;
        loop {
            let obj = match read_meta(client, key).await {
                Ok(Some(obj)) => obj,
                Ok(None) => return Ok(sent),
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    retries.unavailable(e).await?;
                    continue;
                }
                Err(e) => return Err(e.with_lease(&key_url)),
            };
            let stamp = Stamp::of(&obj.meta);
            verdict(&key_url, &token, &stamp)?;
            if stamp.absent {
                // A fenced read's marker: absent to its readers, and it keeps them fenced.
                return Ok(sent);
            }
            let delete = client.store().delete(key, &obj.version);
            match client.timed(REQUEST_TIMEOUT, "fenced delete", delete).await {
                Ok(Delete::Deleted) => {
                    self.fence_cache().lock().unwrap().remove(key);
                    return Ok(true);
                }
                Ok(Delete::ConditionFailed) => retries.another_round()?,
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    sent = true;
                    retries.unavailable(e).await?;
                }
                Err(e) => return Err(e.with_lease(&key_url)),
            }
        }
    }

    /// The store key of a fenced write's `key`: placed by the rule, and not the lease's own
    /// record under any spelling.
    fn fenced_key(&self, key: &str) -> Result<String> {
        let placed = self.object_key(key)?;
        if placed == self.key() {
            return Err(Error::invalid(format!(
                "{key:?} is the lease record itself; fenced writes are for other objects"
            ))
            .with_lease(self.url()));
        }
        if let Some(grant) = self.grant() {
            if placed.starts_with(&format!("{}.q/", grant.key)) {
                return Err(Error::invalid(format!(
                    "{key:?} is a session of the lock's participants; fenced writes are for \
                     other objects"
                ))
                .with_lease(self.url()));
            }
        }
        Ok(placed)
    }

    /// Fenced writes and deletes need an exclusive grant. Shared holders (readers, permits)
    /// hold at once with overlapping scopes, so no order of their tokens says which of them
    /// may write; they fence what they read instead ([`Lease::fenced_read`]).
    fn writes_allowed(&self) -> Result<()> {
        match self.grant() {
            Some(grant) if grant.mode == crate::protocol::queue::Mode::Shared => {
                Err(Error::invalid(format!(
                    "fenced writes need an exclusive grant; {} holds {} shared (token {}): \
                     shared holders hold at once, so their tokens cannot order their writes; \
                     a reader fences what it reads with fenced_read",
                    self.holder().describe(),
                    grant.url,
                    grant.token
                ))
                .with_lease(self.url()))
            }
            _ => Ok(()),
        }
    }
}

impl Client {
    /// Read an object with the epoch, lease and holder of the fenced write that wrote it.
    ///
    /// A client has no lease, so `key` is read from the store's root (`x`, `./x`, `/x`: the
    /// same object; `jobs/x` below; `..` above the root is refused). The object a lease's
    /// `fenced_put("x")` wrote is [`Lease::object_key`]`("x")` here, or
    /// [`Lease::fenced_get`]`("x")`; from a lease's URL, [`object_key`]`(lease_key, "x")`.
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        let key = &object_key("", key).map_err(|e| e.with_lease(self.lease_url(key)))?;
        let url = self.lease_url(key);
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
                let stamp = Stamp::of(&obj.meta);
                Ok(fenced_object(obj, stamp))
            }
            _ => Ok(None),
        }
    }
}

/// An object as fenced reads return it; `None` for a fenced read's marker of absence.
fn fenced_object(obj: Object, stamp: Stamp) -> Option<FencedObject> {
    if stamp.absent {
        return None;
    }
    Some(FencedObject {
        bytes: user_bytes(obj.bytes.unwrap_or_default(), &obj.meta),
        epoch: stamp.epoch,
        lease: stamp.lease,
        holder: stamp.holder,
        version: obj.version,
    })
}

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
                    let body = Bytes::from(format!("{token} {}\n", client.inner.rng.nonce()));
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
