//! What a queued lock's request asks for: its mode (exclusive or shared) and its scope (the
//! whole lock, a path, or a byte range), and when two scopes overlap (docs/protocol.md §10).
//! Options and the protocol's grant rules both use these; they depend only on the error type.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 65_536;
/// The lowest and highest priority a queued request may carry (those of Kubernetes' user
/// priority classes); the default is 0 (docs/protocol.md §10, "Priorities").
pub const MIN_PRIORITY: i32 = -1_000_000_000;
pub const MAX_PRIORITY: i32 = 1_000_000_000;
/// The longest path scope, in bytes: every participant's entry is in the lock's one record,
/// whose size is bounded (docs/protocol.md §10, "Capacity").
pub const MAX_SCOPE_PATH_LEN: usize = 1024;

/// Exclusive (a writer: alone in its scope) or shared (a reader: beside other readers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// What part of the lock a request covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// All of it: overlaps every scope.
    #[default]
    Whole,
    /// A path, `/`-separated: overlaps itself, the paths under it and the paths above it
    /// (`a/b` overlaps `a` and `a/b/c`, not `a/bc`).
    Path(String),
    /// The bytes `[start, end)` of one object: overlaps the ranges it shares a byte with.
    Range { start: u64, end: u64 },
}

impl Scope {
    /// A path scope, checked: non-empty segments, no `.` or `..`, no leading or trailing `/`,
    /// at most [`MAX_SCOPE_PATH_LEN`] bytes.
    pub fn path(path: &str) -> Result<Scope> {
        let trimmed = path.trim_matches('/');
        if trimmed.len() > MAX_SCOPE_PATH_LEN {
            return Err(Error::invalid(format!(
                "scope path is {} bytes, over the {MAX_SCOPE_PATH_LEN}-byte limit: name the part \
                 of the lock more briefly (a hash of a long name, say)",
                trimmed.len()
            )));
        }
        let bad = trimmed.is_empty()
            || trimmed
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
            || trimmed.chars().any(char::is_control);
        if bad {
            return Err(Error::invalid(format!(
                "scope {path:?} is not a path: use `/`-separated names such as \"tables/users\" \
                 (no empty, `.` or `..` segments)"
            )));
        }
        Ok(Scope::Path(trimmed.to_string()))
    }

    /// A byte-range scope `[start, end)`, checked: `start < end`.
    pub fn range(start: u64, end: u64) -> Result<Scope> {
        if start >= end {
            return Err(Error::invalid(format!(
                "byte range {start}..{end} is empty: the end must be above the start (the end is \
                 excluded)"
            )));
        }
        Ok(Scope::Range { start, end })
    }

    /// Parse `START..END` (the CLI's `--range`).
    pub fn parse_range(s: &str) -> Result<Scope> {
        let parsed = s
            .split_once("..")
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        match parsed {
            Some((start, end)) => Scope::range(start, end),
            None => Err(Error::invalid(format!(
                "byte range {s:?} is not START..END (bytes, the end excluded), e.g. 0..4096"
            ))),
        }
    }

    /// Whether two scopes share anything.
    pub fn overlaps(&self, other: &Scope) -> bool {
        match (self, other) {
            (Scope::Whole, _) | (_, Scope::Whole) => true,
            (Scope::Path(a), Scope::Path(b)) => path_within(a, b) || path_within(b, a),
            (Scope::Range { start: s1, end: e1 }, Scope::Range { start: s2, end: e2 }) => {
                s1 < e2 && s2 < e1
            }
            // A path and a byte range name different kinds of things; whoever mixes them on
            // one lock gets the safe answer.
            _ => true,
        }
    }

    pub(crate) fn is_whole(&self) -> bool {
        *self == Scope::Whole
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Whole => f.write_str("whole"),
            Scope::Path(p) => write!(f, "path {p}"),
            Scope::Range { start, end } => write!(f, "bytes {start}..{end}"),
        }
    }
}

fn path_within(inner: &str, outer: &str) -> bool {
    inner == outer || (inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/')
}
