//! The store contract: the minimal thing a backend offers, and nothing lease-specific.
//!
//! A store keeps small objects at keys and changes them only by conditional writes:
//! `Create` succeeds only when the key is absent, `Match(version)` only when the object is still
//! at that version. Everything the lease protocol needs to be safe follows from that.
//!
//! Errors from a store are classified once, here, into the library's [`ErrorKind`](crate::ErrorKind)s:
//! a failed condition is not an error but [`Put::ConditionFailed`]; `Unavailable` means the
//! outcome of a write is unknown (it may or may not have landed, and the caller resolves it by
//! reading back); `Store` and `Invalid` are permanent.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, Result};

#[cfg(feature = "azure")]
pub mod azure;
pub mod doctor;
pub mod file;
#[cfg(feature = "gcs")]
pub mod gcs;
#[cfg(feature = "http-client")]
pub(crate) mod http;
pub mod memory;
#[cfg(feature = "http-client")]
pub(crate) mod remote;
#[cfg(feature = "s3")]
pub mod s3;
pub mod url;

/// The version of a stored object. S3 and Azure identify versions by an etag, GCS by a
/// generation number; a store fills in what it has and compares what it filled in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Version {
    pub etag: String,
    pub generation: Option<u64>,
}

impl Version {
    pub fn etag(etag: impl Into<String>) -> Self {
        Version {
            etag: etag.into(),
            generation: None,
        }
    }

    /// Whether `other` names the same version as far as both say: equal etags and equal
    /// generations where both have one. Bindings hand versions around as etag strings, so a
    /// version a caller passes back may lack the generation the store keeps beside the etag.
    pub fn matches(&self, other: &Version) -> bool {
        let etags = match (self.etag.as_str(), other.etag.as_str()) {
            ("", _) | (_, "") => None,
            (a, b) => Some(a == b),
        };
        let generations = match (self.generation, other.generation) {
            (Some(a), Some(b)) => Some(a == b),
            _ => None,
        };
        match (etags, generations) {
            (None, None) => false,
            (e, g) => e.unwrap_or(true) && g.unwrap_or(true),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.generation {
            Some(g) if self.etag.is_empty() || self.etag == g.to_string() => {
                write!(f, "generation {g}")
            }
            Some(g) => write!(f, "{} (generation {g})", self.etag),
            None => f.write_str(&self.etag),
        }
    }
}

/// Small string metadata stored with an object (S3 user metadata, an xattr on a file).
/// Keys are lower-case ASCII letters, digits and `-`.
pub type Meta = BTreeMap<String, String>;

/// A stored object as read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Object {
    /// The contents, or `None` when the object is larger than the limit the reader asked for
    /// (the reader then never holds it in memory).
    pub bytes: Option<Bytes>,
    /// Size of the contents in bytes.
    pub size: u64,
    pub version: Version,
    /// When the store last wrote the object, by the store's clock.
    pub last_modified: Option<SystemTime>,
    /// The store's clock when it answered (S3: the `Date` header).
    pub server_now: Option<SystemTime>,
    pub meta: Meta,
}

/// The answer to a [`Store::get`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Get {
    Found(Object),
    /// The object is still at the version given as `if_none_match`.
    NotModified {
        server_now: Option<SystemTime>,
    },
    NotFound {
        server_now: Option<SystemTime>,
    },
}

/// Options for [`Store::get`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GetOptions<'a> {
    /// Answer `NotModified` when the object is still at this version (S3 `If-None-Match`).
    pub if_none_match: Option<&'a Version>,
    /// Do not return contents larger than this many bytes.
    pub max_len: Option<u64>,
}

/// What a call to a store was, for the remote stores' messages (each names the permission it
/// needs) and the metrics' `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Get,
    Create,
    Update,
    Delete,
}

impl Op {
    pub(crate) const ALL: [Op; 4] = [Op::Get, Op::Create, Op::Update, Op::Delete];

    /// The metrics' `kind` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }

    #[cfg_attr(not(any(feature = "s3", feature = "http-client")), allow(dead_code))]
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Op::Get => "read",
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }

    /// What an answer that says nothing certain means for this call: a write may or may not
    /// have landed (the client reads back), a read can simply be retried.
    #[cfg_attr(not(any(feature = "s3", feature = "http-client")), allow(dead_code))]
    pub(crate) fn unknown_outcome(self) -> &'static str {
        match self {
            Op::Get => "the read can be retried",
            Op::Create | Op::Update | Op::Delete => {
                "the outcome of the write is unknown until read back"
            }
        }
    }
}

/// The directory of shared sessions, under a session's prefix (docs/protocol.md §10, "Shared
/// sessions"): the one name starting with a dot that the file store allows (as a directory).
pub const SESSIONS_DIR: &str = ".lease-sessions/";

/// The condition of a [`Store::put`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Cond {
    /// Write only if the key does not exist.
    Create,
    /// Write only if the object is still at this version.
    Match(Version),
}

/// The answer to a [`Store::put`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Put {
    Written {
        version: Version,
        server_now: Option<SystemTime>,
    },
    ConditionFailed,
}

/// The answer to a [`Store::delete`].
#[derive(Debug, Clone)]
pub enum Delete {
    Deleted,
    ConditionFailed,
}

/// What a store can do, and how good its clock is.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Whether `delete` is conditional (S3 `If-Match` on DeleteObject, local stores).
    pub conditional_delete: bool,
    /// Resolution of `last_modified` and `server_now` (1 s for HTTP dates).
    pub clock_resolution: Duration,
    /// Whether the store's clock may be used for the store-clock takeover rule by default.
    pub store_clock_rule: bool,
    /// Whether `server_now` and `last_modified` are wall-clock times (comparable, roughly, with
    /// this machine's clock). The file store's are its boot clock instead; only their
    /// differences mean anything.
    pub wall_clock: bool,
    /// Whether every write makes a new version, also of the same bytes (GCS, Azure and memory
    /// whatever they write; the file store hashes bytes and metadata, and every fenced write's
    /// metadata carries a nonce). Not on S3, whose version (the ETag) is the MD5 of the bytes
    /// alone: writing the same bytes again, with other metadata, keeps the version, and a
    /// condition on it cannot tell the writes apart. Fenced writes then make each write's bytes
    /// unique (docs/protocol.md §7).
    pub versions_are_unique: bool,
}

/// A key-value store with conditional writes.
///
/// Implementations must be linearizable per key for `put` and `delete` with conditions: of many
/// concurrent `Create`s (or `Match`es against the same version) exactly one succeeds.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// A URL naming this store (without a key), for messages.
    fn url(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// The shortest interval between two writes of one object that the store sustains: GCS
    /// allows about one write per second per object name (more are answered 429); zero for
    /// the other stores. A renew interval below it cannot be kept up (see docs/stores.md).
    ///
    /// A method rather than a [`Capabilities`] field so that adding it changed no code that
    /// builds `Capabilities` by hand.
    fn min_write_interval(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether a waiter takes over at once a lease whose holder, on this machine, is provably
    /// gone (`protocol::dead_holder`; `LeaseOptions::dead_holder_rule` overrides): the local
    /// file store's default, as flock(1) frees a dead holder's lock.
    fn dead_holder_rule(&self) -> bool {
        false
    }

    /// Whether an answer's `server_now` is read from the same clock that stamps
    /// `last_modified`, with nothing that can stand between (memory, file). Remote stores'
    /// answers carry a `Date` that a gateway in front of the store may set from its own clock
    /// (nginx does by default), so a takeover by the store's clock is first confirmed by a
    /// write's stamp (docs/protocol.md §4). `false` (confirm) unless a store overrides it.
    fn answers_carry_store_clock(&self) -> bool {
        false
    }

    /// Whether every client of this store lives in this process (the memory store): a write
    /// wakes its waiters directly, so they advertise no wake-hint address (docs/protocol.md
    /// §10, "Wake hints"), and their entries stay as small as before.
    fn in_process(&self) -> bool {
        false
    }

    /// Whether this store already counts and traces its requests (the metrics' wrapper): a
    /// client built on another client's store does not count them twice. Stores themselves
    /// leave the default.
    #[doc(hidden)]
    fn counted(&self) -> bool {
        false
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get>;

    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put>;

    /// Delete the object if it is still at `version`.
    async fn delete(&self, key: &str, version: &Version) -> Result<Delete>;

    /// Watch `key` for changes: a waiter's wake-up ahead of its next poll. The file store is
    /// told by the kernel (inotify); stores that cannot tell return `None`, and their waiters
    /// only poll. Make the watch before reading the key: a change after it is never missed.
    fn watch(&self, key: &str) -> Option<Box<dyn Watch>> {
        let _ = key;
        None
    }
}

/// A watch on one key ([`Store::watch`]).
#[async_trait]
pub trait Watch: Send {
    /// Complete when the key may have changed since the watch was made or last completed
    /// (spurious completions only cost a read).
    async fn changed(&mut self);
}

/// A shared store handle.
pub type DynStore = Arc<dyn Store>;

/// The longest key any store accepts (S3's limit).
pub const MAX_KEY_LEN: usize = 1024;

/// Check a key against the rules every store shares: non-empty UTF-8 of at most 1024 bytes,
/// `/`-separated segments that are neither empty, `.` nor `..`, no control characters.
pub fn validate_key(key: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("invalid lease name {key:?}: {why}")));
    if key.is_empty() {
        return bad("it is empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "invalid lease name ({} bytes): longer than {MAX_KEY_LEN} bytes",
            key.len()
        )));
    }
    if key.chars().any(|c| c.is_control()) {
        return bad("it contains a control character");
    }
    for segment in key.split('/') {
        match segment {
            "" => return bad("it has an empty path segment (leading, trailing or double '/')"),
            "." | ".." => return bad("'.' and '..' segments are not allowed"),
            _ => {}
        }
    }
    Ok(())
}

/// Check metadata keys and values: lower-case ASCII letters, digits and `-` in keys (what S3
/// user metadata keeps intact), printable ASCII values, 2 KiB in all (S3 allows 2 KiB).
pub fn validate_meta(meta: &Meta) -> Result<()> {
    let mut total = 0;
    for (k, v) in meta {
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(Error::invalid(format!(
                "invalid metadata key {k:?}: use a-z, 0-9 and '-'"
            )));
        }
        if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(Error::invalid(format!(
                "invalid metadata value for {k:?}: use printable ASCII"
            )));
        }
        total += k.len() + v.len();
    }
    if total > 2048 {
        return Err(Error::invalid("metadata larger than 2 KiB"));
    }
    Ok(())
}

// How a store writes its URL (`Store::url`), which `url/` parses back: here, at the root of
// `store/`, so that the backends need nothing from `url/`, which opens them.

/// What a query's keys and values must escape to be read back: what splits a query (`&`,
/// `=`, `#`), what begins one (`?`), escapes (`%`) and spaces. (An Azure SAS token is full of
/// `&` and `=`.)
const IN_QUERY: &percent_encoding::AsciiSet = &percent_encoding::AsciiSet::EMPTY
    .add(b'%')
    .add(b'&')
    .add(b'=')
    .add(b'?')
    .add(b'#')
    .add(b' ');

/// `base?k=v&…`, keys and values escaped so that the URL parses back to the same options: how
/// every store writes its own URL.
pub(crate) fn with_query(base: &str, options: &[(String, String)]) -> String {
    let mut url = base.to_string();
    for (i, (k, v)) in options.iter().enumerate() {
        url.push(if i == 0 { '?' } else { '&' });
        url.extend(percent_encoding::utf8_percent_encode(k, IN_QUERY));
        url.push('=');
        url.extend(percent_encoding::utf8_percent_encode(v, IN_QUERY));
    }
    url
}

/// A file store's directory as written after `file://`.
pub(crate) fn file_root_in_url(root: &Path) -> String {
    path_in_url(&root.to_string_lossy()).into_owned()
}

/// What a path or key must escape to be read back from a URL: `%` (escapes begin with it) and
/// `?` (the query begins with it). Everything else stays as written, for people to read.
const IN_URL: &percent_encoding::AsciiSet = &percent_encoding::AsciiSet::EMPTY.add(b'%').add(b'?');

/// `path` (a key, or a file store's directory) as written in a URL that parses back to it.
pub(crate) fn path_in_url(path: &str) -> std::borrow::Cow<'_, str> {
    percent_encoding::utf8_percent_encode(path, IN_URL).into()
}

/// A store's URL (without its query) joined with a key: one `/` between them, never fewer
/// (`file:///` + `k` is `file:///k`, not `file:/k`); the key escaped as [`path_in_url`] says.
pub(crate) fn join_key(base: &str, key: &str) -> String {
    let key = path_in_url(key);
    if base.ends_with('/') {
        format!("{base}{key}")
    } else {
        format!("{base}/{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for ok in [
            "a",
            "locks/gc",
            "ünïcødé key",
            "a b/c%20d",
            "x.y/z..w",
            &"k".repeat(1024),
        ] {
            validate_key(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "a/./b",
            "../a",
            "a\0b",
            "a\nb",
            &"k".repeat(1025),
        ] {
            let e = validate_key(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{bad:?}");
        }
    }

    #[test]
    fn versions_match_on_what_both_say() {
        let full = Version {
            etag: "\"m5\"".into(),
            generation: Some(5),
        };
        assert!(full.matches(&Version::etag("\"m5\"")));
        assert!(!full.matches(&Version::etag("\"m6\"")));
        assert!(!full.matches(&Version::default()));
        let gen_only = Version {
            etag: String::new(),
            generation: Some(5),
        };
        assert!(full.matches(&gen_only) && !gen_only.matches(&Version::etag("x")));
    }

    #[test]
    fn meta() {
        let mut m = Meta::new();
        m.insert("lease-epoch".into(), "7".into());
        validate_meta(&m).unwrap();
        m.insert("Bad".into(), "x".into());
        assert!(validate_meta(&m).is_err());
    }
}
