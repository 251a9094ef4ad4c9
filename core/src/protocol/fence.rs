//! Fenced writes' decisions: may a token's holder change an object, did a write land, and the
//! fenced write itself as a state machine.
//!
//! Every fenced object carries its writer's lease, epoch and holder (`lease-name`,
//! `lease-epoch`, `lease-holder`), the nonce of the write that made it (`lease-write`) and the
//! nonce of the object it replaced (`lease-prev`). So a writer can tell, reading back, whether
//! its write landed — even after a newer writer replaced it — and a write that landed is never
//! reported `Fenced`.

use std::time::Duration;

use bytes::Bytes;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

use super::{Backoff, Entropy};
use crate::clock::Instant;
use crate::error::{Error, ErrorKind, Result};
use crate::store::{Cond, Meta, Object, Put, Version};
use crate::token::FencingToken;

/// Metadata keys of fenced objects.
pub const META_EPOCH: &str = "lease-epoch";
pub const META_LEASE: &str = "lease-name";
pub const META_HOLDER: &str = "lease-holder";
/// The nonce of the write that made the object.
pub const META_WRITE: &str = "lease-write";
/// The nonce of the object this one replaced (absent for a create).
pub const META_PREV: &str = "lease-prev";
/// How many bytes at the end of the object are a trailer the fenced write added, on stores
/// whose versions hash the bytes alone (S3).
pub const META_TRAILER: &str = "lease-trailer";

/// The bytes a fenced write stores: `bytes`, and on a store whose versions hash the bytes alone
/// (S3's ETag is their MD5) a trailer with the write's nonce, so that no two writes share a
/// version. Without it, a newer holder writing the very bytes a zombie read would leave the
/// version unchanged, and the zombie's write conditional on it would land. Returns the bytes
/// and the trailer's length.
pub fn stored_bytes(bytes: &Bytes, nonce: &str, unique_versions: bool) -> (Bytes, usize) {
    if unique_versions {
        return (bytes.clone(), 0);
    }
    let trailer = format!("\n{nonce}");
    let mut out = Vec::with_capacity(bytes.len() + trailer.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(trailer.as_bytes());
    (Bytes::from(out), trailer.len())
}

/// The bytes a fenced writer meant, from what a store returned: without the trailer
/// [`stored_bytes`] added, as its metadata says.
pub fn user_bytes(stored: Bytes, meta: &Meta) -> Bytes {
    match meta.get(META_TRAILER).and_then(|n| n.parse::<usize>().ok()) {
        Some(n) if n <= stored.len() => stored.slice(..stored.len() - n),
        _ => stored,
    }
}

/// How many times a fenced operation re-reads after losing a race before giving up.
pub const MAX_ROUNDS: usize = 32;
/// How long a fenced operation keeps retrying a store that answers `Unavailable`.
pub const UNAVAILABLE_BUDGET: Duration = Duration::from_secs(20);

/// Metadata values are printable ASCII (what S3 headers keep intact): escape the rest, and `%`.
const META_ESCAPE: &AsciiSet = &CONTROLS.add(b'%');

pub fn escape(s: &str) -> String {
    utf8_percent_encode(s, META_ESCAPE).to_string()
}

pub fn unescape(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// What a fenced object's metadata says about the write that made it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub lease: Option<String>,
    pub epoch: Option<u64>,
    pub holder: Option<String>,
    pub write: Option<String>,
    pub prev: Option<String>,
}

impl Stamp {
    pub fn of(meta: &Meta) -> Stamp {
        Stamp {
            lease: meta.get(META_LEASE).map(|l| unescape(l)),
            epoch: meta.get(META_EPOCH).and_then(|e| e.parse().ok()),
            holder: meta.get(META_HOLDER).cloned(),
            write: meta.get(META_WRITE).cloned(),
            prev: meta.get(META_PREV).cloned(),
        }
    }

    /// The stamp of an admitted token (what a gate remembers).
    pub fn of_token(token: &FencingToken) -> Stamp {
        Stamp {
            lease: Some(token.lease().to_string()),
            epoch: Some(token.epoch()),
            holder: token.holder().map(str::to_string),
            ..Stamp::default()
        }
    }

    /// The metadata a write under `token` carries, with its nonce and the nonce it replaces.
    pub fn meta_for(token: &FencingToken, write: Option<&str>, prev: Option<&str>) -> Meta {
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
pub fn verdict(what: &str, token: &FencingToken, stamp: &Stamp) -> Result<()> {
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

/// What a gate does with a token, given what it has admitted for the resource (`None`: never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admit, and remember the token.
    Record,
    /// Admit; this very token is already remembered.
    AlreadyRecorded,
}

pub fn admission(what: &str, token: &FencingToken, admitted: Option<&Stamp>) -> Result<Admission> {
    let Some(stamp) = admitted else {
        return Ok(Admission::Record);
    };
    verdict(what, token, stamp)?;
    if stamp.epoch == Some(token.epoch()) && stamp.holder.as_deref() == token.holder() {
        return Ok(Admission::AlreadyRecorded);
    }
    Ok(Admission::Record)
}

/// What the caller of a fenced write expects the object to be.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expect {
    /// Whatever it is (a plain `fenced_put`).
    Any,
    /// Absent.
    Absent,
    /// At this version.
    Version(Version),
}

/// Does the object's state (`now`: its version, or `None` when absent) match what the caller
/// expects? If not, that is a `Conflict` (the caller has already passed the fencing verdict).
pub fn check_expected(key_url: &str, expect: &Expect, now: Option<&Version>) -> Result<()> {
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

/// An object as a fenced write sees it: its version and the nonce of the write that made it.
pub type Base = Option<(Version, Option<String>)>;

/// After a write conditioned on `base` whose outcome is unknown, does what is there `now`
/// prove it did not land? Yes if nothing changed, or if what is there replaced `base` itself
/// (it names `base`'s nonce, or was created where `base` was absent): ours, conditioned on
/// `base`, can then never land. Otherwise it may have landed and been overwritten since.
pub fn proves_not_landed(base: &Base, now: &Base, stamp: &Stamp) -> bool {
    if super::mutants::on(super::mutants::Mutant::UnknownOutcomeTakenAsNotLanded) {
        return true;
    }
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

/// What happened since the last step of a fenced write.
#[derive(Debug)]
pub enum FenceEvent {
    Start,
    /// The object's metadata was read (`None`: absent).
    Read(Result<Option<Object>>),
    Put(Result<Put>),
    Slept,
}

/// What a fenced write does next.
#[derive(Debug)]
pub enum FenceStep {
    /// Read the object's metadata (no contents).
    ReadMeta,
    Put {
        bytes: Bytes,
        cond: Cond,
        meta: Meta,
    },
    Sleep(Duration),
    /// The version written (empty when the write landed but a newer writer replaced it before
    /// we could learn its version), or why not.
    Done(Result<Version>),
}

/// One fenced write in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FenceOp {
    key_url: String,
    token: FencingToken,
    nonce: String,
    /// What is stored: the caller's bytes, with a trailer where versions hash the bytes.
    bytes: Bytes,
    trailer: usize,
    expect: Expect,
    /// The object as we last knew it, when no read is needed (we wrote it last).
    known: Option<Base>,
    /// What the last attempt was conditioned on, while its outcome is unknown.
    in_doubt: Option<Base>,
    /// What attempts whose outcome was unknown (`Unavailable`) were conditioned on: one of
    /// them may land late, so a later failed condition on the same base may be its doing.
    unknown: Vec<Base>,
    /// What the next attempt is conditioned on.
    base: Base,
    backoff: Backoff,
    give_up_at: Option<Instant>,
    rounds: usize,
}

impl FenceOp {
    /// A fenced write of `bytes` under `token`, expecting `expect`; `cached` is the object as
    /// this holder last wrote it (version and nonce), which saves the read when it still holds;
    /// `unique_versions` is the store's [`Capabilities::versions_are_unique`].
    ///
    /// [`Capabilities::versions_are_unique`]: crate::store::Capabilities::versions_are_unique
    pub fn new(
        key_url: &str,
        token: FencingToken,
        nonce: String,
        bytes: Bytes,
        expect: Expect,
        cached: Option<(Version, String)>,
        unique_versions: bool,
    ) -> FenceOp {
        let (bytes, trailer) = stored_bytes(&bytes, &nonce, unique_versions);
        // (An object expected absent is read first all the same: a blind create that fails
        // could not always tell a concurrent create from our own, replaced.)
        let known = match (&expect, cached) {
            (Expect::Any, Some((v, w))) => Some(Some((v, Some(w)))),
            (Expect::Version(e), Some((v, w))) if e.matches(&v) => Some(Some((v, Some(w)))),
            _ => None,
        };
        FenceOp {
            key_url: key_url.to_string(),
            token,
            nonce,
            bytes,
            trailer,
            expect,
            known,
            in_doubt: None,
            unknown: Vec::new(),
            base: None,
            backoff: Backoff::between(Duration::from_millis(50), Duration::from_secs(2)),
            give_up_at: None,
            rounds: 0,
        }
    }

    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    pub fn step(&mut self, event: FenceEvent, now: Instant, entropy: &dyn Entropy) -> FenceStep {
        match event {
            FenceEvent::Start => {
                self.give_up_at = Some(now + UNAVAILABLE_BUDGET);
                match self.known.take() {
                    Some(base) => self.put(base),
                    None => FenceStep::ReadMeta,
                }
            }
            // Every retry starts with a read: what is there decides.
            FenceEvent::Slept => FenceStep::ReadMeta,
            FenceEvent::Read(Ok(obj)) => self.after_read(obj),
            FenceEvent::Put(Err(e)) if e.kind() == ErrorKind::Unavailable => {
                self.in_doubt = Some(self.base.clone());
                self.unknown.push(self.base.clone());
                self.unavailable(e, now, entropy)
            }
            FenceEvent::Read(Err(e)) if e.kind() == ErrorKind::Unavailable => {
                self.unavailable(e, now, entropy)
            }
            FenceEvent::Read(Err(e)) | FenceEvent::Put(Err(e)) => {
                FenceStep::Done(Err(e.with_lease(&self.key_url)))
            }
            FenceEvent::Put(Ok(Put::Written { version, .. })) => FenceStep::Done(Ok(version)),
            // Someone else wrote: read, and decide again. The stores never resend a write
            // behind our back (the S3 SDK's retries are off), so the failed condition is
            // definite — unless an earlier attempt of ours on the same base, whose outcome was
            // unknown, may have landed since: then the read must tell.
            FenceEvent::Put(Ok(Put::ConditionFailed)) => {
                if self.unknown.contains(&self.base) {
                    self.in_doubt = Some(self.base.clone());
                }
                self.rounds += 1;
                if self.rounds > MAX_ROUNDS {
                    return FenceStep::Done(Err(Error::unavailable(format!(
                        "{} kept changing under a fenced write; gave up after {MAX_ROUNDS} rounds",
                        self.key_url
                    ))
                    .with_lease(&self.key_url)));
                }
                FenceStep::ReadMeta
            }
        }
    }

    fn unavailable(&mut self, e: Error, now: Instant, entropy: &dyn Entropy) -> FenceStep {
        if self.give_up_at.is_some_and(|g| now >= g) {
            return FenceStep::Done(Err(e
                .context(format!(
                    "{}: the store was unavailable for {} during a fenced write",
                    self.key_url,
                    crate::duration::format_duration(UNAVAILABLE_BUDGET)
                ))
                .with_lease(&self.key_url)));
        }
        FenceStep::Sleep(self.backoff.next(entropy))
    }

    fn put(&mut self, base: Base) -> FenceStep {
        self.base = base;
        let (cond, prev) = match &self.base {
            None => (Cond::Create, None),
            Some((v, w)) => (Cond::Match(v.clone()), w.clone()),
        };
        let mut meta = Stamp::meta_for(&self.token, Some(&self.nonce), prev.as_deref());
        if self.trailer > 0 {
            meta.insert(META_TRAILER.to_string(), self.trailer.to_string());
        }
        FenceStep::Put {
            bytes: self.bytes.clone(),
            cond,
            meta,
        }
    }

    fn after_read(&mut self, obj: Option<Object>) -> FenceStep {
        let stamp = obj.as_ref().map(|o| Stamp::of(&o.meta)).unwrap_or_default();
        if let Some(o) = &obj {
            if stamp.write.as_deref() == Some(self.nonce.as_str()) {
                return FenceStep::Done(Ok(o.version.clone()));
            }
            // Landed, and a newer write already replaced it: it happened; its version is gone.
            if stamp.prev.as_deref() == Some(self.nonce.as_str()) {
                return FenceStep::Done(Ok(Version::default()));
            }
        }
        let now: Base = obj.map(|o| (o.version, stamp.write.clone()));
        if let Some(base) = self.in_doubt.take() {
            let unknown = !proves_not_landed(&base, &now, &stamp)
                && (self.expect != Expect::Any
                    || verdict(&self.key_url, &self.token, &stamp).is_err());
            if unknown {
                return FenceStep::Done(Err(Error::unavailable(format!(
                    "the outcome of a fenced write to {} is unknown: the object changed since \
                     it was sent (now epoch {}), so it may have landed and been overwritten",
                    self.key_url,
                    stamp.epoch.map_or("unknown".into(), |e| e.to_string())
                ))
                .with_lease(&self.key_url)));
            }
            // A plain put whose outcome is unknown may simply be written again.
        }
        if now.is_some() {
            if let Err(e) = verdict(&self.key_url, &self.token, &stamp) {
                return FenceStep::Done(Err(e));
            }
        }
        if let Err(e) = check_expected(&self.key_url, &self.expect, now.as_ref().map(|(v, _)| v)) {
            return FenceStep::Done(Err(e));
        }
        self.put(now)
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
