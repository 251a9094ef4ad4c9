//! Yield on request for a plain lease (docs/protocol.md §10, "Yield on request", *Plain
//! leases*; issue 23). A queued lock carries a request in its own record, which its holders
//! read at every confirmation. A plain lease's holder renews by conditional write and never
//! reads its record, and a request written there would fail that renewal's condition: a change
//! to the machine the lease's safety rests on. So the request is a small object of its own,
//! `KEY.yield` (the epoch asked, who asks, why), written by the asker, and read by the holder
//! after each landed renewal only while it listens (`on_yield`, `yield_request`,
//! `yield_changes`): one conditional read per renewal, opt-in.
//!
//! A request names the epoch it asks, so it belongs to that tenure: a later holder (another
//! epoch) is never told, and the object needs no removal (the next request replaces it). It
//! carries no `to`: a plain lease has no queue to hand over in; after the release, contenders
//! race as always. It changes no record and no belief: the holder steps aside, when it
//! chooses, by its ordinary release.

use serde::{Deserialize, Serialize};

use super::queue::{YieldAsk, YieldRequested};
use crate::error::{Error, Result};

/// What a plain lease's yield request is kept under: the lease's key and this.
pub const YIELD_SUFFIX: &str = ".yield";

/// The key of the yield request object of the lease at `key`.
pub fn yield_key(key: &str) -> String {
    format!("{key}{YIELD_SUFFIX}")
}

/// The request object, `{"epoch":E,"by":WHO,"reason":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseYield {
    /// The tenure asked: the holder's epoch when the asker read the lease's record.
    pub epoch: u64,
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl LeaseYield {
    /// The request `ask` makes of the tenure `epoch`: checked as a queued lock's (`by`,
    /// `reason`), and without a `to` (`Invalid`, nothing written: a plain lease has no queue).
    pub fn new(epoch: u64, ask: &YieldAsk) -> Result<LeaseYield> {
        ask.check()?;
        if ask.to.is_some() {
            return Err(Error::invalid(
                "a plain lease has no waiters to hand over to: ask without `to` (after its \
                 holder releases, contenders race as always), or use a queued lock to hand \
                 over to a named waiter",
            ));
        }
        Ok(LeaseYield {
            epoch,
            by: ask.by.clone(),
            reason: ask.reason.clone(),
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a yield request serializes")
    }

    /// The request in `bytes`, or `None` when they are none (larger than the reader's limit)
    /// or not one: an unreadable object asks nothing.
    pub fn parse(bytes: Option<&[u8]>) -> Option<LeaseYield> {
        serde_json::from_slice(bytes?).ok()
    }
}

/// The holder's side: each request that names its epoch is told once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct YieldWatch {
    told: Option<LeaseYield>,
}

impl YieldWatch {
    /// The holder of `epoch` read the request object: `None` (absent, unreadable, asking
    /// another tenure, or the request already told), else what to tell it.
    pub fn read(&mut self, epoch: u64, object: Option<&[u8]>) -> Option<YieldRequested> {
        let any_tenure = super::mutants::on(super::mutants::Mutant::LeaseYieldAnyTenure);
        let request = LeaseYield::parse(object).filter(|r| r.epoch == epoch || any_tenure)?;
        if self.told.as_ref() == Some(&request) {
            return None;
        }
        let told = YieldRequested {
            by: request.by.clone(),
            to: None,
            reason: request.reason.clone(),
        };
        self.told = Some(request);
        Some(told)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(by: &str, reason: Option<&str>) -> YieldAsk {
        YieldAsk {
            by: by.into(),
            to: None,
            reason: reason.map(str::to_string),
        }
    }

    fn object(epoch: u64, by: &str, reason: Option<&str>) -> Vec<u8> {
        LeaseYield::new(epoch, &ask(by, reason)).unwrap().to_bytes()
    }

    #[test]
    fn the_object_sits_beside_the_lease_and_says_the_epoch_who_and_why() {
        assert_eq!(yield_key("jobs/gc"), "jobs/gc.yield");
        assert_eq!(
            String::from_utf8(object(7, "ops", Some("deploy"))).unwrap(),
            r#"{"epoch":7,"by":"ops","reason":"deploy"}"#
        );
        assert_eq!(
            String::from_utf8(object(7, "ops", None)).unwrap(),
            r#"{"epoch":7,"by":"ops"}"#
        );
    }

    #[test]
    fn a_request_with_a_to_or_bad_bounds_is_refused() {
        let mut to = ask("ops", None);
        to.to = Some("3f2a".into());
        let e = LeaseYield::new(7, &to).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Invalid);
        assert!(e.message().contains("no waiters"), "{e}");
        assert!(LeaseYield::new(7, &ask("", None)).is_err());
        let long = "x".repeat(crate::protocol::queue::yield_request::MAX_YIELD_REASON_LEN + 1);
        assert!(LeaseYield::new(7, &ask("ops", Some(&long))).is_err());
    }

    #[test]
    fn the_holder_of_the_epoch_asked_is_told_once_per_request() {
        let mut w = YieldWatch::default();
        let first = object(7, "ops", Some("deploy"));
        let told = w.read(7, Some(&first)).unwrap();
        assert_eq!(
            (told.by.as_str(), told.to, told.reason.as_deref()),
            ("ops", None, Some("deploy"))
        );
        assert_eq!(w.read(7, Some(&first)), None, "told once");
        // Another request for the same tenure is news.
        let second = object(7, "ci", None);
        assert_eq!(w.read(7, Some(&second)).unwrap().by, "ci");
        assert_eq!(w.read(7, Some(&second)), None);
    }

    #[test]
    fn another_tenure_an_absent_or_unreadable_object_tells_nothing() {
        let mut w = YieldWatch::default();
        assert_eq!(
            w.read(8, Some(&object(7, "ops", None))),
            None,
            "an earlier tenure"
        );
        assert_eq!(
            w.read(6, Some(&object(7, "ops", None))),
            None,
            "a later tenure"
        );
        assert_eq!(w.read(7, None), None);
        assert_eq!(w.read(7, Some(b"not json")), None);
        assert_eq!(w.read(7, Some(br#"{"by":"ops"}"#)), None, "no epoch");
        // Nothing was told: the request for this tenure is still news.
        assert!(w.read(7, Some(&object(7, "ops", None))).is_some());
    }
}
