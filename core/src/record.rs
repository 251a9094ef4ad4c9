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

mod history;
pub use history::History;

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
    /// Who did it, for a tenure's `by` (a break, a preemption): `label@host`, or whichever of
    /// the two is known.
    pub fn by(&self) -> Option<String> {
        match (&self.label, &self.host) {
            (Some(l), Some(h)) => Some(format!("{l}@{h}")),
            (l, h) => l.clone().or_else(|| h.clone()),
        }
    }

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
    pub broken: Option<Displaced>,
    /// Set by a preemption (`Preempt::EveryEffectFenced`): the holder and epoch this record
    /// took the lease from while it was live. The preempted holder's next renewal fails its
    /// condition and finds itself named here (`LostReason::Preempted`). Carried by the
    /// preemptor's renewals and release; ignored by older readers (docs/protocol.md §3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted: Option<Displaced>,
    /// The tenures before this one, most recent first, at most [`MAX_HISTORY`]: appended by
    /// the write that replaces a tenure (a takeover, a break, the re-creation of a deleted
    /// record), carried unchanged by renewals and releases (docs/protocol.md §3). Entries
    /// that do not parse (written by a newer version) are dropped, never the record.
    /// (Shared, not copied, by the records of one tenure, and each tenure encoded once:
    /// [`History`].)
    #[serde(default, skip_serializing_if = "History::is_empty")]
    pub history: History,
    /// A shared session's attached set (issue 24): the numbers of the grants and waiters its
    /// owner has attached now, as ascending ranges (`"1-4096,4098"`,
    /// `protocol::session::Attached`). Written only by the owner of a shared session, in its
    /// renewals; `None` in every other record (and a checker then judges by the lease rules
    /// alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<String>,
}

/// How many past tenures a record keeps.
pub const MAX_HISTORY: usize = 10;
/// Labels and host names are cut to this many bytes in the history, so a full history stays
/// under 5 KiB whatever the labels.
pub const MAX_HISTORY_TEXT: usize = 64;

/// One past tenure of a lease: who held it, from when to when, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tenure {
    pub epoch: u64,
    /// The holder: its id, label, host and pid (labels and hosts cut to
    /// [`MAX_HISTORY_TEXT`] bytes).
    pub holder: Holder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<String>,
    /// When it ended: the release's time, or the time of the write that ended it (a
    /// takeover after expiry, a break, a re-creation), by the clock of whoever wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// How it ended: `released`, `expired` (taken over after its deadline), `broken` (by an
    /// operator), `preempted` (taken while live by a preempting acquirer), `deleted` (the
    /// record was deleted while held). A string, not an enum, so
    /// that an ending a later version adds parses here too.
    pub end: String,
    /// Who broke or preempted it (their label and host), for `broken` and `preempted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

fn cut(text: &Option<String>) -> Option<String> {
    text.as_ref().map(|t| {
        let mut end = t.len().min(MAX_HISTORY_TEXT);
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t[..end].to_string()
    })
}

impl Tenure {
    /// The tenure of `record`'s holder, ended at `ended_at` as `end`.
    pub fn of(record: &Record, end: &str, ended_at: Option<String>, by: Option<String>) -> Tenure {
        let h = &record.holder;
        Tenure {
            epoch: record.epoch,
            holder: Holder {
                id: h.id.clone(),
                label: cut(&h.label),
                host: cut(&h.host),
                pid: h.pid,
                user: None,
                client: None,
                // What proves a local holder gone matters only while it holds.
                process: None,
            },
            acquired_at: record.acquired_at.clone(),
            ended_at,
            end: end.to_string(),
            by: cut(&by),
        }
    }
}

/// The holder a record took the lease from while it was live, at the epoch it held: by a
/// `break` (`Record::broken`) or a preemption (`Record::preempted`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Displaced {
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

    /// Whether this record is a tenure of its holder: not a break record (held by the
    /// operator who broke the tenure before it, or that record released), nor a record a
    /// lease's create made released, acquired by nobody (the take that follows it is the
    /// tenure, docs/protocol.md §5).
    pub fn is_tenure(&self) -> bool {
        self.broken.is_none() && !self.never_acquired()
    }

    /// A released record that nobody acquired: what a lease's create writes (issue 22).
    pub fn never_acquired(&self) -> bool {
        self.state == RecordState::Released && self.acquired_at.is_none()
    }

    /// The history of a record that replaces this one, ending this record's tenure as `end`
    /// at `ended_at` (a break record is not a tenure: its history is carried as it is).
    pub fn history_after(
        &self,
        end: &str,
        ended_at: Option<String>,
        by: Option<String>,
    ) -> History {
        if !self.is_tenure() {
            return self.history.clone();
        }
        self.history.after(Tenure::of(self, end, ended_at, by))
    }

    /// How this record's tenure ends when a write replaces it: `released` when released (the
    /// release's time), else `expired` at `now`.
    pub fn ending(&self, now: &str) -> (&'static str, Option<String>) {
        match self.state {
            RecordState::Released => ("released", self.renewed_at.clone()),
            RecordState::Held => ("expired", Some(now.to_string())),
        }
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
        // Sized for the record at once: growing from serde_json's 128 bytes to a full history's
        // 3-4 KiB took five reallocations and copies, a measurable part of a renewal (issue 25).
        let mut out = Vec::with_capacity(1024 + self.history.encoded_len());
        serde_json::to_writer(&mut out, self).expect("records serialize");
        Bytes::from(out)
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
            preempted: None,
            history: History::default(),
            attached: None,
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

    /// A `lease run` holder as the CLI writes it, with `label` and `host`.
    fn typical(label: &str, host: &str) -> Record {
        let mut r = sample();
        r.holder = Holder {
            id: "0123456789abcdef0123456789abcdef".into(),
            label: Some(label.into()),
            host: Some(host.into()),
            pid: Some(123_456),
            user: Some("deploy".into()),
            client: Some("lease-cli/0.1.0".into()),
            // `lease run` names its watchdog too (docs/protocol.md §4).
            process: Some(Box::new(HolderProcess {
                boot: "6f1c2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b".into(),
                pid_ns: "pid:[4026531836]".into(),
                time_ns: "time:[4026531834]".into(),
                start: 123_456_789,
                also: vec![(123_457, 123_456_790)],
            })),
        };
        r.renewed_at = r.acquired_at.clone();
        r.write = Some("0123456789abcdef".into());
        r.prev = (0..MAX_PREV)
            .map(|i| Prev {
                id: format!("{i:032x}"),
                rev: 1_000 + i as u64,
                write: Some(format!("{i:016x}")),
            })
            .collect();
        r
    }

    /// `r` after `n` takeovers, each ending the tenure before it.
    fn after_takeovers(mut r: Record, n: usize) -> Record {
        for i in 0..n {
            let end = if i % 2 == 0 { "expired" } else { "broken" };
            r.history = r.history_after(end, r.acquired_at.clone(), Some(r.holder.id.clone()));
            r.epoch += 1;
        }
        r
    }

    #[test]
    fn the_history_keeps_the_last_tenures_most_recent_first_and_stays_bounded() {
        let r = after_takeovers(typical("job", "worker-1"), MAX_HISTORY + 5);
        assert_eq!(r.history.len(), MAX_HISTORY);
        let epochs: Vec<u64> = r.history.iter().map(|t| t.epoch).collect();
        assert_eq!(epochs, (r.epoch - 10..r.epoch).rev().collect::<Vec<_>>());
        // Renewals and releases carry it unchanged.
        assert_eq!(r.successor().history, r.history);
        // A break record's tenure is not one: the history after it is carried as it is.
        let mut b = r.clone();
        b.broken = Some(Displaced {
            id: "x".into(),
            epoch: 1,
        });
        assert_eq!(b.history_after("expired", None, None), r.history);
    }

    /// The measured sizes quoted in docs/protocol.md §3 (`cargo test -p bucket-lease --lib
    /// record::tests::history_bytes -- --nocapture`), and the bound: the largest labels,
    /// hosts and data still fit the 64 KiB limit with a full history.
    #[test]
    fn history_bytes_typical_and_worst_case_fit_the_record_limit() {
        let base = typical("nightly-backup", "worker-17.prod.example.internal");
        let full = after_takeovers(base.clone(), MAX_HISTORY);
        let (b, f) = (base.to_bytes().len(), full.to_bytes().len());
        println!("history bytes: base {b}, full history {f}, delta {}", f - b);
        assert!(
            f - b < 4 * 1024,
            "a typical full history is {} bytes",
            f - b
        );
        // Worst case: labels, hosts and breakers at the longest the options allow (cut to
        // MAX_HISTORY_TEXT in the history), quotes that JSON doubles, and the largest data.
        let long = "\"".repeat(MAX_LABEL_LEN);
        let mut worst = typical(&long, &long);
        worst.data = Some("\\".repeat(MAX_DATA_LEN));
        for i in 0..MAX_HISTORY {
            worst.history =
                worst.history_after("broken", worst.acquired_at.clone(), Some(long.clone()));
            worst.epoch += 1;
            worst.renewed_at = Some(format!("{i}"));
        }
        let w = worst.to_bytes().len() as u64;
        println!("worst-case record: {w} bytes");
        assert!(w < MAX_RECORD_LEN, "{w} bytes");
        assert!(worst.history.iter().all(|t| {
            [&t.holder.label, &t.holder.host, &t.by]
                .iter()
                .all(|x| x.as_ref().unwrap().len() == MAX_HISTORY_TEXT)
        }));
        assert!(matches!(
            Record::parse(Some(&worst.to_bytes()), w),
            Parsed::Valid(_)
        ));
    }

    /// Records are written byte for byte as when the history was a plain list (issue 25): the
    /// record without its history, then `"history":` and the list (its last field). A full
    /// history, as taken over and as renewed, which shares it.
    #[test]
    fn the_shared_history_writes_the_bytes_of_the_plain_list() {
        let full = after_takeovers(typical("nightly \"backup\"", "worker-17"), MAX_HISTORY);
        let mut renewed = full.successor();
        renewed.write = Some("fedcba9876543210".into());
        assert!(renewed.history.is_shared_with(&full.history));
        for r in [&full, &renewed] {
            let mut bare = r.clone();
            bare.history = History::default();
            let bare = bare.to_bytes();
            let mut want = bare[..bare.len() - 1].to_vec();
            want.extend_from_slice(b",\"history\":");
            want.extend(serde_json::to_vec(&r.history.to_vec()).unwrap());
            want.push(b'}');
            assert_eq!(
                String::from_utf8(r.to_bytes().to_vec()).unwrap(),
                String::from_utf8(want).unwrap()
            );
            let b = r.to_bytes();
            assert_eq!(
                Record::parse(Some(&b), b.len() as u64),
                Parsed::Valid(r.clone())
            );
        }
    }

    #[test]
    fn history_entries_that_do_not_parse_are_dropped_never_the_record() {
        let r = after_takeovers(typical("job", "h"), 2);
        let mut v: serde_json::Value = serde_json::from_slice(&r.to_bytes()).unwrap();
        v["history"]
            .as_array_mut()
            .unwrap()
            .insert(1, serde_json::json!({"epoch": "later", "what": 1}));
        let b = serde_json::to_vec(&v).unwrap();
        assert_eq!(
            Record::parse(Some(&b), b.len() as u64),
            Parsed::Valid(r.clone())
        );
        v["history"] = serde_json::json!({"not": "a list"});
        let b = serde_json::to_vec(&v).unwrap();
        let Parsed::Valid(p) = Record::parse(Some(&b), b.len() as u64) else {
            panic!("a history that is not a list must not make the record corrupt");
        };
        assert!(p.history.is_empty());
        // An ending a later version adds parses as it is.
        v["history"] = serde_json::json!([{"epoch": 3, "holder": {"id": "a"}, "end": "preempted"}]);
        let b = serde_json::to_vec(&v).unwrap();
        let Parsed::Valid(p) = Record::parse(Some(&b), b.len() as u64) else {
            panic!("unparsed");
        };
        assert_eq!(p.history[0].end, "preempted");
    }
}
