//! The store's own clock, for the store-clock takeover rule (docs/protocol.md §4).
//!
//! An answer's `Date` is not always the store's clock: a gateway in front of the store (nginx,
//! by default, sets its own `Date` and does not pass the upstream one) answers with its own. A
//! takeover that only `Date` supports is therefore confirmed by a time the store stamped itself:
//! the probe object beside the lease (`KEY.clock`, one per lease key, overwritten each time) is
//! written and read back, and its `last_modified` is the store's clock at that write.
//!
//! Stores whose answers are stamped by the very clock that stamps their objects (memory, file:
//! no gateway can stand between) need no probe: a read's `server_now` is such a stamp.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use bytes::Bytes;
use tracing::warn;

use crate::error::{Error, ErrorKind, Result};
use crate::io::Io;
use crate::options::Timing;
use crate::store::{Cond, Get};

/// The probe object of the lease at `key`.
pub(crate) fn clock_key(key: &str) -> String {
    format!("{key}.clock")
}

/// What a probe object holds: recognisable, so that a probe never overwrites anything else.
pub(crate) const PROBE_BODY: &[u8] =
    b"{\"lease\":\"store clock probe: its last-modified time is the store's clock (docs/protocol.md section 4)\"}\n";

/// The store's clock by a stamp of its own, for the lease at `key`: `Ok(None)` when the
/// store gave no stamp. A failed condition on the probe means another client's probe landed
/// after our read of it: its stamp, read back, serves as well.
pub(crate) async fn stamp(io: &Io, key: &str, timing: &Timing) -> Result<Option<SystemTime>> {
    let timeout = timing.request_timeout;
    if io.store().answers_carry_store_clock() {
        return Ok(match io.get(key, None, timeout).await? {
            Get::Found(o) => o.server_now,
            Get::NotModified { server_now } | Get::NotFound { server_now } => server_now,
        });
    }
    let probe = clock_key(key);
    let cond = match io.get(&probe, None, timeout).await? {
        Get::Found(o) if o.bytes.as_deref() == Some(PROBE_BODY) => Cond::Match(o.version),
        Get::Found(_) => {
            return Err(Error::new(
                ErrorKind::Store,
                format!(
                    "{} holds something other than lease's clock probe: it is left alone",
                    io.lease_url(&probe)
                ),
            ))
        }
        _ => Cond::Create,
    };
    io.put_raw(&probe, Bytes::from_static(PROBE_BODY), cond, timing)
        .await?;
    Ok(match io.get(&probe, None, timeout).await? {
        Get::Found(o) => o.last_modified,
        _ => None,
    })
}

/// Carry out a step machine's `Stamp` step for the lease or queued lock at `key`: the
/// stamp, its failure logged (a stamp that cannot be had refuses `Date`: warned once).
pub(crate) async fn stamp_step(io: &Io, key: &str, timing: &Timing) -> Result<Option<SystemTime>> {
    let stamp = stamp(io, key, timing).await;
    match &stamp {
        Err(e) if e.kind() != ErrorKind::Unavailable => warn_date_refused(io, key, Some(e)),
        Err(e) => warn!(lease = %io.lease_url(key), "reading the store's clock failed: {e}"),
        Ok(_) => {}
    }
    stamp
}

/// Say once per store and process why its `Date` is not used: `why` is the stamp's error,
/// or `None` when `Date` ran ahead of the store's stamp.
pub(crate) fn warn_date_refused(io: &Io, key: &str, why: Option<&Error>) {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let url = io.store().url().to_string();
    let first = WARNED
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(url.clone());
    if !first {
        return;
    }
    let lease = io.lease_url(key);
    match why {
        None => warn!(
            lease = %lease,
            "the answers of {url} carry a Date ahead of the store's own clock (the \
             Last-Modified it stamps on writes): a gateway or proxy in front of the store \
             sets its own Date (nginx does unless configured with `proxy_pass_header Date;`). \
             Takeovers by the store's clock now go by the store's own stamps; fix the \
             gateway so that waiters can take over a dead holder's lease at once again"
        ),
        Some(e) => warn!(
            lease = %lease,
            "cannot read the store's clock from a write of the probe object {}: {e}; \
             takeovers of {url} by the store's clock wait until a record has been seen \
             unchanged for its ttl",
            clock_key(key)
        ),
    }
}
