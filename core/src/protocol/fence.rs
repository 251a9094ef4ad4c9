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
use crate::scope::{Mode, Scope};
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
/// The grants that wrote or fenced the object, when more than one exclusive whole-lease token
/// is needed to say it ([`Stamp::meta`]).
pub const META_FENCE: &str = "lease-fence";
/// `1` on a marker a fenced read left where it found nothing ([`Stamp::absent`]).
pub const META_ABSENT: &str = "lease-absent";
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

/// One grant that wrote or fenced an object, as the object records it: every later request is
/// checked against it (docs/protocol.md §7, "What each token fences").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FenceEntry {
    pub token: u64,
    pub holder: Option<String>,
    pub mode: Mode,
    pub scope: Scope,
}

/// The most entries a fenced object records, and the most bytes they take in its metadata
/// (S3 allows 2 KB of user metadata in all): beyond either, the oldest entries are merged into
/// one that refuses at least everything they refused ([`recorded`]).
pub const MAX_FENCE_ENTRIES: usize = 16;
pub const MAX_FENCE_LEN: usize = 1024;

impl FenceEntry {
    /// What a request under `token` is checked as, and what it records once it lands.
    pub fn of_token(token: &FencingToken) -> FenceEntry {
        FenceEntry {
            token: token.epoch(),
            holder: token.holder().map(str::to_string),
            mode: token.mode(),
            scope: token.scope().clone(),
        }
    }

    /// Exclusive over the whole lease: what a plain lease's write records, and all that
    /// objects written before scopes existed say (`lease-epoch`, `lease-holder`).
    pub fn whole(token: u64, holder: Option<String>) -> FenceEntry {
        FenceEntry {
            token,
            holder,
            mode: Mode::Exclusive,
            scope: Scope::Whole,
        }
    }

    fn is_whole_exclusive(&self) -> bool {
        self.mode == Mode::Exclusive && self.scope == Scope::Whole
    }

    /// Whether this entry and a request could not both have been granted at once: their scopes
    /// overlap and either is exclusive. Two shared grants (readers) never conflict. (The
    /// mutant brings back one token per object: everything conflicts.)
    fn conflicts(&self, q: &FenceEntry) -> bool {
        if super::mutants::on(super::mutants::Mutant::FenceIgnoresScopes) {
            return true;
        }
        self.scope.overlaps(&q.scope) && (self.mode == Mode::Exclusive || q.mode == Mode::Exclusive)
    }

    /// Whether this entry refuses request `q`: they conflict, and this entry's token is higher
    /// (the lock granted it after `q`'s grant had ended), or equal and of another holder (two
    /// holders with one token are never both admitted; unknown holders cannot be told apart).
    pub fn refuses(&self, q: &FenceEntry) -> bool {
        self.conflicts(q)
            && (self.token > q.token
                || (self.token == q.token
                    && matches!((&self.holder, &q.holder), (Some(a), Some(b)) if a != b)))
    }

    /// Whether this entry refuses every request `other` refuses, so that `other` need not be
    /// kept: its scope contains `other`'s, its mode conflicts with at least as much, and its
    /// token is higher, or the same token of the same holder.
    pub fn covers(&self, other: &FenceEntry) -> bool {
        scope_contains(&self.scope, &other.scope)
            && (self.mode == Mode::Exclusive || other.mode == Mode::Shared)
            && (self.token > other.token
                || (self.token == other.token && self.holder == other.holder))
    }

    /// `MODE:TOKEN:HOLDER:SCOPE`: `x` or `s`; decimal; the holder id or `-`; `*`, `rSTART-END`
    /// or `pPATH` (escaped). A future mode or scope gets a new letter, which this version
    /// cannot parse, so it falls back to the conservative reading ([`Stamp::of`]).
    fn encode(&self) -> String {
        let mode = match self.mode {
            Mode::Exclusive => 'x',
            Mode::Shared => 's',
        };
        let holder = self.holder.as_deref().unwrap_or("-");
        let scope = match &self.scope {
            Scope::Whole => "*".to_string(),
            Scope::Range { start, end } => format!("r{start}-{end}"),
            Scope::Path(p) => format!("p{}", crate::token::escape_path(p)),
        };
        format!("{mode}:{}:{holder}:{scope}", self.token)
    }

    fn decode(s: &str) -> Option<FenceEntry> {
        let mut fields = s.splitn(4, ':');
        let mode = match fields.next()? {
            "x" => Mode::Exclusive,
            "s" => Mode::Shared,
            _ => return None,
        };
        let token = fields.next()?.parse().ok()?;
        let holder = match fields.next()? {
            "-" => None,
            h if crate::token::valid_holder_id(h) => Some(h.to_string()),
            _ => return None,
        };
        let scope = fields.next()?;
        let scope = match scope.split_at_checked(1)? {
            ("*", "") => Scope::Whole,
            ("r", r) => {
                let (a, b) = r.split_once('-')?;
                Scope::range(a.parse().ok()?, b.parse().ok()?).ok()?
            }
            ("p", p) => Scope::path(&crate::token::unescape_path(p)?).ok()?,
            _ => return None,
        };
        Some(FenceEntry {
            token,
            holder,
            mode,
            scope,
        })
    }
}

/// Whether `outer` contains all of `inner`. Only the whole lock contains the whole lock, and a
/// path and a range never contain each other (though they are taken to overlap): nothing is
/// dropped on that account.
pub fn scope_contains(outer: &Scope, inner: &Scope) -> bool {
    match (outer, inner) {
        (Scope::Whole, _) => true,
        (Scope::Path(o), Scope::Path(i)) => {
            i == o || (i.starts_with(o.as_str()) && i.as_bytes()[o.len()] == b'/')
        }
        (Scope::Range { start: s1, end: e1 }, Scope::Range { start: s2, end: e2 }) => {
            s1 <= s2 && e2 <= e1
        }
        _ => false,
    }
}

/// The smallest scope containing both: the span of two ranges, the common ancestor of two
/// paths, else the whole lock.
fn scope_hull(a: &Scope, b: &Scope) -> Scope {
    match (a, b) {
        (Scope::Range { start: s1, end: e1 }, Scope::Range { start: s2, end: e2 }) => {
            Scope::Range {
                start: *s1.min(s2),
                end: *e1.max(e2),
            }
        }
        (Scope::Path(p), Scope::Path(q)) => {
            let common: Vec<&str> = p
                .split('/')
                .zip(q.split('/'))
                .take_while(|(x, y)| x == y)
                .map(|(x, _)| x)
                .collect();
            if common.is_empty() {
                Scope::Whole
            } else {
                Scope::Path(common.join("/"))
            }
        }
        _ => Scope::Whole,
    }
}

/// One entry that refuses everything `a` or `b` refuses: the higher token, exclusive if either
/// is, over both scopes. Two entries of one token and different holders become the next token
/// with no holder, which refuses both holders' token.
fn merge(a: &FenceEntry, b: &FenceEntry) -> FenceEntry {
    let (hi, lo) = if a.token >= b.token { (a, b) } else { (b, a) };
    let (token, holder) = if hi.token == lo.token && hi.holder != lo.holder {
        (hi.token.saturating_add(1), None)
    } else {
        (hi.token, hi.holder.clone())
    };
    let mode = if a.mode == Mode::Exclusive || b.mode == Mode::Exclusive {
        Mode::Exclusive
    } else {
        Mode::Shared
    };
    FenceEntry {
        token,
        holder,
        mode,
        scope: scope_hull(&a.scope, &b.scope),
    }
}

/// The entries in their stored order: highest token first.
fn sorted(mut entries: Vec<FenceEntry>) -> Vec<FenceEntry> {
    entries.sort_by_cached_key(|e| (std::cmp::Reverse(e.token), e.encode()));
    entries.dedup();
    entries
}

/// Drop the entries another one covers.
fn prune(entries: Vec<FenceEntry>) -> Vec<FenceEntry> {
    let entries = sorted(entries);
    let mut kept: Vec<FenceEntry> = Vec::with_capacity(entries.len());
    for e in entries {
        if !kept.iter().any(|k| k.covers(&e)) {
            kept.retain(|k| !e.covers(k));
            kept.push(e);
        }
    }
    sorted(kept)
}

/// What an object records once a request `claim` has written or fenced it, after `prior`:
/// every entry no other one covers, within [`MAX_FENCE_ENTRIES`] and [`MAX_FENCE_LEN`] (over
/// them, the two oldest entries are merged, and a single entry too long becomes the whole
/// lock, then, if its holder id alone is too long, the next token of no holder: each step
/// refuses at least what it replaces, so the bound costs precision, never safety). A claim with the same token, mode and scope as an entry replaces it (the latest
/// write names its holder, as before scopes).
pub fn recorded(prior: &[FenceEntry], claim: &FenceEntry) -> Vec<FenceEntry> {
    if super::mutants::on(super::mutants::Mutant::FenceIgnoresScopes) {
        // One token per object: the last writer's, over everything.
        return vec![FenceEntry::whole(claim.token, claim.holder.clone())];
    }
    let mut all: Vec<FenceEntry> = prior
        .iter()
        .filter(|e| {
            let replaced = e.token == claim.token
                && e.mode == claim.mode
                && e.scope == claim.scope
                && (e.holder.is_none() || e.holder == claim.holder);
            !replaced
        })
        .cloned()
        .collect();
    all.push(claim.clone());
    let mut entries = prune(all);
    // Each round merges two entries into one, so the loop ends (after pruning, at most the
    // entries there were) even if a bound were never met.
    while entries.len() > 1 && over_bounds(&entries) {
        let b = entries.pop().expect("two entries");
        let a = entries.pop().expect("two entries");
        entries.push(merge(&a, &b));
        entries = prune(entries);
    }
    // One entry still too long: a long path or range becomes the whole lock...
    if over_bounds(&entries) {
        entries[0].scope = Scope::Whole;
    }
    // ... and a holder id too long for the metadata (a token parsed from text may name any)
    // becomes the next token of no holder, as two holders of one token do in `merge`: it
    // refuses every token below the next, that holder's own included, so that holder is
    // refused from then on (never admitted where it should not be).
    if over_bounds(&entries) {
        entries[0].token = entries[0].token.saturating_add(1);
        entries[0].holder = None;
    }
    entries
}

/// Whether a fence exceeds [`MAX_FENCE_ENTRIES`] or [`MAX_FENCE_LEN`].
fn over_bounds(entries: &[FenceEntry]) -> bool {
    entries.len() > MAX_FENCE_ENTRIES || encode_fence(entries).len() > MAX_FENCE_LEN
}

fn encode_fence(entries: &[FenceEntry]) -> String {
    entries
        .iter()
        .map(FenceEntry::encode)
        .collect::<Vec<_>>()
        .join(",")
}

fn decode_fence(s: &str) -> Option<Vec<FenceEntry>> {
    let entries = s
        .split(',')
        .map(FenceEntry::decode)
        .collect::<Option<Vec<_>>>()?;
    (!entries.is_empty()).then(|| sorted(entries))
}

/// What a fenced object's metadata says about the writes that made and fenced it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub lease: Option<String>,
    /// The highest token that wrote or fenced the object (`lease-epoch`: what versions before
    /// scopes read, so they refuse every token below it).
    pub epoch: Option<u64>,
    /// That token's holder.
    pub holder: Option<String>,
    pub write: Option<String>,
    pub prev: Option<String>,
    /// Every grant whose token still refuses something here (highest first).
    pub fence: Vec<FenceEntry>,
    /// The object is a marker a fenced read left where it found nothing (so a stale writer
    /// cannot create it under the readers): its readers see it as absent.
    pub absent: bool,
}

impl Stamp {
    /// The stamp in `meta`. Without `lease-fence` (every object a plain lease wrote, and all
    /// written before scopes), the fence is one exclusive whole-lease entry at `lease-epoch`:
    /// exactly the old rule. A `lease-fence` this version cannot parse (a newer version's)
    /// is read the same way: `lease-epoch` is its highest token, so that refuses at least as
    /// much as the entries it stands for.
    pub fn of(meta: &Meta) -> Stamp {
        let epoch = meta.get(META_EPOCH).and_then(|e| e.parse().ok());
        let holder = meta.get(META_HOLDER).cloned();
        let fence = match meta.get(META_FENCE).and_then(|f| decode_fence(f)) {
            Some(entries) => entries,
            None => epoch
                .map(|e| vec![FenceEntry::whole(e, holder.clone())])
                .unwrap_or_default(),
        };
        Stamp {
            lease: meta.get(META_LEASE).map(|l| unescape(l)),
            epoch,
            holder,
            write: meta.get(META_WRITE).cloned(),
            prev: meta.get(META_PREV).cloned(),
            fence,
            absent: meta.get(META_ABSENT).is_some_and(|a| a == "1"),
        }
    }

    /// The metadata of a write under `lease` that leaves `fence` recorded, with its nonce and
    /// the nonce it replaces. `lease-epoch` and `lease-holder` name the highest entry; a fence
    /// of one exclusive whole-lease entry (every plain lease's) needs nothing more, so such
    /// objects carry exactly the metadata they always did.
    pub fn meta(
        lease: &str,
        fence: &[FenceEntry],
        write: Option<&str>,
        prev: Option<&str>,
    ) -> Meta {
        let top = fence.iter().max_by_key(|e| e.token);
        let mut meta = Meta::from([(META_LEASE.to_string(), escape(lease))]);
        let mut put = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                meta.insert(k.to_string(), v.to_string());
            }
        };
        put(META_EPOCH, top.map(|e| e.token.to_string()).as_deref());
        put(META_HOLDER, top.and_then(|e| e.holder.as_deref()));
        put(META_WRITE, write);
        put(META_PREV, prev);
        if !matches!(fence, [only] if only.is_whole_exclusive()) {
            put(META_FENCE, Some(&encode_fence(fence)));
        }
        meta
    }
}

/// How a grant reads in an error message: nothing for a whole lease's exclusive holder.
fn grant_words(mode: Mode, scope: &Scope) -> String {
    match (mode, scope) {
        (Mode::Exclusive, Scope::Whole) => String::new(),
        (Mode::Shared, Scope::Whole) => " (shared)".into(),
        (mode, scope) => format!(" ({} over {scope})", mode.as_str()),
    }
}

/// May a request under `token` change (or fence) something recorded in `stamp`? Not if another
/// lease wrote it, nor if an entry refuses it ([`FenceEntry::refuses`]): a higher token whose
/// grant conflicts with this one's (an overlapping scope, and either exclusive), or the same
/// token of another holder. For a plain lease (every entry exclusive over the whole lease) that
/// is the rule fenced writes always had.
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
    let q = FenceEntry::of_token(token);
    let Some(e) = stamp.fence.iter().find(|e| e.refuses(&q)) else {
        return Ok(());
    };
    let (theirs, ours) = (grant_words(e.mode, &e.scope), grant_words(q.mode, &q.scope));
    let why = if e.token > q.token {
        format!(
            "{what} was written at epoch {}{theirs}, newer than this holder's epoch {}{ours}: \
             refused",
            e.token, q.token
        )
    } else {
        format!(
            "{what} was written at epoch {}{theirs} by another holder than this one: two holders \
             with one epoch are never both admitted",
            e.token
        )
    };
    Err(Error::new(ErrorKind::Fenced, why)
        .with_lease(token.lease())
        .with_epoch(e.token))
}

/// What a gate does with a token, given what it has admitted for the resource (`None`: never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admit, and remember this fence from now on.
    Record(Vec<FenceEntry>),
    /// Admit; what is remembered already covers this token.
    AlreadyRecorded,
}

pub fn admission(what: &str, token: &FencingToken, admitted: Option<&Stamp>) -> Result<Admission> {
    let claim = FenceEntry::of_token(token);
    let Some(stamp) = admitted else {
        return Ok(Admission::Record(recorded(&[], &claim)));
    };
    verdict(what, token, stamp)?;
    if stamp.fence.iter().any(|e| e.covers(&claim)) {
        return Ok(Admission::AlreadyRecorded);
    }
    Ok(Admission::Record(recorded(&stamp.fence, &claim)))
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

/// A fenced operation gives up after [`MAX_ROUNDS`] lost races.
fn kept_changing(key_url: &str, what: &str) -> Error {
    Error::unavailable(format!(
        "{key_url} kept changing under a {what}; gave up after {MAX_ROUNDS} rounds"
    ))
    .with_lease(key_url)
}

/// A fenced operation gives up on a store unavailable for [`UNAVAILABLE_BUDGET`].
fn unavailable_too_long(e: Error, key_url: &str, what: &str) -> Error {
    e.context(format!(
        "{key_url}: the store was unavailable for {} during a {what}",
        crate::duration::format_duration(UNAVAILABLE_BUDGET)
    ))
    .with_lease(key_url)
}

/// What happened since the last step of a fenced write (or a fenced read: [`PinOp`]).
#[derive(Debug)]
pub enum FenceEvent {
    Start,
    /// The object was read (`None`: absent): its metadata for a write, whole for a read.
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

/// An object as this holder last wrote or fenced it: its version, the nonce of the write that
/// made it, and its fence. A fenced write conditioned on it needs no read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Known {
    pub version: Version,
    pub write: String,
    pub fence: Vec<FenceEntry>,
}

/// One fenced write in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FenceOp {
    key_url: String,
    token: FencingToken,
    /// What this write is checked as and records.
    claim: FenceEntry,
    /// The fence of the object at `base`, and what the last attempt recorded over it.
    prior: Vec<FenceEntry>,
    sent: Vec<FenceEntry>,
    nonce: String,
    /// What is stored: the caller's bytes, with a trailer where versions hash the bytes.
    bytes: Bytes,
    trailer: usize,
    expect: Expect,
    /// The object as we last knew it, when no read is needed (we wrote it last).
    known: Option<Known>,
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
    /// this holder last wrote or fenced it, which saves the read when it still holds;
    /// `unique_versions` is the store's [`Capabilities::versions_are_unique`].
    ///
    /// [`Capabilities::versions_are_unique`]: crate::store::Capabilities::versions_are_unique
    pub fn new(
        key_url: &str,
        token: FencingToken,
        nonce: String,
        bytes: Bytes,
        expect: Expect,
        cached: Option<Known>,
        unique_versions: bool,
    ) -> FenceOp {
        let (bytes, trailer) = stored_bytes(&bytes, &nonce, unique_versions);
        // (An object expected absent is read first all the same: a blind create that fails
        // could not always tell a concurrent create from our own, replaced.)
        let known = match (&expect, cached) {
            (Expect::Any, Some(k)) => Some(k),
            (Expect::Version(e), Some(k)) if e.matches(&k.version) => Some(k),
            _ => None,
        };
        FenceOp {
            key_url: key_url.to_string(),
            claim: FenceEntry::of_token(&token),
            prior: Vec::new(),
            sent: Vec::new(),
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

    /// The object as this write left it, once it landed at `version`.
    pub fn known(&self, version: Version) -> Known {
        Known {
            version,
            write: self.nonce.clone(),
            fence: self.sent.clone(),
        }
    }

    pub fn step(&mut self, event: FenceEvent, now: Instant, entropy: &dyn Entropy) -> FenceStep {
        match event {
            FenceEvent::Start => {
                self.give_up_at = Some(now + UNAVAILABLE_BUDGET);
                match self.known.take() {
                    Some(k) => {
                        self.prior = k.fence;
                        self.put(Some((k.version, Some(k.write))))
                    }
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
                    return FenceStep::Done(Err(kept_changing(&self.key_url, "fenced write")));
                }
                FenceStep::ReadMeta
            }
        }
    }

    fn unavailable(&mut self, e: Error, now: Instant, entropy: &dyn Entropy) -> FenceStep {
        if self.give_up_at.is_some_and(|g| now >= g) {
            return FenceStep::Done(Err(unavailable_too_long(e, &self.key_url, "fenced write")));
        }
        FenceStep::Sleep(self.backoff.next(entropy))
    }

    fn put(&mut self, base: Base) -> FenceStep {
        self.base = base;
        let (cond, prev) = match &self.base {
            None => (Cond::Create, None),
            Some((v, w)) => (Cond::Match(v.clone()), w.clone()),
        };
        self.sent = recorded(&self.prior, &self.claim);
        let mut meta = Stamp::meta(
            self.token.lease(),
            &self.sent,
            Some(&self.nonce),
            prev.as_deref(),
        );
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
        // A marker a fenced read left is absent to the caller; the write replaces it.
        let seen = now.as_ref().filter(|_| !stamp.absent).map(|(v, _)| v);
        if let Err(e) = check_expected(&self.key_url, &self.expect, seen) {
            return FenceStep::Done(Err(e));
        }
        self.prior = stamp.fence;
        self.put(now)
    }
}

/// What a fenced read does next.
#[derive(Debug)]
pub enum PinStep {
    /// Read the object, contents and metadata.
    Read,
    Put {
        bytes: Bytes,
        cond: Cond,
        meta: Meta,
    },
    Sleep(Duration),
    /// The object as it now stands, fenced by this token (its stored bytes and metadata: a
    /// marker where nothing was, [`Stamp::absent`]), or why not.
    Done(Result<Option<Object>>),
}

/// One fenced read in progress: read the object, and unless its fence already refuses every
/// request this token's would ([`FenceEntry::covers`]), write it back unchanged with this
/// token recorded, conditional on the version read — so that a stale writer's write, whether
/// conditioned on an older version or not, is refused from then on. Where nothing is, it leaves
/// a marker ([`Stamp::absent`]) that fenced reads see as absent, so a stale writer cannot create
/// the object under its readers either. Idempotent: every retry starts with a read, and a read
/// that finds this token recorded is done.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PinOp {
    key_url: String,
    token: FencingToken,
    claim: FenceEntry,
    nonce: String,
    unique_versions: bool,
    /// What the last attempt sent, to report once it landed.
    sent: Option<(Bytes, Meta)>,
    backoff: Backoff,
    give_up_at: Option<Instant>,
    rounds: usize,
}

impl PinOp {
    /// A fenced read under `token`; `nonce` names its write (a trailer where the store's
    /// versions hash the bytes, `unique_versions` false, so the rewrite makes a new version).
    pub fn new(key_url: &str, token: FencingToken, nonce: String, unique_versions: bool) -> PinOp {
        PinOp {
            key_url: key_url.to_string(),
            claim: FenceEntry::of_token(&token),
            token,
            nonce,
            unique_versions,
            sent: None,
            backoff: Backoff::between(Duration::from_millis(50), Duration::from_secs(2)),
            give_up_at: None,
            rounds: 0,
        }
    }

    pub fn step(&mut self, event: FenceEvent, now: Instant, entropy: &dyn Entropy) -> PinStep {
        match event {
            FenceEvent::Start => {
                self.give_up_at = Some(now + UNAVAILABLE_BUDGET);
                PinStep::Read
            }
            FenceEvent::Slept => PinStep::Read,
            FenceEvent::Read(Ok(obj)) => self.after_read(obj),
            FenceEvent::Put(Ok(Put::Written {
                version,
                server_now,
            })) => {
                let (bytes, meta) = self.sent.take().expect("a write was sent");
                PinStep::Done(Ok(Some(Object {
                    size: bytes.len() as u64,
                    bytes: Some(bytes),
                    version,
                    last_modified: None,
                    server_now,
                    meta,
                })))
            }
            // Someone else wrote first: read, and decide again.
            FenceEvent::Put(Ok(Put::ConditionFailed)) => {
                self.rounds += 1;
                if self.rounds > MAX_ROUNDS {
                    return PinStep::Done(Err(kept_changing(&self.key_url, "fenced read")));
                }
                PinStep::Read
            }
            // An unknown outcome changes nothing: the next read tells whether it landed.
            FenceEvent::Read(Err(e)) | FenceEvent::Put(Err(e))
                if e.kind() == ErrorKind::Unavailable =>
            {
                if self.give_up_at.is_some_and(|g| now >= g) {
                    return PinStep::Done(Err(unavailable_too_long(
                        e,
                        &self.key_url,
                        "fenced read",
                    )));
                }
                PinStep::Sleep(self.backoff.next(entropy))
            }
            FenceEvent::Read(Err(e)) | FenceEvent::Put(Err(e)) => {
                PinStep::Done(Err(e.with_lease(&self.key_url)))
            }
        }
    }

    fn after_read(&mut self, obj: Option<Object>) -> PinStep {
        let readers_pin = !super::mutants::on(super::mutants::Mutant::ReadersDoNotPin);
        let (stamp, user, cond) = match &obj {
            None if !readers_pin => return PinStep::Done(Ok(None)),
            None => (Stamp::default(), Bytes::new(), Cond::Create),
            Some(o) => {
                let stamp = Stamp::of(&o.meta);
                if let Err(e) = verdict(&self.key_url, &self.token, &stamp) {
                    return PinStep::Done(Err(e));
                }
                if !readers_pin || stamp.fence.iter().any(|e| e.covers(&self.claim)) {
                    return PinStep::Done(Ok(obj));
                }
                let user = user_bytes(o.bytes.clone().unwrap_or_default(), &o.meta);
                (stamp, user, Cond::Match(o.version.clone()))
            }
        };
        let fence = recorded(&stamp.fence, &self.claim);
        let mut meta = Stamp::meta(
            self.token.lease(),
            &fence,
            Some(&self.nonce),
            stamp.write.as_deref(),
        );
        let (bytes, trailer) = stored_bytes(&user, &self.nonce, self.unique_versions);
        if trailer > 0 {
            meta.insert(META_TRAILER.to_string(), trailer.to_string());
        }
        if obj.is_none() || stamp.absent {
            meta.insert(META_ABSENT.to_string(), "1".to_string());
        }
        self.sent = Some((bytes.clone(), meta.clone()));
        PinStep::Put { bytes, cond, meta }
    }
}

#[cfg(test)]
mod tests;
