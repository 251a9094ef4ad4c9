//! Asking the holders of a queued lock to step aside: the driver of a yield request
//! ([`Change::Yield`], docs/protocol.md §10, "Yield on request"). One conditional write of the
//! lock's record, retried as every change of it is ([`crate::lock_change`]); the holders named
//! learn it at their next confirmation of the record, and step aside by their release.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::io::Io;
use crate::options::LeaseOptions;
use crate::protocol::queue::change::Changed;
use crate::protocol::queue::{Change, YieldAsk, YieldRequest};
use crate::store::validate_key;

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
    match crate::lock_change::run(client, key, Change::Yield(ask), None, &timing).await? {
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
        Changed::NoLock => Err(Error::invalid(format!(
            "{url} is not a queued lock (no queued lock's record there): only a queued lock's \
             holders can be asked to yield (acquire with `--queue`, or a mode, scope or permits)"
        ))
        .with_lease(url)),
    }
}
