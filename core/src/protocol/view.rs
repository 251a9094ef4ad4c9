//! What a client has seen of a record: the last version read, when it first saw it, and the
//! store's clock at the last answer.

use std::time::SystemTime;

use super::dead_holder::Probe;
use crate::clock::Instant;
use crate::record::{Parsed, Prev, Record};
use crate::store::{Get, Version};

/// What a client has seen of a record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct View {
    pub seen: Option<Seen>,
    /// The store's clock at the last answer, and when (on our clock) that answer came.
    pub server_now: Option<(SystemTime, Instant)>,
    /// What this machine said of the record's holder's processes since the last answer
    /// ([`dead_holder`](super::dead_holder)); `None` until probed again.
    pub probe: Option<Probe>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // one per waiter; boxing would only add an allocation
pub enum Seen {
    Absent,
    Present {
        version: Version,
        parsed: Parsed,
        last_modified: Option<SystemTime>,
        /// When this version was first seen, read *after* the answer that showed it.
        first_seen: Instant,
    },
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl View {
    /// A view of a record known without reading it (one this client released itself).
    pub fn known(version: Version, record: Record, now: Instant) -> View {
        View {
            seen: Some(Seen::Present {
                version,
                parsed: Parsed::Valid(record),
                last_modified: None,
                first_seen: now,
            }),
            server_now: None,
            probe: None,
        }
    }

    /// The valid record seen, if any.
    pub fn record(&self) -> Option<&Record> {
        match &self.seen {
            Some(Seen::Present {
                parsed: Parsed::Valid(r),
                ..
            }) => Some(r),
            _ => None,
        }
    }

    /// The `prev` list of a write that replaces the record seen.
    pub fn prev(&self) -> Vec<Prev> {
        self.record()
            .map_or_else(Vec::new, Record::prev_for_successor)
    }

    /// An epoch above any token that can have been handed out for a record that is absent or
    /// unreadable: the wall clock in milliseconds, the store's or ours (`wall`), whichever is
    /// later. (The file store's clock is the boot clock, whose milliseconds are small.)
    pub fn time_epoch(&self, wall: SystemTime) -> u64 {
        let store = self.server_now.map_or(0, |(t, _)| unix_ms(t));
        store.max(unix_ms(wall))
    }

    pub fn version(&self) -> Option<&Version> {
        match &self.seen {
            Some(Seen::Present { version, .. }) => Some(version),
            _ => None,
        }
    }

    /// Take in the answer to a read made with `if_none_match = self.version()`, received at
    /// `now`.
    pub fn absorb(&mut self, get: Get, now: Instant) {
        self.probe = None;
        match get {
            Get::Found(obj) => {
                let server_now = obj.server_now;
                if self.version() != Some(&obj.version) {
                    self.seen = Some(Seen::Present {
                        parsed: Record::parse(obj.bytes.as_deref(), obj.size),
                        version: obj.version,
                        last_modified: obj.last_modified,
                        first_seen: now,
                    });
                }
                self.server_now = server_now.map(|t| (t, now));
            }
            Get::NotModified { server_now } => self.server_now = server_now.map(|t| (t, now)),
            Get::NotFound { server_now } => {
                self.seen = Some(Seen::Absent);
                self.server_now = server_now.map(|t| (t, now));
            }
        }
    }
}
