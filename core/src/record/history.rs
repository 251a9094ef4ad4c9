//! A record's history of past tenures, shared and encoded once per tenure.
//!
//! Every write of a lease record carries its history (up to [`MAX_HISTORY`] tenures, a few KiB
//! of JSON), but only the write that ends a tenure changes it: renewals and releases carry it
//! unchanged. Kept as a plain list, each of those writes cloned it (about seventy strings) and
//! encoded it again: on the memory store that nearly doubled a renewal (docs/benchmarks.md,
//! issue 25). So a history is an immutable list shared by pointer, and each of its tenures keeps
//! its JSON once made: a renewal copies one pointer and writes cached bytes, and a takeover
//! encodes only the tenure it ends (the tenures it carries over share their entries and
//! encodings with the history they came from).
//!
//! The bytes written are those of the plain list: serde_json writes a cached tenure (a
//! [`RawValue`] made by `to_raw_value`, which is `to_string`) verbatim, so the compact encoding
//! of a record is unchanged (`record::tests::the_shared_history_writes_the_bytes_of_the_plain_list`).
//! Records are only ever encoded as JSON; a serializer other than serde_json's would see the
//! cached tenures as serde_json's private raw-value structs.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Index;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::{Tenure, MAX_HISTORY};

/// The tenures before a record's, most recent first: cheap to clone (one pointer), and each
/// tenure encoded at most once.
#[derive(Clone, Default)]
pub struct History(Arc<[Arc<Entry>]>);

/// One tenure and, once it has been written, its JSON.
struct Entry {
    tenure: Tenure,
    json: OnceLock<Box<RawValue>>,
}

impl Entry {
    fn new(tenure: Tenure) -> Arc<Entry> {
        Arc::new(Entry {
            tenure,
            json: OnceLock::new(),
        })
    }

    fn json(&self) -> &RawValue {
        self.json.get_or_init(|| {
            serde_json::value::to_raw_value(&self.tenure).expect("tenures serialize")
        })
    }
}

impl History {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Tenure> + '_ {
        self.0.iter().map(|e| &e.tenure)
    }

    /// The length of its JSON (encoding the tenures not encoded yet).
    pub fn encoded_len(&self) -> usize {
        let commas = self.len().saturating_sub(1);
        2 + commas + self.0.iter().map(|e| e.json().get().len()).sum::<usize>()
    }

    /// Whether `other` is this very list (not a copy).
    #[cfg(test)]
    pub(crate) fn is_shared_with(&self, other: &History) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub fn to_vec(&self) -> Vec<Tenure> {
        self.iter().cloned().collect()
    }

    /// `first`, then this history, cut to [`MAX_HISTORY`] tenures: the tenures carried over
    /// share their entries (and encodings) with this history.
    pub fn after(&self, first: Tenure) -> History {
        let kept = self.0.iter().take(MAX_HISTORY - 1).cloned();
        History(std::iter::once(Entry::new(first)).chain(kept).collect())
    }
}

impl From<Vec<Tenure>> for History {
    fn from(tenures: Vec<Tenure>) -> History {
        tenures.into_iter().collect()
    }
}

impl FromIterator<Tenure> for History {
    fn from_iter<I: IntoIterator<Item = Tenure>>(tenures: I) -> History {
        History(tenures.into_iter().map(Entry::new).collect())
    }
}

impl Index<usize> for History {
    type Output = Tenure;
    fn index(&self, i: usize) -> &Tenure {
        &self.0[i].tenure
    }
}

// Equality, hashing and debug output are those of the list of tenures: the cached encodings are
// a function of them.
impl PartialEq for History {
    fn eq(&self, other: &History) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.iter().eq(other.iter())
    }
}

impl Eq for History {}

impl PartialEq<Vec<Tenure>> for History {
    fn eq(&self, other: &Vec<Tenure>) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Hash for History {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As a slice of tenures hashes: its length, then each.
        state.write_usize(self.len());
        self.iter().for_each(|t| t.hash(state));
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for History {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|e| e.json()))
    }
}

impl<'de> Deserialize<'de> for History {
    /// Lenient: any JSON value parses; only the entries that are tenures are kept (an entry a
    /// newer version wrote that does not parse here is dropped, never the record).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<History, D::Error> {
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::Array(values) => values
                .into_iter()
                .filter_map(|v| serde_json::from_value(v).ok())
                .collect(),
            _ => History::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Holder;

    fn tenure(epoch: u64, label: &str) -> Tenure {
        Tenure {
            epoch,
            holder: Holder {
                id: format!("{epoch:032x}"),
                label: Some(label.into()),
                host: Some("h\u{e9}\u{1f600}".into()),
                pid: Some(7),
                ..Default::default()
            },
            acquired_at: Some("2026-11-26T12:00:00.000Z".into()),
            ended_at: epoch
                .is_multiple_of(2)
                .then(|| "2026-11-26T12:00:01.000Z".into()),
            end: "expired".into(),
            by: epoch.is_multiple_of(3).then(|| "ops@\"bastion\"".into()),
        }
    }

    /// Labels with what JSON escapes: quotes, backslashes, control characters, non-ASCII.
    fn full() -> Vec<Tenure> {
        (0..MAX_HISTORY as u64)
            .map(|i| {
                tenure(
                    100 - i,
                    &format!("job \"{i}\" \\ \n\t\u{1} \u{7f} \u{2028} caf\u{e9}"),
                )
            })
            .collect()
    }

    #[test]
    fn a_history_encodes_as_the_plain_list_of_its_tenures() {
        let plain = full();
        let shared = History::from(plain.clone());
        let want = serde_json::to_vec(&plain).unwrap();
        // Encoded, then encoded again from the cached entries.
        assert_eq!(serde_json::to_vec(&shared).unwrap(), want);
        assert!(shared.0.iter().all(|e| e.json.get().is_some()));
        assert_eq!(serde_json::to_vec(&shared).unwrap(), want);
        assert_eq!(shared.encoded_len(), want.len());
        assert_eq!(serde_json::to_vec(&History::default()).unwrap(), b"[]");
        assert_eq!(History::default().encoded_len(), 2);
        // And it reads back as the list it is.
        let back: History = serde_json::from_slice(&want).unwrap();
        assert_eq!(back, plain);
        assert_eq!(back, shared);
    }

    #[test]
    fn a_new_history_shares_the_tenures_it_carries_and_their_encodings() {
        let old = History::from(full());
        serde_json::to_vec(&old).unwrap();
        let new = old.after(tenure(101, "next"));
        assert_eq!(new.len(), MAX_HISTORY);
        assert_eq!(new[0].epoch, 101);
        // The nine most recent are carried by pointer, already encoded; the oldest is cut.
        for (carried, was) in new.0[1..].iter().zip(old.0.iter()) {
            assert!(Arc::ptr_eq(carried, was));
        }
        assert!(new.0[0].json.get().is_none());
        let mut want = vec![tenure(101, "next")];
        want.extend(full().into_iter().take(MAX_HISTORY - 1));
        assert_eq!(new, want);
        assert_eq!(
            serde_json::to_vec(&new).unwrap(),
            serde_json::to_vec(&want).unwrap()
        );
        // A clone is the same list, not a copy.
        assert!(Arc::ptr_eq(&new.clone().0, &new.0));
        // A shorter history grows by one.
        assert_eq!(
            History::default().after(tenure(1, "a")),
            vec![tenure(1, "a")]
        );
    }

    #[test]
    fn equal_histories_hash_alike_shared_or_not() {
        use std::collections::hash_map::DefaultHasher;
        let hash = |h: &History| {
            let mut s = DefaultHasher::new();
            h.hash(&mut s);
            s.finish()
        };
        let (a, b) = (History::from(full()), History::from(full()));
        assert!(!Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, b);
        assert_eq!(hash(&a), hash(&b));
        let c = a.after(tenure(0, "x"));
        assert_ne!(a, c);
        assert_ne!(hash(&a), hash(&c));
        assert_eq!(format!("{a:?}"), format!("{:?}", full()));
    }
}
