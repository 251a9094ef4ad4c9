//! The lease record: one small JSON object per lease.
//!
//! ```json
//! { "format": 1, "epoch": 7, "rev": 42, "state": "held", "ttl_ms": 30000,
//!   "holder": { "id": "…", "label": "worker-3", "host": "…", "pid": 1234, "user": "…",
//!               "client": "lease 0.1.0 (rust)" },
//!   "acquired_at": "2026-11-22T10:00:00.123Z", "renewed_at": "…", "data": "…" }
//! ```
//! `epoch` is the fencing token, `rev` grows on every write so no two writes carry the same
//! bytes, `write` is a nonce per write so a writer recognises its own write when reading back. Times are for people; no decision compares them across machines. Unknown fields are
//! ignored. Anything else that does not parse is corrupt.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The record format this library writes and reads.
pub const FORMAT: u32 = 1;
/// Records larger than this are corrupt and never read into memory.
pub const MAX_RECORD_LEN: u64 = 64 * 1024;
/// Longest holder label.
pub const MAX_LABEL_LEN: usize = 256;
/// Largest user data payload.
pub const MAX_DATA_LEN: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordState {
    Held,
    Released,
}

/// Who holds (or last held) a lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Holder {
    /// Random per acquisition: the only field the protocol compares.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Where the holder's process runs, so that a waiter on the same machine can prove it gone
    /// and take over at once (docs/protocol.md §4). Older readers ignore it.
    /// (Boxed: holders are in many enums, and most of them never name processes.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Box<HolderProcess>>,
}

/// What a waiter needs to prove a holder's processes gone: that it runs on this very boot of
/// this machine, in this pid namespace (where its pids mean what they mean to us), and which
/// processes those pids were (their start times, which a later process reusing a pid does not
/// share).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HolderProcess {
    /// The machine's boot id (`/proc/sys/kernel/random/boot_id`): random per boot, so another
    /// machine's (over a network file system) or an earlier boot's never matches.
    pub boot: String,
    /// The holder's pid namespace (`pid:[4026531836]`).
    pub pid_ns: String,
    /// The time namespace its start times were read in (`time:[4026531834]`, `-` without time
    /// namespaces): `/proc` shifts start times by the reader's namespace offsets.
    pub time_ns: String,
    /// The start time of the holder's `pid`, in clock ticks after boot (`/proc/PID/stat`).
    pub start: u64,
    /// Other processes that act under the lease and must be gone too (`lease run`'s watchdog,
    /// which outlives the command it kills), as `[pid, start]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<(u32, u64)>,
}

impl Holder {
    /// A short description for messages: `"worker-3" (id 1234abcd, host h, pid 7)`; without a
    /// label, what ran it: `a python process (id 1234abcd, host h, pid 7)`.
    pub fn describe(&self) -> String {
        let short_id: String = self.id.chars().take(8).collect();
        let mut details = vec![format!("id {short_id}")];
        if let Some(host) = &self.host {
            details.push(format!("host {host}"));
        }
        if let Some(pid) = self.pid {
            details.push(format!("pid {pid}"));
        }
        match &self.label {
            Some(label) => format!("{label:?} ({})", details.join(", ")),
            None => format!("{} ({})", self.unlabelled(), details.join(", ")),
        }
    }

    /// What a holder without a label is called: the language or tool its `client` field names
    /// (`lease 0.1.0 (python)`: `a python process`), else `an unnamed holder`.
    fn unlabelled(&self) -> String {
        let tool = self.client.as_deref().and_then(|c| {
            let (_, name) = c.rsplit_once('(')?;
            name.strip_suffix(')').filter(|n| !n.is_empty())
        });
        match tool {
            Some(tool) => format!("a {tool} process"),
            None => "an unnamed holder".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    pub epoch: u64,
    pub rev: u64,
    pub state: RecordState,
    pub ttl_ms: u64,
    pub holder: Holder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The latest record of each of the holders before this one (and this holder's previous
    /// record), most recent first, at most [`MAX_PREV`]: a writer whose reply was lost can then
    /// tell, reading back, that its write landed even if others have since taken the lease and
    /// written (a release followed at once by takeovers, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prev: Vec<Prev>,
    /// A nonce drawn for each write (each conditional PUT sequence, not each resend of the same
    /// bytes): a writer whose reply was lost recognises its own write by it. Two attempts of one
    /// acquisition carry the same holder id and rev but different nonces, so a read-back never
    /// takes an earlier attempt that landed late for a later one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<String>,
    /// Set by `break`: the holder this record broke. The broken holder recognises the break at
    /// its next renewal, and releasing the record acknowledges it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<Broken>,
}

/// The holder a `break` took the lease from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Broken {
    pub id: String,
    pub epoch: u64,
}

/// How many earlier holders a record remembers.
pub const MAX_PREV: usize = 8;

/// Which record a write replaced: its write nonce identifies it (holder id and rev are kept
/// for people, and for records written before nonces existed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prev {
    pub id: String,
    pub rev: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<String>,
}

/// What a stored object says, once parsed.
#[allow(clippy::large_enum_variant)] // short-lived, one per read; boxing would only allocate
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Parsed {
    Valid(Record),
    /// Not a record this library can use; `epoch` is whatever epoch could still be read from it,
    /// so a takeover stays above it.
    Corrupt {
        reason: String,
        epoch: Option<u64>,
    },
}

impl Record {
    /// This record's identity, as remembered by the records that replace it.
    pub fn as_prev(&self) -> Prev {
        Prev {
            id: self.holder.id.clone(),
            rev: self.rev,
            write: self.write.clone(),
        }
    }

    /// Whether this record is the write with nonce `write`.
    pub fn is_write(&self, write: &str) -> bool {
        self.write.as_deref() == Some(write)
    }

    /// Whether this record names the write with nonce `write` among those it replaced.
    pub fn replaced_write(&self, write: &str) -> bool {
        self.prev.iter().any(|p| p.write.as_deref() == Some(write))
    }

    /// The `prev` list of a record that replaces this one.
    pub fn prev_for_successor(&self) -> Vec<Prev> {
        // One entry per holder, its latest record: a write whose outcome is pending is always
        // its holder's latest, so this remembers the last MAX_PREV hand-overs, not just the last
        // few renewals.
        let older = self.prev.iter().filter(|p| p.id != self.holder.id).cloned();
        std::iter::once(self.as_prev())
            .chain(older)
            .take(MAX_PREV)
            .collect()
    }

    /// The next write of the same holder: `rev + 1`, replacing this one. Its nonce is unset:
    /// the writer draws one.
    pub fn successor(&self) -> Record {
        Record {
            rev: self.rev + 1,
            prev: self.prev_for_successor(),
            write: None,
            ..self.clone()
        }
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("records serialize"))
    }

    /// Parse stored bytes; `None` means the object was larger than [`MAX_RECORD_LEN`].
    pub fn parse(bytes: Option<&[u8]>, size: u64) -> Parsed {
        let Some(bytes) = bytes.filter(|_| size <= MAX_RECORD_LEN) else {
            return Parsed::Corrupt {
                reason: format!("record is {size} bytes, over the {MAX_RECORD_LEN}-byte limit"),
                epoch: None,
            };
        };
        if bytes.is_empty() {
            return Parsed::Corrupt {
                reason: "record is empty".into(),
                epoch: None,
            };
        }
        match serde_json::from_slice::<Record>(bytes) {
            Ok(r) if r.format != FORMAT => Parsed::Corrupt {
                reason: format!(
                    "record format {} is not supported (this library reads format {FORMAT})",
                    r.format
                ),
                epoch: Some(r.epoch),
            },
            Ok(r) if r.holder.id.is_empty() => Parsed::Corrupt {
                reason: "record has an empty holder id".into(),
                epoch: Some(r.epoch),
            },
            Ok(r) if r.ttl_ms == 0 => Parsed::Corrupt {
                reason: "record has a zero ttl".into(),
                epoch: Some(r.epoch),
            },
            Ok(r) => Parsed::Valid(r),
            Err(e) => {
                // Salvage an epoch from anything that is at least a JSON object with one.
                let epoch = serde_json::from_slice::<serde_json::Value>(bytes)
                    .ok()
                    .and_then(|v| v.get("epoch").and_then(|e| e.as_u64()));
                Parsed::Corrupt {
                    reason: format!("record does not parse: {e}"),
                    epoch,
                }
            }
        }
    }
}

/// RFC 3339 with milliseconds, UTC: the record's informational timestamps.
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            format: 1,
            epoch: 7,
            rev: 42,
            state: RecordState::Held,
            ttl_ms: 30_000,
            holder: Holder {
                id: "abc".into(),
                label: Some("w".into()),
                host: Some("h".into()),
                pid: Some(1),
                user: None,
                client: None,
                process: None,
            },
            acquired_at: Some(timestamp(SystemTime::UNIX_EPOCH)),
            renewed_at: None,
            data: None,
            prev: vec![],
            write: Some("w0".into()),
            broken: None,
        }
    }

    #[test]
    fn round_trip_and_unknown_fields() {
        let r = sample();
        let b = r.to_bytes();
        assert_eq!(
            Record::parse(Some(&b), b.len() as u64),
            Parsed::Valid(r.clone())
        );
        let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        v["future_field"] = serde_json::json!({"x": 1});
        v["holder"]["extra"] = serde_json::json!(true);
        let b2 = serde_json::to_vec(&v).unwrap();
        assert_eq!(Record::parse(Some(&b2), b2.len() as u64), Parsed::Valid(r));
        assert_eq!(
            timestamp(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn corrupt_records() {
        let cases: Vec<(Vec<u8>, Option<u64>)> = vec![
            (vec![], None),
            (br#"{"format":1,"epoch":5,"rev""#.to_vec(), None),
            (br#"{"format":1,"epoch":5,"rev":"x","state":"held","ttl_ms":1,"holder":{"id":"a"}}"#.to_vec(), Some(5)),
            (br#"{"format":2,"epoch":9,"rev":1,"state":"held","ttl_ms":1,"holder":{"id":"a"}}"#.to_vec(), Some(9)),
            (br#"{"format":1,"epoch":9,"rev":1,"state":"gone","ttl_ms":1,"holder":{"id":"a"}}"#.to_vec(), Some(9)),
            (br#"{"format":1,"epoch":9,"rev":1,"state":"held","ttl_ms":0,"holder":{"id":"a"}}"#.to_vec(), Some(9)),
            (br#"[1,2,3]"#.to_vec(), None),
            (vec![0xff, 0x00, 0x13, 0x37], None),
        ];
        for (bytes, epoch) in cases {
            match Record::parse(Some(&bytes), bytes.len() as u64) {
                Parsed::Corrupt { epoch: e, .. } => {
                    assert_eq!(e, epoch, "{:?}", String::from_utf8_lossy(&bytes))
                }
                other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(&bytes)),
            }
        }
        assert!(matches!(
            Record::parse(None, 10 << 20),
            Parsed::Corrupt { .. }
        ));
    }

    #[test]
    fn prev_keeps_the_latest_record_of_each_earlier_holder() {
        let mut r = sample();
        for i in 0..5 {
            r = r.successor(); // renewals
            r.write = Some(format!("w{}", i + 1));
        }
        assert_eq!(
            r.prev,
            vec![Prev {
                id: "abc".into(),
                rev: 46,
                write: Some("w4".into()),
            }]
        );
        assert!(r.replaced_write("w4") && !r.replaced_write("w3") && r.is_write("w5"));
        for i in 0..20 {
            let mut next = r.successor();
            next.holder.id = format!("h{i}");
            next.prev = r.prev_for_successor();
            r = next.successor().successor();
        }
        assert_eq!(r.prev.len(), MAX_PREV);
        let ids: Vec<&str> = r.prev.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            ["h19", "h18", "h17", "h16", "h15", "h14", "h13", "h12"]
        );
        assert_eq!(r.prev[0].rev, r.rev - 1);
    }

    #[test]
    fn describe_holder() {
        assert_eq!(sample().holder.describe(), "\"w\" (id abc, host h, pid 1)");
        let h = Holder {
            id: "0123456789".into(),
            ..Default::default()
        };
        assert_eq!(h.describe(), "an unnamed holder (id 01234567)");
        // Without a label, what ran it: not "holder (id …)" (issue 28).
        let h = Holder {
            id: "0123456789".into(),
            pid: Some(7),
            client: Some("lease 0.1.0 (python)".into()),
            ..Default::default()
        };
        assert_eq!(h.describe(), "a python process (id 01234567, pid 7)");
    }
}
