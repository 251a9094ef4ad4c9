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
//! - `FencingGate` (`gate.rs`) serves resources outside the store: admit or reject a token by the
//!   highest epoch seen per resource, kept in memory or in a store object.
//!
//! The operations are [`Lease`](crate::Lease)'s methods, carried out here by a `Fencer` (what
//! they need of the lease), and [`Client::fenced_get`](crate::Client::fenced_get) (`read`).
//!
//! `fenced_put` does not consult the holder's own deadline: that is `ensure_held`'s job, and the
//! store's check is what holds when the holder is paused right after `ensure_held`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::io::Io;
use crate::protocol::fence::{
    user_bytes, verdict, Expect, FenceEvent, FenceOp, FenceStep, Known, PinOp, PinStep, Stamp,
    MAX_ROUNDS, UNAVAILABLE_BUDGET,
};
use crate::protocol::queue::Mode;
use crate::protocol::Backoff;
use crate::record::Holder;
use crate::store::url::object_key;
use crate::store::{Delete, Get, GetOptions, Object, Version};
use crate::token::FencingToken;

/// Timeout of one store request of a fenced operation.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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
pub(crate) struct Retries<'a> {
    client: &'a Io,
    key_url: &'a str,
    what: &'static str,
    backoff: Backoff,
    give_up_at: crate::clock::Instant,
    rounds: usize,
}

impl<'a> Retries<'a> {
    pub(crate) fn new(client: &'a Io, key_url: &'a str, what: &'static str) -> Self {
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
    pub(crate) async fn unavailable(&mut self, e: Error) -> Result<()> {
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
        clock.sleep(self.backoff.next(&self.client.rng)).await;
        Ok(())
    }

    /// Before another round against a changed object: fail once there were too many.
    pub(crate) fn another_round(&mut self) -> Result<()> {
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
pub(crate) async fn read_meta(client: &Io, key: &str) -> Result<Option<Object>> {
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

/// What a fenced operation needs of the lease it is made under. [`Lease`](crate::Lease)'s
/// fenced methods build one and hand the call to it, so this file does not need the lease.
pub(crate) struct Fencer<'a> {
    pub(crate) io: &'a Io,
    pub(crate) key: &'a str,
    pub(crate) url: &'a str,
    pub(crate) token: FencingToken,
    pub(crate) holder: &'a Holder,
    pub(crate) grant: Option<GrantRef<'a>>,
    /// Each object as this holder last wrote or fenced it (version, write nonce, fence).
    pub(crate) cache: &'a Mutex<HashMap<String, Known>>,
}

/// A queued lock's grant, as fenced writes see it.
pub(crate) struct GrantRef<'a> {
    pub(crate) key: &'a str,
    pub(crate) url: &'a str,
    pub(crate) token: u64,
    pub(crate) mode: Mode,
}

/// The lease's parts under the names the operations below use.
impl Fencer<'_> {
    fn key(&self) -> &str {
        self.key
    }

    fn url(&self) -> &str {
        self.url
    }

    fn client(&self) -> &Io {
        self.io
    }

    fn token(&self) -> FencingToken {
        self.token.clone()
    }

    fn holder(&self) -> &Holder {
        self.holder
    }

    fn grant(&self) -> Option<&GrantRef<'_>> {
        self.grant.as_ref()
    }

    fn fence_cache(&self) -> &Mutex<HashMap<String, Known>> {
        self.cache
    }
}

/// The fenced operations of a lease (documented on [`Lease`](crate::Lease)'s methods).
impl Fencer<'_> {
    pub(crate) fn object_key(&self, key: &str) -> Result<String> {
        object_key(self.key(), key).map_err(|e| e.with_lease(self.url()))
    }

    pub(crate) fn object_url(&self, key: &str) -> Result<String> {
        Ok(self.client().lease_url(&self.object_key(key)?))
    }

    pub(crate) async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        let key = self.object_key(key)?;
        read(self.client(), &format!("/{key}")).await
    }

    pub(crate) async fn fenced_put(&self, key: &str, bytes: Bytes) -> Result<Version> {
        self.fenced_write(key, bytes, Expect::Any).await
    }

    pub(crate) async fn fenced_put_if(
        &self,
        key: &str,
        bytes: Bytes,
        expected: Option<&Version>,
    ) -> Result<Version> {
        let expect = match expected {
            Some(v) => Expect::Version(v.clone()),
            None => Expect::Absent,
        };
        self.fenced_write(key, bytes, expect).await
    }

    pub(crate) async fn fenced_update<F>(&self, key: &str, mut f: F) -> Result<Version>
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
                    let pause = retries.backoff.next(&self.client().rng);
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
        let rng = &client.rng;
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

    /// Carry out a [`PinOp`]'s steps ([`Lease::fenced_read`](crate::Lease::fenced_read)).
    pub(crate) async fn fenced_read(&self, key: &str) -> Result<Option<FencedObject>> {
        let client = self.client();
        let key = &self.fenced_key(key)?;
        let key_url = client.lease_url(key);
        let rng = &client.rng;
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

    pub(crate) async fn fenced_delete(&self, key: &str) -> Result<bool> {
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
    /// may write; they fence what they read instead ([`Lease::fenced_read`](crate::Lease::fenced_read)).
    fn writes_allowed(&self) -> Result<()> {
        match self.grant() {
            Some(grant) if grant.mode == Mode::Shared => Err(Error::invalid(format!(
                "fenced writes need an exclusive grant; {} holds {} shared (token {}): \
                 shared holders hold at once, so their tokens cannot order their writes; \
                 a reader fences what it reads with fenced_read",
                self.holder().describe(),
                grant.url,
                grant.token
            ))
            .with_lease(self.url())),
            _ => Ok(()),
        }
    }
}

/// Read an object from the store's root with the epoch, lease and holder of the fenced write
/// that wrote it ([`Client::fenced_get`](crate::Client::fenced_get)).
pub(crate) async fn read(io: &Io, key: &str) -> Result<Option<FencedObject>> {
    let key = &object_key("", key).map_err(|e| e.with_lease(io.lease_url(key)))?;
    let url = io.lease_url(key);
    match io
        .timed(
            REQUEST_TIMEOUT,
            "read",
            io.store().get(key, GetOptions::default()),
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
