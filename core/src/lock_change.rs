//! Changing a queued lock's record — a leave, the removal of a participant proven gone, a
//! change of permits: the driver of [`protocol::queue::change`](crate::protocol::queue::change).
//! It only carries out steps, then wakes, in this process, whoever the write granted.
//!
//! Wake-ups: a write that grants participants wakes each of them at once when they wait in this
//! process ([`grant_wake`], by participant), instead of at their next poll; everyone else in this
//! process that watches the key is woken too ([`local_wake`]).

use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;
use tracing::debug;

use crate::error::Result;
use crate::io::local_wake;
use crate::io::Io;
use crate::options::Timing;
use crate::protocol::queue::change::{ChangeEvent, ChangeOp, ChangeStep, Changed};
use crate::protocol::queue::{Change, Entry, QueueRecord, MAX_QUEUE_RECORD_LEN};
use crate::store::Version;
use crate::wake_hint;

/// The wake-up of participant `id` of the lock at `key`, in this process. Sharded: a wake-up
/// meant for another costs a 304.
pub(crate) fn grant_wake(store_url: &str, key: &str, id: &str) -> &'static Notify {
    static SLOTS: OnceLock<Vec<Notify>> = OnceLock::new();
    let slots = SLOTS.get_or_init(|| (0..256).map(|_| Notify::new()).collect());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (store_url, key, id).hash(&mut h);
    &slots[(h.finish() % 256) as usize]
}

/// Wake the participants a landed write granted (`granted`: [`QueueRecord::newly_granted`]):
/// at once where they wait in this process, else by a wake hint to the address in their entry
/// (docs/protocol.md §10, "Wake hints"); and the key's other watchers in this process.
pub(crate) fn wake_granted<'a>(
    client: &Arc<Io>,
    key: &str,
    granted: impl IntoIterator<Item = &'a Entry>,
) {
    let url = client.store().url();
    for g in granted {
        grant_wake(url, key, g.id()).notify_waiters();
        if let Some(wake) = g.wake_hint() {
            wake_hint::send(key, g.id(), wake);
        }
    }
    local_wake(url, key).notify_waiters();
}

/// Apply `change` to the lock's record at `key` until it is there, trying for `timing`'s
/// unavailable timeout while the store does not answer. `known`: the record and its version,
/// when known without reading.
pub(crate) async fn run(
    client: &Arc<Io>,
    key: &str,
    change: Change,
    known: Option<(QueueRecord, Version)>,
    timing: &Timing,
) -> Result<Changed> {
    let clock = client.clock();
    let url = client.lease_url(key);
    let give_up_at = clock.now() + timing.unavailable_timeout;
    let mut op = ChangeOp::new(&url, change, MAX_QUEUE_RECORD_LEN, give_up_at, timing);
    if let Some((r, v)) = known {
        op = op.knowing(r, v);
    }
    let mut event = ChangeEvent::Start;
    loop {
        match op.step(event, clock.now(), clock.wall(), &client.rng) {
            ChangeStep::Read => {
                event = ChangeEvent::Read(client.read_record(key, None, timing).await);
            }
            ChangeStep::Write { bytes, cond } => {
                event = ChangeEvent::Wrote(client.put_raw(key, bytes, cond, timing).await);
            }
            ChangeStep::Sleep(d) => {
                debug!(lease = %url, "changing the queue: the store did not answer; again");
                clock.sleep(d).await;
                event = ChangeEvent::Slept;
            }
            ChangeStep::Done(outcome) => {
                if let Ok(Changed::Applied {
                    record,
                    before: Some(before),
                    ..
                }) = &outcome
                {
                    wake_granted(client, key, record.newly_granted(Some(before)));
                }
                return outcome;
            }
        }
    }
}
