//! The fencing token as a value users pass on: a lease's URL, an epoch and the holder.
//!
//! Written `URL#EPOCH@HOLDER` (`s3://bucket/locks/gc#1767225600000@3f2a…`): readable, and
//! parseable from the right, so a `#` inside a key does not confuse it. Tokens of the same lease
//! compare by epoch; tokens of different leases do not compare at all. The holder id tells two
//! holders apart should they ever share an epoch (a record restored from a backup, say), so that
//! fenced writes and gates never admit both; `URL#EPOCH` without a holder still parses (a
//! token built by hand from `LEASE_EPOCH`), and is then told apart from no other holder.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    lease: String,
    epoch: u64,
    holder: Option<String>,
}

impl FencingToken {
    /// A token without a holder id (see [`FencingToken::with_holder`]).
    pub fn new(lease: impl Into<String>, epoch: u64) -> Self {
        FencingToken {
            lease: lease.into(),
            epoch,
            holder: None,
        }
    }

    /// The same token naming the holder it was handed to.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
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
}

impl PartialOrd for FencingToken {
    /// Tokens of the same lease are ordered by epoch; tokens of different leases are unordered.
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
        Ok(())
    }
}

impl FromStr for FencingToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "invalid fencing token {s:?}: expected LEASE_URL#EPOCH or LEASE_URL#EPOCH@HOLDER"
            ))
        };
        let (lease, tail) = s.rsplit_once('#').ok_or_else(bad)?;
        let (epoch, holder) = match tail.split_once('@') {
            Some((epoch, holder)) => (epoch, Some(holder)),
            None => (tail, None),
        };
        if lease.is_empty() || epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if holder.is_some_and(|h| h.is_empty() || !h.bytes().all(|b| b.is_ascii_alphanumeric())) {
            return Err(bad());
        }
        Ok(FencingToken {
            lease: lease.to_string(),
            epoch: epoch.parse().map_err(|_| bad())?,
            holder: holder.map(str::to_string),
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
        let h = FencingToken::new("s3://b/k", 7).with_holder("3f2a");
        assert_eq!(h.to_string(), "s3://b/k#7@3f2a");
        assert_eq!(h.to_string().parse::<FencingToken>().unwrap(), h);
        assert_eq!(h.holder(), Some("3f2a"));
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
            "x#@ab",
        ] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad}");
        }
    }
}
