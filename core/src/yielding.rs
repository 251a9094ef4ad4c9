//! Asking the holders of a queued lock to step aside: the driver of a yield request
//! ([`Change::Yield`], docs/protocol.md §10, "Yield on request"). One conditional write of the
//! lock's record, retried as every change of it is ([`crate::lock_change`]); the holders named
//! learn it at their next confirmation of the record, and step aside by their release.
//!
//! **(changed, issue 23)** A plain lease's holder is asked through the object `KEY.yield`
//! ([`LeaseYield`]), naming the epoch its record shows held: the holder reads it after its
//! renewals while it listens, and steps aside by its release.

use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::io::Io;
use crate::options::{LeaseOptions, Timing};
use crate::protocol::lease_yield::{yield_key, LeaseYield};
use crate::protocol::queue::change::Changed;
use crate::protocol::queue::{Change, YieldAsk, YieldRequest};
use crate::record::{Parsed, Record, RecordState};
use crate::store::{validate_key, Cond, Get, Put};

/// Rounds of read-then-conditional-write of `KEY.yield` before giving up: each lost round is
/// another asker's write landing between our read and write.
const YIELD_OBJECT_ROUNDS: u32 = 5;

/// Write `ask` into the lock's record at `key`. Returns the request that stands afterwards
/// (the tokens it names), or `None` when nobody holds anything in the asked waiter's way.
pub(crate) async fn ask(
    client: &Arc<Io>,
    key: &str,
    ask: YieldAsk,
) -> Result<Option<YieldRequest>> {
    let url = client.lease_url(key);
    validate_key(key).map_err(|e| e.with_lease(&url))?;
    ask.check().map_err(|e| e.with_lease(&url))?;
    let timing = LeaseOptions::default().timing(&client.store().capabilities())?;
    let by = ask.by.clone();
    match crate::lock_change::run(client, key, Change::Yield(ask.clone()), None, &timing).await? {
        // Another's request that stands while ours asked nobody is not ours.
        Changed::Applied { record, wrote, .. } => {
            let request = record.yield_request.filter(|y| y.by == by);
            // The holders asked read the record at once when they listen for hints (the
            // address their entry kept from their wait), in this process too; else at their
            // next renewal.
            if let (true, Some(y)) = (wrote, &request) {
                for g in record
                    .grants
                    .iter()
                    .filter(|g| g.token.is_some_and(|t| y.names(t)))
                {
                    if let Some(wake) = g.wake_hint() {
                        crate::wake_hint::tell(key, g.id(), wake);
                    }
                }
            }
            Ok(request)
        }
        Changed::NoLock => ask_lease(client, key, &url, ask, &timing).await,
    }
}

/// No queued lock at `key`: ask the holder of the plain lease there, if its record shows one
/// held, through `KEY.yield`. Nothing there, or released: `None`, nothing written.
async fn ask_lease(
    client: &Arc<Io>,
    key: &str,
    url: &str,
    ask: YieldAsk,
    timing: &Timing,
) -> Result<Option<YieldRequest>> {
    let held = match client.read_record(key, None, timing).await? {
        Get::Found(obj) => match Record::parse(obj.bytes.as_deref(), obj.size) {
            Parsed::Valid(r) if r.state == RecordState::Held => Some(r.epoch),
            Parsed::Valid(_) => None,
            Parsed::Corrupt { reason, .. } => {
                return Err(Error::new(
                    ErrorKind::Corrupt,
                    format!("{url}: {reason}: nobody can be asked to yield it"),
                )
                .with_lease(url))
            }
        },
        _ => None,
    };
    let Some(epoch) = held else {
        return Ok(None);
    };
    let request = LeaseYield::new(epoch, &ask).map_err(|e| e.with_lease(url))?;
    let bytes = bytes::Bytes::from(request.to_bytes());
    let at = yield_key(key);
    for _ in 0..YIELD_OBJECT_ROUNDS {
        let cond = match client.read_record(&at, None, timing).await? {
            Get::Found(obj) => Cond::Match(obj.version),
            _ => Cond::Create,
        };
        if let Put::Written { .. } = client.put_raw(&at, bytes.clone(), cond, timing).await? {
            return Ok(Some(YieldRequest {
                tokens: vec![epoch],
                by: request.by,
                to: None,
                reason: request.reason,
            }));
        }
    }
    Err(Error::unavailable(format!(
        "{url}: other yield requests kept replacing {} ({YIELD_OBJECT_ROUNDS} rounds): ask again",
        client.lease_url(&at)
    ))
    .with_lease(url))
}
