//! The fencing token as a value users pass on: a lease's URL, an epoch, the holder, and for a
//! queued lock's grant its mode and scope.
//!
//! Written `URL#EPOCH@HOLDER` (`s3://bucket/locks/gc#1767225600000@3f2a…`): readable, and
//! parseable from the right, so a `#` inside a key does not confuse it. Tokens of the same lease
//! compare by epoch; tokens of different leases do not compare at all. The holder id tells two
//! holders apart should they ever share an epoch (a record restored from a backup, say), so that
//! fenced writes and gates never admit both; `URL#EPOCH` without a holder still parses (a
//! token built by hand from `LEASE_EPOCH`), and is then told apart from no other holder.
//!
//! **(changed)** A grant of a queued lock that is shared, or covers only a path or a byte range,
//! says so after the holder: `URL#EPOCH@HOLDER;shared;range=0..4096`,
//! `URL#EPOCH@HOLDER;path=tables/users` (the path percent-encoded beyond `A-Z a-z 0-9 / . _ ~
//! -`), because what a token fences depends on them (docs/protocol.md §7). An exclusive grant
//! of the whole lock, and every plain lease, prints exactly as before; older versions refuse
//! the longer tokens as invalid rather than take them for whole-lock exclusive ones.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::error::{Error, Result};
use crate::scope::{Mode, Scope};

/// The longest holder id a token may carry: a lease's holder ids are 32 hex digits, and the
/// room above that is for ids made by hand in tests and tools.
pub const MAX_TOKEN_HOLDER: usize = 128;

/// Whether `id` has the form of a holder id in a token or a fenced object's metadata:
/// alphanumeric words joined by single dots. A lease's holder id is one word (32 hex digits);
/// a grant held through a shared session is `SID.N`, its entry id in the lock's record (the
/// session's id and the grant's number in it), which tells apart two grants of one session.
/// Anything else (empty, `:` or `;` or `@` inside, a leading, trailing or doubled dot) is
/// refused, so the id cannot break the formats that carry it.
pub(crate) fn valid_holder_id(id: &str) -> bool {
    id.split('.')
        .all(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    lease: String,
    epoch: u64,
    holder: Option<String>,
    mode: Mode,
    scope: Scope,
}

/// What a path keeps unescaped in a token (and in a fenced object's metadata): the characters
/// of ordinary names, and `/`.
pub(crate) const PATH_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'-');

/// A path, escaped for a token or a metadata value.
pub(crate) fn escape_path(path: &str) -> String {
    utf8_percent_encode(path, PATH_ESCAPE).to_string()
}

/// A path escaped by [`escape_path`], back; `None` if it is not valid UTF-8.
pub(crate) fn unescape_path(s: &str) -> Option<String> {
    percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

impl FencingToken {
    /// A token without a holder id (see [`FencingToken::with_holder`]), exclusive over the
    /// whole lease.
    pub fn new(lease: impl Into<String>, epoch: u64) -> Self {
        FencingToken {
            lease: lease.into(),
            epoch,
            holder: None,
            mode: Mode::Exclusive,
            scope: Scope::Whole,
        }
    }

    /// The same token naming the holder it was handed to.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// The same token for a grant in `mode` (a queued lock's shared grant, say).
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The same token for a grant of `scope` only (a path or a byte range of the lock).
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// The lease URL this token belongs to.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The id of the holder this token was handed to, when the token names it.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Exclusive (a writer; every plain lease) or shared (a queued lock's reader or permit).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The part of the lock the grant covers: the whole lock, a path or a byte range.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }
}

impl PartialOrd for FencingToken {
    /// Tokens of the same lease are ordered by epoch (the order the lock handed them out in,
    /// whatever their scopes); tokens of different leases are unordered.
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self.lease == other.lease).then(|| self.epoch.cmp(&other.epoch))
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.lease, self.epoch)?;
        if let Some(holder) = &self.holder {
            write!(f, "@{holder}")?;
        }
        if self.mode == Mode::Shared {
            f.write_str(";shared")?;
        }
        match &self.scope {
            Scope::Whole => Ok(()),
            Scope::Path(p) => write!(f, ";path={}", escape_path(p)),
            Scope::Range { start, end } => write!(f, ";range={start}..{end}"),
        }
    }
}

impl FromStr for FencingToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "invalid fencing token {s:?}: {why}; expected LEASE_URL#EPOCH, \
                 LEASE_URL#EPOCH@HOLDER, optionally followed by ;shared and ;path=PATH or \
                 ;range=START..END"
            ))
        };
        let (lease, tail) = s.rsplit_once('#').ok_or_else(|| bad("no #"))?;
        let mut parts = tail.split(';');
        let head = parts.next().unwrap_or_default();
        let (epoch, holder) = match head.split_once('@') {
            Some((epoch, holder)) => (epoch, Some(holder)),
            None => (head, None),
        };
        if lease.is_empty() || epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the epoch is not a number"));
        }
        if holder.is_some_and(|h| !valid_holder_id(h)) {
            return Err(bad(
                "the holder is not alphanumeric words joined by single dots",
            ));
        }
        // Holder ids are 32 hex digits; a longer one was not made by a lease and could not be
        // recorded in an object's fence metadata as itself (fence::recorded would have to
        // widen it to the whole lock and refuse its own holder next).
        if holder.is_some_and(|h| h.len() > MAX_TOKEN_HOLDER) {
            return Err(bad(&format!(
                "the holder is longer than {MAX_TOKEN_HOLDER} characters"
            )));
        }
        let mut token = FencingToken::new(lease, epoch.parse().map_err(|_| bad("epoch overflow"))?);
        token.holder = holder.map(str::to_string);
        let (mut moded, mut scoped) = (false, false);
        for part in parts {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            match (name, value) {
                ("shared" | "exclusive", "") if !moded => {
                    moded = true;
                    token.mode = if name == "shared" {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    };
                }
                ("path", p) if !scoped => {
                    scoped = true;
                    let path = unescape_path(p).ok_or_else(|| bad("the path is not UTF-8"))?;
                    token.scope = Scope::path(&path).map_err(|e| bad(e.message()))?;
                }
                ("range", r) if !scoped => {
                    scoped = true;
                    token.scope = Scope::parse_range(r).map_err(|e| bad(e.message()))?;
                }
                _ => {
                    return Err(bad(&format!(
                        "{part:?} is not a mode or scope this version knows"
                    )))
                }
            }
        }
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_longer_than_any_lease_makes_is_refused_saying_so() {
        let ok = format!("s3://b/k#7@{}", "a".repeat(MAX_TOKEN_HOLDER));
        assert!(ok.parse::<FencingToken>().is_ok());
        let long = format!("s3://b/k#7@{}", "a".repeat(MAX_TOKEN_HOLDER + 1));
        let e = long.parse::<FencingToken>().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Invalid);
        assert!(e.message().contains("longer than 128"), "{e}");
    }

    #[test]
    fn a_shared_session_grants_holder_sid_dot_n_round_trips() {
        let t = FencingToken::new("s3://b/locks/db", 12)
            .with_holder("3f2a.7")
            .with_mode(Mode::Shared);
        assert_eq!(t.to_string(), "s3://b/locks/db#12@3f2a.7;shared");
        let back: FencingToken = t.to_string().parse().unwrap();
        assert_eq!(back, t);
        assert_eq!(back.holder(), Some("3f2a.7"));
    }

    #[test]
    fn round_trip_and_order() {
        let t = FencingToken::new("s3://b/locks/a#b", 7);
        assert_eq!(t.to_string(), "s3://b/locks/a#b#7");
        let back: FencingToken = t.to_string().parse().unwrap();
        assert_eq!(back, t);
        let h = FencingToken::new("s3://b/k", 7).with_holder("3f2a");
        assert_eq!(h.to_string(), "s3://b/k#7@3f2a");
        assert_eq!(h.to_string().parse::<FencingToken>().unwrap(), h);
        assert_eq!(h.holder(), Some("3f2a"));
        assert_eq!((h.mode(), h.scope()), (Mode::Exclusive, &Scope::Whole));
        assert!(FencingToken::new("x", 3) < FencingToken::new("x", 4));
        assert_eq!(
            FencingToken::new("x", 3).partial_cmp(&FencingToken::new("y", 4)),
            None
        );
        for bad in [
            "",
            "x",
            "x#",
            "#3",
            "x#-1",
            "x#1e3",
            "x#99999999999999999999999",
            "x#3@",
            "x#3@a b",
            "x#3@.a",
            "x#3@a.",
            "x#3@a..b",
            "x#3@a.b.",
            "x#@ab",
            "x#3@ab;",
            "x#3@ab;readers",
            "x#3@ab;shared;shared",
            "x#3@ab;shared=1",
            "x#3@ab;range=4..4",
            "x#3@ab;range=0..4;path=a",
            "x#3@ab;path=a/../b",
            "x#3@ab;path=",
            "x#3@ab;path=%FF",
        ] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad}");
        }
    }

    #[test]
    fn grants_say_their_mode_and_scope_and_parse_back() {
        let base = || FencingToken::new("s3://b/locks/db", 12).with_holder("3f2a");
        let cases = [
            (
                base().with_mode(Mode::Shared),
                "s3://b/locks/db#12@3f2a;shared",
            ),
            (
                base().with_scope(Scope::range(0, 4096).unwrap()),
                "s3://b/locks/db#12@3f2a;range=0..4096",
            ),
            (
                base()
                    .with_mode(Mode::Shared)
                    .with_scope(Scope::path("tables/users").unwrap()),
                "s3://b/locks/db#12@3f2a;shared;path=tables/users",
            ),
            (
                base().with_scope(Scope::path("a b/#c;d@é").unwrap()),
                "s3://b/locks/db#12@3f2a;path=a%20b/%23c%3Bd%40%C3%A9",
            ),
            (
                FencingToken::new("x", 3).with_mode(Mode::Shared),
                "x#3;shared",
            ),
        ];
        for (token, text) in cases {
            assert_eq!(token.to_string(), text);
            assert_eq!(text.parse::<FencingToken>().unwrap(), token, "{text}");
        }
        // `exclusive` may be said, and is the default.
        assert_eq!(
            "x#3@ab;exclusive".parse::<FencingToken>().unwrap(),
            FencingToken::new("x", 3).with_holder("ab")
        );
        // A `#` in the lease's URL stays in the URL; one in a path is escaped.
        let t: FencingToken = "s3://b/a#b#5@ff;path=x%23y".parse().unwrap();
        assert_eq!((t.lease(), t.epoch()), ("s3://b/a#b", 5));
        assert_eq!(t.scope(), &Scope::Path("x#y".into()));
    }
}
