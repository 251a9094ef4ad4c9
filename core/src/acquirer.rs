//! Acquiring a lease (one holder, format 1): the driver of
//! [`protocol::acquire`](crate::protocol::acquire). It only carries out steps — read, write,
//! stamp, probe this machine's processes, sleep — and reports, telling a waiting user who holds
//! the lease ([`WAITING_TARGET`]). A read that shows a queued lock's record ends it (the caller goes on as
//! a queued lock's waiter, docs/protocol.md §10); a record written by a newer version ends it
//! with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported), never taken over.
//!
//! Used by `acquire.rs` for leases and by `queue.rs` for participants' sessions.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::Result;
use crate::io::local_wake;
use crate::io::Io;
use crate::lease::Lease;
use crate::options::Timing;
use crate::protocol::acquire::{Acquirer, Event, Plan, Step};
use crate::protocol::queue::{classify_get, newer_error, Classified};
use crate::record::Holder;
use crate::store::Get;
use crate::store_clock;

/// The `tracing` target of the event that says an acquisition waits for a holder: once, then
/// at each change of holder (`waiting for URL, held by "job" (id …, host h, pid 7) at epoch
/// N`), at info. `lease run` prints it on a terminal.
pub const WAITING_TARGET: &str = "lease::waiting";

/// Tell (at info, target [`WAITING_TARGET`]) who holds the lease when that changed since `told`.
fn say_who_holds(
    url: &str,
    waiting_for: Option<(Option<&Holder>, Option<u64>)>,
    told: &mut Option<(Option<String>, Option<u64>)>,
) {
    let Some((holder, epoch)) = waiting_for else {
        return;
    };
    let seen = (holder.map(|h| h.id.clone()), epoch);
    if told.as_ref() == Some(&seen) {
        return;
    }
    let by = holder.map_or_else(
        || "an unknown holder (the record is corrupt)".to_string(),
        Holder::describe,
    );
    let at = epoch.map_or_else(String::new, |e| format!(" at epoch {e}"));
    info!(target: WAITING_TARGET, lease = %url, "waiting for {url}, held by {by}{at}");
    *told = Some(seen);
}

/// How a lease acquisition ended.
pub(crate) enum Acquired {
    /// With the hand-over latency when this acquisition took over from a holder it saw
    /// release or expire (for the metrics).
    Lease {
        lease: Lease,
        handover: Option<std::time::Duration>,
    },
    /// The key holds a queued lock's record (this read showed it).
    QueuedLock(Get),
}

/// Acquire the lease at `key` as `plan` says.
pub(crate) async fn run(
    client: &Arc<Io>,
    key: &str,
    plan: Plan,
    cancel: &CancellationToken,
) -> Result<Acquired> {
    let clock = client.clock().clone();
    let rng = &client.rng;
    let url = plan.url.clone();
    let timing: Timing = plan.timing;
    let memo = client.memo(key);
    // The remembered release is used once: whatever happens, the view moves on.
    client.remember(key, |m| m.released = None);
    let mut acquirer = Acquirer::new(plan, memo.epoch, memo.released, clock.now());
    let wake = local_wake(client.store().url(), key);
    let mut event = Event::Start;
    let mut failed_read = None;
    let mut told = None;
    let mut warned_date = false;
    let result = loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if cancel.is_cancelled() && matches!(event, Event::Start | Event::Slept) {
            event = Event::Cancelled;
        }
        let step = acquirer.step(event, clock.now(), clock.wall(), rng);
        say_who_holds(&url, acquirer.waiting_for(), &mut told);
        // A failed read that is retried is logged: nothing else says why the wait goes on.
        // One that ends the acquisition is not: the error returned is its report.
        if let (Some(e), Step::Sleep { .. }) = (failed_read.take(), &step) {
            warn!(lease = %url, "read failed, retrying: {e}");
        }
        if !warned_date && acquirer.date_refused() {
            warned_date = true;
            store_clock::warn_date_refused(client, key, None);
        }
        match step {
            Step::Read { if_none_match } => {
                let read = client
                    .read_record(key, if_none_match.as_ref(), &timing)
                    .await;
                if let Err(e) = &read {
                    debug!(lease = %url, "read failed: {e}");
                    failed_read = Some(e.to_string());
                }
                // Seen before the lease's rules could take it for a corrupt lease record.
                if let Ok(get) = &read {
                    match classify_get(get) {
                        Some(Classified::Queue(_) | Classified::Corrupt(_)) => {
                            client.saw_epoch(key, acquirer.known_epoch());
                            return Ok(Acquired::QueuedLock(get.clone()));
                        }
                        Some(Classified::Newer(what))
                            if !crate::protocol::mutants::on(
                                crate::protocol::mutants::Mutant::QueueNewerTakenAsCorrupt,
                            ) =>
                        {
                            client.saw_epoch(key, acquirer.known_epoch());
                            return Err(newer_error(&url, &what));
                        }
                        _ => {}
                    }
                }
                event = Event::Read(read);
            }
            Step::Put { bytes, cond } => {
                event = Event::Put(client.put_raw(key, bytes, cond, &timing).await);
            }
            Step::Probe { pids } => event = Event::Probed(crate::process::probe(&pids)),
            Step::Stamp => {
                event = Event::Stamped(store_clock::stamp_step(client, key, &timing).await)
            }
            Step::Sleep {
                until,
                wake_on_release,
            } => {
                tokio::select! {
                    _ = clock.sleep_until(until) => event = Event::Slept,
                    _ = &mut notified, if wake_on_release => event = Event::Slept,
                    _ = cancel.cancelled() => event = Event::Cancelled,
                }
            }
            Step::Acquired {
                record,
                version,
                t_send,
            } => {
                debug!(lease = %url, epoch = record.epoch, "acquired");
                break Ok(Acquired::Lease {
                    handover: acquirer.handover(clock.now()),
                    lease: Lease::start(
                        client.clone(),
                        key.to_string(),
                        url.clone(),
                        record,
                        version,
                        t_send,
                        timing,
                    ),
                });
            }
            Step::Failed(e) => break Err(e),
        }
    };
    client.saw_epoch(key, acquirer.known_epoch());
    result
}
