//! What a client has seen of a record: the last version read, when it first saw it, the
//! store's clock at the last answer (its `Date`), and the store's own stamp of a write.

use std::time::{Duration, SystemTime};

use super::dead_holder::Probe;
use crate::clock::Instant;
use crate::record::{Parsed, Prev, Record};
use crate::store::{Get, Version};

/// What a client has seen of a record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct View {
    pub seen: Option<Seen>,
    /// The store's clock at the last answer (its `Date`), and when (on our clock) that answer
    /// came. A gateway in front of the store may set its own `Date`: this only says when to
    /// look for a stamp (docs/protocol.md §4).
    pub server_now: Option<(SystemTime, Instant)>,
    /// What this machine said of the record's holder's processes since the last answer
    /// ([`dead_holder`](super::dead_holder)); `None` until probed again.
    pub probe: Option<Probe>,
    /// The store's own clock: the `last_modified` of a write read back (the probe object's),
    /// and when (on our clock) that answer came. The store's clock then reads at least the
    /// stamp plus the time since.
    pub stamp: Option<(SystemTime, Instant)>,
    /// Set once `Date` was found ahead of the store's own stamp (or no stamp could be had): the
    /// store-clock rule then goes by stamps alone, and `Date` asks for no more of them.
    pub date_refused: bool,
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
            stamp: None,
            date_refused: false,
        }
    }

    /// The stamp, while at most `span` old on our clock: rate drift is bounded over the spans
    /// the rules measure (ttl + grace), not over hours.
    pub fn usable_stamp(&self, now: Instant, span: Duration) -> Option<(SystemTime, Instant)> {
        self.stamp
            .filter(|(_, got)| now.saturating_duration_since(*got) <= span)
    }

    /// Take in the store's stamp of a write made after the last read (`None`: no stamp could
    /// be had), received at `now`. The `Date` of that read came before the write was sent, so
    /// the store's clock read no more than the stamp then (plus less than one `resolution` of
    /// truncation, and store-node skew, which `grace` bounds). A `Date` further ahead than
    /// `resolution + grace` is not the store's clock: it is refused from now on. Returns true
    /// when this refused it.
    pub fn absorb_stamp(
        &mut self,
        stamp: Option<SystemTime>,
        now: Instant,
        resolution: Duration,
        grace: Duration,
    ) -> bool {
        let was = self.date_refused;
        match stamp {
            Some(t) => {
                self.stamp = Some((t, now));
                if let Some((date, _)) = self.server_now {
                    if date >= t + resolution + grace {
                        self.date_refused = true;
                    }
                }
            }
            None => self.date_refused = true,
        }
        self.date_refused && !was
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

#[cfg(test)]
mod tests;
