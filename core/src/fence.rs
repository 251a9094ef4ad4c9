//! Fencing the store enforces.
//!
//! A lease cannot stop a holder that was paused (GC, SIGSTOP, a frozen VM) between checking its
//! lease and acting, and wakes up after someone else took over. The epoch is the fencing token;
//! here the *store* rejects the zombie's writes:
//!
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
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

use crate::client::{Backoff, Client};
use crate::clock::Instant;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::Lease;
use crate::store::{
    validate_key, Cond, Delete, DynStore, Get, GetOptions, Meta, Object, Put, Version,
};
use crate::token::FencingToken;

/// Metadata keys of fenced objects.
pub const META_EPOCH: &str = "lease-epoch";
pub const META_LEASE: &str = "lease-name";
pub const META_HOLDER: &str = "lease-holder";
/// The nonce of the write that made the object.
pub const META_WRITE: &str = "lease-write";
/// The nonce of the object this one replaced (absent for a create).
pub const META_PREV: &str = "lease-prev";

/// How many times a fenced operation re-reads after losing a race before giving up.
const MAX_ROUNDS: usize = 32;
/// Timeout of one store request of a fenced operation.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fenced operation keeps retrying a store that answers `Unavailable`.
const UNAVAILABLE_BUDGET: Duration = Duration::from_secs(20);

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

/// Metadata values are printable ASCII (what S3 headers keep intact): escape the rest, and `%`.
const META_ESCAPE: &AsciiSet = &CONTROLS.add(b'%');

fn escape(s: &str) -> String {
    utf8_percent_encode(s, META_ESCAPE).to_string()
}

fn unescape(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// What a fenced object's metadata says about the write that made it.
#[derive(Debug, Default)]
struct Stamp {
    lease: Option<String>,
    epoch: Option<u64>,
    holder: Option<String>,
    write: Option<String>,
    prev: Option<String>,
}

impl Stamp {
    fn of(meta: &Meta) -> Stamp {
        Stamp {
            lease: meta.get(META_LEASE).map(|l| unescape(l)),
            epoch: meta.get(META_EPOCH).and_then(|e| e.parse().ok()),
            holder: meta.get(META_HOLDER).cloned(),
            write: meta.get(META_WRITE).cloned(),
            prev: meta.get(META_PREV).cloned(),
        }
    }

    /// The metadata a write under `token` carries, with its nonce and the nonce it replaces.
    fn meta_for(token: &FencingToken, write: Option<&str>, prev: Option<&str>) -> Meta {
        let mut meta = Meta::from([
            (META_EPOCH.to_string(), token.epoch().to_string()),
            (META_LEASE.to_string(), escape(token.lease())),
        ]);
        let mut put = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                meta.insert(k.to_string(), v.to_string());
            }
        };
        put(META_HOLDER, token.holder());
        put(META_WRITE, write);
        put(META_PREV, prev);
        meta
    }
}

/// May a writer holding `token` change something last changed under `stamp`? Not if another
/// lease wrote it, a higher epoch wrote it, or another holder of the *same* epoch wrote it (two
/// holders must never both be admitted with equal tokens). A stamp or token without a holder
/// id (written by older versions, or a token built by hand) cannot be told apart by holder.
fn verdict(what: &str, token: &FencingToken, stamp: &Stamp) -> Result<()> {
    if let Some(lease) = stamp.lease.as_deref().filter(|l| *l != token.lease()) {
        return Err(Error::new(
            ErrorKind::Fenced,
            format!(
                "{what} was written under another lease ({lease}); a token of {} cannot change it",
                token.lease()
            ),
        )
        .with_lease(token.lease()));
    }
    let fenced = |why: String, stored: u64| {
        Err(Error::new(ErrorKind::Fenced, why)
            .with_lease(token.lease())
            .with_epoch(stored))
    };
    match stamp.epoch {
        Some(stored) if stored > token.epoch() => fenced(
            format!(
                "{what} was written at epoch {stored}, newer than this holder's epoch {}: refused",
                token.epoch()
            ),
            stored,
        ),
        Some(stored) if stored == token.epoch() => {
            match (stamp.holder.as_deref(), token.holder()) {
                (Some(theirs), Some(ours)) if theirs != ours => fenced(
                    format!(
                    "{what} was written at epoch {stored} by another holder than this one: two \
                     holders with one epoch are never both admitted"
                ),
                    stored,
                ),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// What the caller of a fenced write expects the object to be.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// Whatever it is (a plain `fenced_put`).
    Any,
    /// Absent.
    Absent,
    /// At this version.
    Version(Version),
}

/// Retries of one fenced operation: backoff while the store is unavailable (up to a time
/// budget), a bounded number of rounds while others keep changing the object.
struct Retries<'a> {
    client: &'a Client,
    key_url: &'a str,
    what: &'static str,
    backoff: Backoff,
    give_up_at: Instant,
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
    /// Write `bytes` at `key` (in this lease's store) unless a holder with a higher epoch of
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
        let key_url = self.client().lease_url(key);
        let mut retries = Retries::new(self.client(), &key_url, "fenced update");
        loop {
            let current = self.client().fenced_get(key).await?;
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

    async fn fenced_write(&self, key: &str, bytes: Bytes, expect: Expect) -> Result<Version> {
        let client = self.client();
        let key_url = client.lease_url(key);
        self.check_fenced_key(key)?;
        let token = self.token();
        let nonce = client.inner.rng.nonce();
        let mut retries = Retries::new(client, &key_url, "fenced write");
        // What this holder last wrote there: skip the read when the caller expects it.
        let cached = self.fence_cache().lock().unwrap().get(key).cloned();
        // (An object expected absent is read first all the same: a blind create that fails
        // could not always tell a concurrent create from our own, replaced.)
        let mut known: Option<Option<(Version, Option<String>)>> = match (&expect, cached) {
            (Expect::Any, Some((v, w))) => Some(Some((v, Some(w)))),
            (Expect::Version(e), Some((v, w))) if e.matches(&v) => Some(Some((v, Some(w)))),
            _ => None,
        };
        // What our last attempt was conditioned on (None: absent), while its outcome is unknown.
        let mut in_doubt: Option<Option<(Version, Option<String>)>> = None;
        loop {
            let base = match known.take() {
                Some(base) => base,
                None => {
                    let obj = match read_meta(client, key).await {
                        Ok(obj) => obj,
                        Err(e) if e.kind() == ErrorKind::Unavailable => {
                            retries.unavailable(e).await?;
                            continue;
                        }
                        Err(e) => return Err(e.with_lease(&key_url)),
                    };
                    let stamp = obj.as_ref().map(|o| Stamp::of(&o.meta)).unwrap_or_default();
                    if let Some(landed) = self.recognise(key, &nonce, obj.as_ref(), &stamp) {
                        return Ok(landed);
                    }
                    let now = obj.map(|o| (o.version, stamp.write.clone()));
                    if let Some(base) = in_doubt.take() {
                        if !proves_not_landed(base.as_ref(), now.as_ref(), &stamp)
                            && (expect != Expect::Any || verdict(&key_url, &token, &stamp).is_err())
                        {
                            return Err(Error::unavailable(format!(
                                "the outcome of a fenced write to {key_url} is unknown: the \
                                 object changed since it was sent (now epoch {}), so it may \
                                 have landed and been overwritten",
                                stamp.epoch.map_or("unknown".into(), |e| e.to_string())
                            ))
                            .with_lease(&key_url));
                        }
                        // A plain put whose outcome is unknown may simply be written again.
                    }
                    if now.is_some() {
                        verdict(&key_url, &token, &stamp)?;
                    }
                    check_expected(&key_url, &expect, now.as_ref().map(|(v, _)| v))?;
                    now
                }
            };
            let (cond, prev) = match &base {
                None => (Cond::Create, None),
                Some((v, w)) => (Cond::Match(v.clone()), w.clone()),
            };
            let meta = Stamp::meta_for(&token, Some(&nonce), prev.as_deref());
            let put = client.store().put(key, bytes.clone(), cond, &meta);
            match client.timed(REQUEST_TIMEOUT, "fenced write", put).await {
                Ok(Put::Written { version, .. }) => {
                    self.remember_fenced(key, Some((version.clone(), nonce)));
                    return Ok(version);
                }
                // Someone else wrote, or the outcome is unknown (a 412 may also answer a
                // resent write of ours that had landed): read, and decide again.
                Ok(Put::ConditionFailed) => {
                    retries.another_round()?;
                }
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    retries.unavailable(e).await?;
                }
                Err(e) => return Err(e.with_lease(&key_url)),
            }
            in_doubt = Some(base);
            self.remember_fenced(key, None);
        }
    }

    /// Whether the object read is our write (`nonce`), or replaced it: then our write landed.
    fn recognise(
        &self,
        key: &str,
        nonce: &str,
        obj: Option<&Object>,
        stamp: &Stamp,
    ) -> Option<Version> {
        let obj = obj?;
        if stamp.write.as_deref() == Some(nonce) {
            self.remember_fenced(key, Some((obj.version.clone(), nonce.to_string())));
            return Some(obj.version.clone());
        }
        // Landed, and a newer write already replaced it: it happened; its version is gone.
        (stamp.prev.as_deref() == Some(nonce)).then(Version::default)
    }

    fn remember_fenced(&self, key: &str, written: Option<(Version, String)>) {
        let mut cache = self.fence_cache().lock().unwrap();
        match written {
            Some(w) => cache.insert(key.to_string(), w),
            None => cache.remove(key),
        };
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
                "{} has no conditional delete, so fenced deletes are impossible there; write an empty value with a fenced put instead",
                client.store().url()
            )));
        }
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
            verdict(&key_url, &token, &Stamp::of(&obj.meta))?;
            let delete = client.store().delete(key, &obj.version);
            match client.timed(REQUEST_TIMEOUT, "fenced delete", delete).await {
                Ok(Delete::Deleted) => {
                    self.remember_fenced(key, None);
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

/// After a write conditioned on `base` (its version and nonce; `None`: absent) whose outcome
/// is unknown, does what is there `now` prove it did not land? Yes if nothing changed, or if
/// what is there replaced `base` itself (it names `base`'s nonce, or was created where `base`
/// was absent): ours, conditioned on `base`, can then never land. Otherwise it may have landed
/// and been overwritten since.
fn proves_not_landed(
    base: Option<&(Version, Option<String>)>,
    now: Option<&(Version, Option<String>)>,
    stamp: &Stamp,
) -> bool {
    match (base, now) {
        (None, None) => true,
        (None, Some(_)) => stamp.prev.is_none(),
        (Some(_), None) => false,
        (Some((bv, bw)), Some((nv, _))) => {
            bv == nv
                || bw
                    .as_ref()
                    .is_some_and(|bw| stamp.prev.as_ref() == Some(bw))
        }
    }
}

/// Does the object's state (`now`: its version, or `None` when absent) match what the caller
/// expects? If not, that is a `Conflict` (the caller has already passed the fencing verdict).
fn check_expected(key_url: &str, expect: &Expect, now: Option<&Version>) -> Result<()> {
    let conflict = |why: &str| {
        Err(Error::new(
            ErrorKind::Conflict,
            format!("{key_url} {why}: read it again and decide again"),
        )
        .with_lease(key_url))
    };
    match (expect, now) {
        (Expect::Any, _) => Ok(()),
        (Expect::Absent, None) => Ok(()),
        (Expect::Absent, Some(_)) => conflict("was created since you found it absent"),
        (Expect::Version(v), Some(now)) if v.matches(now) => Ok(()),
        (Expect::Version(_), Some(_)) => conflict("changed since the version you read"),
        (Expect::Version(_), None) => conflict("was deleted since the version you read"),
    }
}

impl Client {
    /// Read an object with the epoch, lease and holder of the fenced write that wrote it.
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
                let stamp = Stamp::of(&obj.meta);
                Ok(Some(FencedObject {
                    bytes: obj.bytes.unwrap_or_default(),
                    epoch: stamp.epoch,
                    lease: stamp.lease,
                    holder: stamp.holder,
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

    /// A gate kept in `store`, one object per resource under `prefix`.
    pub fn in_store(store: DynStore, prefix: &str) -> Result<FencingGate> {
        FencingGate::in_store_of(Client::new(store), prefix)
    }

    /// A gate kept in `client`'s store (on its clock), one object per resource under `prefix`.
    pub fn in_store_of(client: Client, prefix: &str) -> Result<FencingGate> {
        let prefix = prefix.trim_matches('/').to_string();
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
                if let Some(stamp) = seen.get(resource) {
                    verdict(resource, token, stamp)?;
                }
                let admitted = seen.entry(resource.to_string()).or_default();
                if admitted.epoch.is_none_or(|e| token.epoch() > e) || admitted.holder.is_none() {
                    *admitted = Stamp {
                        lease: Some(token.lease().to_string()),
                        epoch: Some(token.epoch()),
                        holder: token.holder().map(str::to_string),
                        ..Stamp::default()
                    };
                }
                Ok(())
            }
            GateBackend::Store { client, prefix } => {
                let key = format!("{prefix}/{resource}");
                validate_key(&key)?;
                let key_url = client.lease_url(&key);
                let meta = Stamp::meta_for(token, None, None);
                let mut retries = Retries::new(client, &key_url, "gate admission");
                loop {
                    let cond = match read_meta(client, &key).await {
                        Ok(None) => Cond::Create,
                        Ok(Some(obj)) => {
                            let stamp = Stamp::of(&obj.meta);
                            verdict(&key_url, token, &stamp)?;
                            if stamp.epoch == Some(token.epoch())
                                && stamp.holder.as_deref() == token.holder()
                            {
                                return Ok(()); // already recorded
                            }
                            Cond::Match(obj.version)
                        }
                        Err(e) if e.kind() == ErrorKind::Unavailable => {
                            retries.unavailable(e).await?;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let put = client.store().put(&key, Bytes::new(), cond, &meta);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_values_are_escaped_and_back() {
        for s in [
            "s3://b/locks/gc?region=x",
            "file:///tmp/ünï cødé%20",
            "a\nb",
        ] {
            let e = escape(s);
            assert!(e.bytes().all(|b| (0x20..0x7f).contains(&b)), "{e}");
            assert_eq!(unescape(&e), s);
        }
    }

    #[test]
    fn equal_epochs_of_different_holders_are_fenced() {
        let token = FencingToken::new("memory://x/k", 7).with_holder("aa");
        let stamp = |epoch, holder: Option<&str>| Stamp {
            lease: Some("memory://x/k".into()),
            epoch: Some(epoch),
            holder: holder.map(str::to_string),
            ..Stamp::default()
        };
        assert!(verdict("o", &token, &stamp(7, Some("aa"))).is_ok());
        assert!(verdict("o", &token, &stamp(6, Some("bb"))).is_ok());
        assert!(verdict("o", &token, &stamp(7, None)).is_ok());
        let e = verdict("o", &token, &stamp(7, Some("bb"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fenced);
        let e = verdict("o", &token, &stamp(8, Some("aa"))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fenced);
    }
}
