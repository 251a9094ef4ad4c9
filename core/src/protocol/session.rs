//! Shared sessions: one heartbeat for many grants (docs/protocol.md §10, "Shared sessions",
//! issue 24). What is decided here, purely:
//!
//! - where a shared session lives ([`shared_session_key`]) and how an entry of a queued lock's
//!   record names it and its place in it ([`SharedId`]: an id `SID.N`);
//! - the session's *attached set* ([`Attached`]): the numbers of the grants and waiters attached
//!   to it now, written by its owner in its renewals;
//! - the checker's rule 4 ([`attachment`]): an entry whose number is not in the attached set of
//!   a version of its session read *after* the read of the lock's record that listed it is proven
//!   gone while the session lives on.
//!
//! The owner's machine (attach, detach, renewal, loss; one session lease shared by many grants)
//! is [`owner`]; when its grants' lock records are read to confirm them, [`confirm_round`].

use std::fmt::Write as _;

use crate::record::{Holder, Record, RecordState, FORMAT};

pub mod confirm_round;
pub mod owner;

/// The directory of shared sessions, under the session's prefix (defined beside the stores,
/// whose file store allows this one directory name that starts with a dot).
pub use crate::store::SESSIONS_DIR;

/// The longest prefix an entry may name (a path, not data).
pub const MAX_PREFIX_LEN: usize = 1024;

/// The longest attached set an owner writes (a session record is at most 256 KiB): an
/// attachment that would make it longer is made in another session.
pub const MAX_ATTACHED_LEN: usize = 128 * 1024;

/// The record a shared session begins with, written by a create at its fresh random key: held
/// in the session's own id (a checker takes a record held in the session's id for its owner's:
/// docs/protocol.md §10), at epoch 1, attached to nothing yet. `written_at`: the wall time it
/// is written, `write`: the write's nonce. The driver writes it and the model starts from it.
pub fn opening_record(
    sid: &str,
    mut holder: Holder,
    ttl: std::time::Duration,
    written_at: Option<String>,
    write: String,
) -> Record {
    holder.id = sid.to_string();
    Record {
        format: FORMAT,
        epoch: 1,
        rev: 1,
        state: RecordState::Held,
        ttl_ms: ttl.as_millis() as u64,
        holder,
        acquired_at: written_at.clone(),
        renewed_at: written_at,
        data: None,
        prev: vec![],
        write: Some(write),
        broken: None,
        preempted: None,
        history: Default::default(),
        attached: Some(String::new()),
    }
}

/// The key of the shared session `sid` under `prefix` (`""`: the store's root).
pub fn shared_session_key(prefix: &str, sid: &str) -> String {
    format!("{prefix}{SESSIONS_DIR}{sid}")
}

/// Whether `prefix` may name where shared sessions live: empty, or a directory (ends in `/`),
/// at most [`MAX_PREFIX_LEN`] bytes. A crafted record cannot then steer a checker's reads and
/// `released` writes anywhere but at a `….lease-sessions/<32 hex>` key.
pub fn valid_prefix(prefix: &str) -> bool {
    prefix.len() <= MAX_PREFIX_LEN && (prefix.is_empty() || prefix.ends_with('/'))
}

/// The id of an entry attached to a shared session: `SID.N`, the session's 32 lowercase hex
/// digits and the entry's number in it (from 1, never reused in that session).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedId {
    pub sid: String,
    pub n: u64,
}

impl SharedId {
    /// Parse an entry's id; `None` unless it is exactly `32 lowercase hex "." decimal` with a
    /// number of at least 1 and no leading zero.
    pub fn parse(id: &str) -> Option<SharedId> {
        let (sid, n) = id.split_once('.')?;
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if sid.len() != 32 || !sid.chars().all(hex) {
            return None;
        }
        Some(SharedId {
            sid: sid.to_string(),
            n: number(n)?,
        })
    }

    /// The entry's id.
    pub fn id(&self) -> String {
        format!("{}.{}", self.sid, self.n)
    }
}

/// A decimal number of at least 1, without sign or leading zero.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|n| *n >= 1)
}

/// The numbers attached to a session, as ascending, disjoint, non-adjacent ranges (so each set
/// has one text: `"1-4096,4098"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Attached {
    ranges: Vec<(u64, u64)>,
}

impl Attached {
    /// Parse the text a session's owner wrote; `None` if it is not in the one canonical form
    /// (a record that does not parse proves nothing by rule 4).
    pub fn parse(text: &str) -> Option<Attached> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        if text.is_empty() {
            return Some(Attached { ranges });
        }
        for part in text.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (number(lo)?, number(hi)?),
                None => {
                    let n = number(part)?;
                    (n, n)
                }
            };
            // `lo-hi` only for more than one number: one text per set.
            if lo > hi || (lo == hi && part.contains('-')) {
                return None;
            }
            if let Some(&(_, last)) = ranges.last() {
                // Ascending, and apart: adjacent ranges would be one.
                if lo <= last.saturating_add(1) {
                    return None;
                }
            }
            ranges.push((lo, hi));
        }
        Some(Attached { ranges })
    }

    /// The length of [`Attached::text`], without making it.
    pub fn text_len(&self) -> usize {
        let digits = |n: u64| n.checked_ilog10().unwrap_or(0) as usize + 1;
        let ranges: usize = self
            .ranges
            .iter()
            .map(|&(lo, hi)| match lo == hi {
                true => digits(lo),
                false => digits(lo) + 1 + digits(hi),
            })
            .sum();
        ranges + self.ranges.len().saturating_sub(1)
    }

    /// The canonical text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            if lo == hi {
                let _ = write!(out, "{lo}");
            } else {
                let _ = write!(out, "{lo}-{hi}");
            }
        }
        out
    }

    pub fn contains(&self, n: u64) -> bool {
        // The range that starts at or before `n`, if it reaches `n`.
        let at = self.ranges.partition_point(|&(lo, _)| lo <= n);
        at > 0 && self.ranges[at - 1].1 >= n
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many numbers are attached.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|&(lo, hi)| hi - lo + 1).sum()
    }

    /// Attach `n` (nothing if attached).
    pub fn insert(&mut self, n: u64) {
        // The ranges that start at or before `n`; the last of them may hold it already.
        let at = self.ranges.partition_point(|&(lo, _)| lo <= n);
        if at > 0 && self.ranges[at - 1].1 >= n {
            return;
        }
        let joins_before = at > 0 && self.ranges[at - 1].1 + 1 == n;
        let joins_after = at < self.ranges.len() && self.ranges[at].0 == n + 1;
        match (joins_before, joins_after) {
            (true, true) => {
                self.ranges[at - 1].1 = self.ranges[at].1;
                self.ranges.remove(at);
            }
            (true, false) => self.ranges[at - 1].1 = n,
            (false, true) => self.ranges[at].0 = n,
            (false, false) => self.ranges.insert(at, (n, n)),
        }
    }

    /// Detach `n` (nothing if not attached).
    pub fn remove(&mut self, n: u64) {
        if !self.contains(n) {
            return;
        }
        let at = self.ranges.partition_point(|&(lo, _)| lo <= n) - 1;
        let (lo, hi) = self.ranges[at];
        match (lo == n, hi == n) {
            (true, true) => {
                self.ranges.remove(at);
            }
            (true, false) => self.ranges[at].0 = n + 1,
            (false, true) => self.ranges[at].1 = n - 1,
            (false, false) => {
                self.ranges[at].1 = n - 1;
                self.ranges.insert(at + 1, (n + 1, hi));
            }
        }
    }
}

/// What a version of a shared session says of the entry numbered `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attachment {
    /// Attached: its owner may believe it (rules 1–3 decide whether the session lives).
    Attached,
    /// Not attached: its owner stopped believing it (or never joined with it): gone by rule 4,
    /// provided this version was read by a request sent after the read of the lock's record
    /// that listed the entry (the caller's duty; see the module's documentation).
    Detached,
    /// The version has no attached set, or one that does not parse: rule 4 proves nothing.
    Unknown,
}

/// Rule 4's verdict on entry `n`, from a session version's `attached` text (`None`: none).
pub fn attachment(attached: Option<&str>, n: u64) -> Attachment {
    match attached.map(Attached::parse) {
        Some(Some(set)) if set.contains(n) => Attachment::Attached,
        Some(Some(_)) => Attachment::Detached,
        _ => Attachment::Unknown,
    }
}

#[cfg(test)]
mod tests;
