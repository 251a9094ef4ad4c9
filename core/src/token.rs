//! The fencing token as a value users pass on: a lease's URL and an epoch.
//!
//! Written `URL#EPOCH` (`s3://bucket/locks/gc#7`): readable, and parseable from the right, so
//! a `#` inside a key does not confuse it. Tokens of the same lease compare by epoch; tokens of
//! different leases do not compare at all.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    lease: String,
    epoch: u64,
}

impl FencingToken {
    pub fn new(lease: impl Into<String>, epoch: u64) -> Self {
        FencingToken {
            lease: lease.into(),
            epoch,
        }
    }

    /// The lease URL this token belongs to.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl PartialOrd for FencingToken {
    /// Tokens of the same lease are ordered by epoch; tokens of different leases are unordered.
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self.lease == other.lease).then(|| self.epoch.cmp(&other.epoch))
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.lease, self.epoch)
    }
}

impl FromStr for FencingToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "invalid fencing token {s:?}: expected LEASE_URL#EPOCH"
            ))
        };
        let (lease, epoch) = s.rsplit_once('#').ok_or_else(bad)?;
        if lease.is_empty() || epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        Ok(FencingToken {
            lease: lease.to_string(),
            epoch: epoch.parse().map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_order() {
        let t = FencingToken::new("s3://b/locks/a#b", 7);
        assert_eq!(t.to_string(), "s3://b/locks/a#b#7");
        let back: FencingToken = t.to_string().parse().unwrap();
        assert_eq!(back, t);
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
        ] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad}");
        }
    }
}
