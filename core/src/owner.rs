//! Who in this process holds which lease, so that an acquisition that would wait for a lease its
//! own owner (a thread, a task) already holds fails at once with `Held` instead of waiting for
//! itself (issue 28). Leases are not re-entrant: like madelson's DistributedLock ("reentrance
//! requires some notion of what context owns the lock", and threads stop being one with async
//! code), unlike Redisson and Curator (re-entrant per thread) or py-filelock (per lock object).
//! Other owners of this process wait as usual: threads of one process may share a lock.

use crate::error::{Error, ErrorKind};
use crate::lease::{Lease, WeakLease};
use crate::options::{this_thread, LeaseOptions};
use crate::per_process::PerProcess;
use crate::record::{Parsed, Record, RecordState};
use crate::scope::{Mode, Scope};
use crate::store::Get;

/// A lease or a grant some owner of this process acquired.
struct Held {
    owner: String,
    lease: WeakLease,
    /// A plain lease (held whole), or a queued lock's grant: its mode and scope.
    grant: Option<(Mode, Scope)>,
}

/// What each owner holds, by client and key. By client, not by store: a process has one client
/// per store (`Client::for_store`), while tests that play several machines in one process give
/// each its own. (A client's address is not reused while a lease of it lives: leases hold it.)
static HELD: PerProcess<(usize, String), Vec<Held>> = PerProcess::new();

/// Who asks (see [`LeaseOptions::owner`]): the owner given, else the current tokio task, else
/// (a future driven by `block_on`, as `#[tokio::main]` drives `main`) the current thread; `None`
/// for nobody in particular.
pub(crate) fn owner_of(opts: &LeaseOptions) -> Option<String> {
    match &opts.owner {
        Some(owner) if owner.is_empty() => None,
        Some(owner) => Some(owner.clone()),
        None => Some(match tokio::task::try_id() {
            Some(id) => format!("tokio task {id}"),
            None => this_thread(),
        }),
    }
}

/// The leases and grants at `key` that `owner` holds (believes it holds) in this process and
/// that the request `opts` would wait for.
pub(crate) fn holding(client: usize, key: &str, owner: &str, opts: &LeaseOptions) -> Vec<Lease> {
    HELD.with(|held| {
        let Some(entries) = held.get_mut(&(client, key.to_string())) else {
            return vec![];
        };
        entries.retain(|h| h.lease.upgrade().is_some_and(|l| l.is_held()));
        entries
            .iter()
            .filter(|h| h.owner == owner && waits_for(h, opts))
            .filter_map(|h| h.lease.upgrade())
            .collect()
    })
}

/// Whether the record `get` read at `lease`'s key is still `lease`'s own, held: then waiting
/// for it would wait for its own holder. A holder that has not yet noticed that its lease was
/// broken or taken over (a zombie) is waited out as any other, since it can no longer renew.
pub(crate) fn still_held_by(lease: &Lease, get: &Get) -> bool {
    match get {
        Get::Found(o) => matches!(
            Record::parse(o.bytes.as_deref(), o.size),
            Parsed::Valid(r) if r.state == RecordState::Held
                && r.epoch == lease.epoch()
                && r.holder.id == lease.holder().id
        ),
        _ => false,
    }
}

/// The error of an acquisition that would wait for `lease`, which its own `owner` holds.
pub(crate) fn waits_for_itself(url: &str, owner: &str, lease: &Lease) -> Error {
    Error::new(
        ErrorKind::Held,
        format!(
            "{url} is held by this {owner} already (epoch {}, {}): waiting for it would wait \
             for itself. Use the lease this {owner} holds, or release it first; leases are not \
             re-entrant",
            lease.epoch(),
            lease.holder().describe()
        ),
    )
    .with_lease(url)
    .with_epoch(lease.epoch())
    .with_holder(lease.holder().clone())
}

/// Remember that `owner` holds `lease`, acquired at `key`.
pub(crate) fn register(client: usize, key: &str, owner: String, lease: &Lease) {
    let grant = lease.grant().map(|g| (g.mode, g.scope.clone()));
    HELD.with(|held| {
        let entries = held.entry((client, key.to_string())).or_default();
        entries.retain(|h| h.lease.upgrade().is_some_and(|l| l.is_held()));
        entries.push(Held {
            owner,
            lease: lease.downgrade(),
            grant,
        });
    });
}

/// Whether the request `opts` would wait for `held`: always for a plain lease; for a grant,
/// unless both are shared or their scopes do not overlap.
fn waits_for(held: &Held, opts: &LeaseOptions) -> bool {
    match &held.grant {
        None => true,
        Some((mode, scope)) => {
            !(*mode == Mode::Shared && opts.mode == Mode::Shared) && scope.overlaps(&opts.scope)
        }
    }
}
