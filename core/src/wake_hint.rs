//! Wake hints over UDP (docs/protocol.md §10, "Wake hints"): a write that grants waiters sends
//! each of them one datagram once it landed, so that they read the record now rather than at
//! their next poll.
//!
//! A hint carries no authority: it names a lock (by a hash of its key) and a waiter (by its
//! id), and the waiter that gets it only reads the record, which stays the only truth. So the
//! receiver trusts nothing in it: oversized datagrams, garbage, unknown ids and mismatched keys
//! are dropped, and the waiter's machine rate-limits the reads hints cause
//! ([`hint_interval`](crate::protocol::queue::waiter::hint_interval)).
//!
//! One receiving socket per interface per process, shared by all its waiters, demultiplexed by
//! waiter id on one thread (which blocks in `recv_from` and never touches a runtime, so waiters
//! on any runtime are woken the same way); sends go out through one non-blocking socket per
//! address family and never wait or fail a write.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, OnceLock};

use crate::per_process::PerProcess;

use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::options::WakeHints;

/// The largest hint: `LH1 `, 16 hex digits, a space and a waiter id of at most 107 bytes.
pub(crate) const MAX_HINT_LEN: usize = 128;

/// A holder woken by hints confirms the lock's record at most this often (a plain lease's grant;
/// a shared session's hint task looks at the grants named at most this often): a flood of
/// forged hints costs at most 20 conditional reads a second per grant (as a waiter's,
/// docs/protocol.md §10).
pub(crate) const HINTED_CONFIRM_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// A hint's first bytes: its kind and version.
const MAGIC: &str = "LH1 ";

/// The 64-bit FNV-1a of a lock's key: names the lock in a hint in a few bytes, the same in every
/// process and version (no per-process hashing seed).
pub(crate) fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The datagram that tells waiter `id` of the lock at `key` to read now (`None`: the id is too
/// long for one hint; this version's ids are 32 hex digits).
pub(crate) fn message(key: &str, id: &str) -> Option<Vec<u8>> {
    let m = format!("{MAGIC}{:016x} {id}", key_hash(key));
    (m.len() <= MAX_HINT_LEN).then(|| m.into_bytes())
}

/// What a datagram names: the key's hash and the waiter's id; `None` for anything else.
pub(crate) fn parse(datagram: &[u8]) -> Option<(u64, &str)> {
    if datagram.len() > MAX_HINT_LEN {
        return None;
    }
    let text = std::str::from_utf8(datagram).ok()?.strip_prefix(MAGIC)?;
    let (hash, id) = text.split_once(' ')?;
    if hash.len() != 16 || id.is_empty() || id.contains(char::is_whitespace) {
        return None;
    }
    Some((u64::from_str_radix(hash, 16).ok()?, id))
}

/// The address in a wake field (`udp:IP:PORT`); `None` for anything else.
pub(crate) fn parse_address(wake: &str) -> Option<SocketAddr> {
    wake.strip_prefix("udp:")?.parse().ok()
}

/// A waiter's registration with its process's listener: woken (a stored permit, so a hint that
/// comes while it is not sleeping is not lost) when a hint names it. Dropping it unregisters.
pub(crate) struct Registration {
    listener: Arc<Listener>,
    id: String,
    pub(crate) notify: Arc<Notify>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id)
            .finish()
    }
}

impl Registration {
    /// From now on, a hint naming it adds `n` to `set` (and wakes the set's one task) instead
    /// of waking its own `notify`: a grant of a shared session, whose confirmations one task
    /// of its session makes (`shared_session.rs`), keeps its registration from its wait this
    /// way — no task per grant.
    pub(crate) fn into_set(self, set: &Arc<HintSet>, n: u64) -> Registration {
        let mut waiters = self.listener.waiters.lock().expect("hint registry");
        if let Some(w) = waiters.get_mut(&self.id) {
            if Arc::ptr_eq(&w.notify, &self.notify) {
                w.set = Some((set.clone(), n));
            }
        }
        drop(waiters);
        self
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiters = self.listener.waiters.lock().expect("hint registry");
        if waiters
            .get(&self.id)
            .is_some_and(|w| Arc::ptr_eq(&w.notify, &self.notify))
        {
            waiters.remove(&self.id);
        }
    }
}

/// The grants of one shared session that hints named since its task last looked, and the one
/// `Notify` that task waits on.
#[derive(Default)]
pub(crate) struct HintSet {
    pub(crate) notify: Notify,
    named: Mutex<BTreeSet<u64>>,
}

impl HintSet {
    /// Up to `most` of the numbers named (the lowest first); the rest stay for the next look.
    pub(crate) fn take(&self, most: usize) -> Vec<u64> {
        let mut named = self.named.lock().expect("hint set");
        let taken: Vec<u64> = named.iter().take(most).copied().collect();
        for n in &taken {
            named.remove(n);
        }
        if !named.is_empty() {
            // Some are left: the task looks again (after its pause).
            self.notify.notify_one();
        }
        taken
    }

    fn add(&self, n: u64) {
        self.named.lock().expect("hint set").insert(n);
        self.notify.notify_one();
    }
}

/// Whom a registered id's hints wake.
struct Registered {
    /// Its lock's key hash.
    hash: u64,
    /// The registration's own (also its identity in the registry).
    notify: Arc<Notify>,
    /// A shared session's grant: its set and number, woken instead ([`Registration::into_set`]).
    set: Option<(Arc<HintSet>, u64)>,
}

/// One interface's receiving socket and the waiters it serves.
pub(crate) struct Listener {
    address: SocketAddr,
    waiters: Mutex<HashMap<String, Registered>>,
    /// The locks (by key hash) whose last grant learned by a waiter of this listener was
    /// brought by a hint (`protocol::queue::waiter::hints_seen_after`): their waiters poll at
    /// the renew interval. 8 bytes a lock; forgotten when a poll finds a grant first.
    hints_seen: Mutex<HashSet<u64>>,
}

impl Listener {
    /// What a waiter writes in its entry's wake field.
    pub(crate) fn wake_field(&self) -> String {
        format!("udp:{}", self.address)
    }

    /// Whether hints have been seen to arrive here for the lock at `key`.
    pub(crate) fn hints_seen(&self, key: &str) -> bool {
        self.hints_seen
            .lock()
            .expect("hints seen")
            .contains(&key_hash(key))
    }

    /// Remember whether hints arrive here for the lock at `key`.
    pub(crate) fn set_hints_seen(&self, key: &str, seen: bool) {
        let mut all = self.hints_seen.lock().expect("hints seen");
        match seen {
            true => all.insert(key_hash(key)),
            false => all.remove(&key_hash(key)),
        };
    }

    /// Register waiter `id` of the lock at `key`.
    pub(crate) fn register(self: &Arc<Self>, key: &str, id: &str) -> Registration {
        let notify = Arc::new(Notify::new());
        self.waiters.lock().expect("hint registry").insert(
            id.to_string(),
            Registered {
                hash: key_hash(key),
                notify: notify.clone(),
                set: None,
            },
        );
        Registration {
            listener: self.clone(),
            id: id.to_string(),
            notify,
        }
    }

    /// Wake the waiter a datagram names, if it is ours and for that key.
    fn deliver(&self, datagram: &[u8]) -> bool {
        let Some((hash, id)) = parse(datagram) else {
            return false;
        };
        self.wake(hash, id)
    }

    /// Wake waiter `id` if it is registered here for the key whose hash is `hash`.
    fn wake(&self, hash: u64, id: &str) -> bool {
        let waiters = self.waiters.lock().expect("hint registry");
        match waiters.get(id) {
            Some(w) if w.hash == hash => {
                match &w.set {
                    Some((set, n)) => set.add(*n),
                    None => w.notify.notify_one(),
                }
                true
            }
            _ => false,
        }
    }

    fn serves(&self, id: &str) -> bool {
        self.waiters.lock().expect("hint registry").contains_key(id)
    }
}

/// This process's listeners by interface. Per process: a forked child gets its own (the
/// parent's socket and thread are the parent's: a child that advertised them would only ever
/// be woken by its poll).
static LISTENERS: PerProcess<IpAddr, Arc<Listener>> = PerProcess::new();

/// This process's listener for `choice`, bound (and its thread started) on first use; `None`
/// when hints are off, or the socket could not be bound (said once in the log: the waiter then
/// polls, as without hints).
pub(crate) fn listener(choice: &WakeHints) -> Option<Arc<Listener>> {
    let ip = match choice {
        WakeHints::Off => return None,
        WakeHints::Loopback => IpAddr::V4(Ipv4Addr::LOCALHOST),
        WakeHints::Listen(ip) => *ip,
        WakeHints::Route => route_address().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    };
    LISTENERS.with(|all| bind(all, ip))
}

/// The address this host's default route leaves from: the source address the kernel picks
/// for a UDP socket connected to an address of no local network (198.51.100.1, TEST-NET-2,
/// RFC 5737). Connecting a UDP socket sends nothing; it only chooses a route. `None` without
/// a route, or when the kernel picks no address.
pub(crate) fn route_address() -> Option<IpAddr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((Ipv4Addr::new(198, 51, 100, 1), 9)).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// Bind `ip`'s listener and start its thread, unless `all` has it.
fn bind(all: &mut HashMap<IpAddr, Arc<Listener>>, ip: IpAddr) -> Option<Arc<Listener>> {
    if let Some(l) = all.get(&ip) {
        return Some(l.clone());
    }
    let bound = UdpSocket::bind(SocketAddr::new(ip, 0)).and_then(|s| {
        let address = s.local_addr()?;
        Ok((s, address))
    });
    let (socket, address) = match bound {
        Ok(b) => b,
        Err(e) => {
            warn!("wake hints: cannot listen on {ip} ({e}); waiters poll instead");
            return None;
        }
    };
    let l = Arc::new(Listener {
        address,
        waiters: Mutex::new(HashMap::new()),
        hints_seen: Mutex::new(HashSet::new()),
    });
    let serving = l.clone();
    let spawned = std::thread::Builder::new()
        .name("lease-wake-hints".into())
        .spawn(move || {
            // One byte more than a hint can be: a longer datagram is seen as such and dropped.
            let mut buf = [0u8; MAX_HINT_LEN + 1];
            loop {
                match socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        if !serving.deliver(&buf[..n]) {
                            debug!("wake hints: ignored a datagram of {n} bytes from {from}");
                        }
                    }
                    // (Transient: ICMP errors surface here on some systems.)
                    Err(e) => debug!("wake hints: receive failed: {e}"),
                }
            }
        });
    if let Err(e) = spawned {
        warn!("wake hints: cannot start the listener thread ({e}); waiters poll instead");
        return None;
    }
    debug!("wake hints: listening on {address}");
    all.insert(ip, l.clone());
    Some(l)
}

/// Send waiter `id` of the lock at `key` a hint at `wake` (its entry's field), once a write
/// that granted it landed. Fire-and-forget: never blocks, never fails. A waiter of this
/// process is not sent one (the write's driver wakes it directly).
pub(crate) fn send(key: &str, id: &str, wake: &str) {
    let Some(to) = parse_address(wake) else {
        return;
    };
    let local = LISTENERS.with(|all| all.values().any(|l| l.serves(id)));
    if local {
        return;
    }
    let Some(datagram) = message(key, id) else {
        return;
    };
    let Some(socket) = sender(to.is_ipv4()) else {
        return;
    };
    match socket.send_to(&datagram, to) {
        Ok(_) => debug!("wake hints: sent one to {to}"),
        Err(e) => debug!("wake hints: could not send to {to}: {e}"),
    }
}

/// Tell participant `id` of the lock at `key` to read the record now, wherever it is: in this
/// process, through its listener's registry (no datagram); elsewhere, by [`send`]. For a yield
/// request, which no write's driver wakes a local holder for: without this, a request asked in
/// the holder's own process reached it only at its next renewal.
pub(crate) fn tell(key: &str, id: &str, wake: &str) {
    let hash = key_hash(key);
    if !LISTENERS.with(|all| all.values().any(|l| l.wake(hash, id))) {
        send(key, id, wake);
    }
}

/// The process's non-blocking sending socket for one address family.
fn sender(v4: bool) -> Option<&'static UdpSocket> {
    static V4: OnceLock<Option<UdpSocket>> = OnceLock::new();
    static V6: OnceLock<Option<UdpSocket>> = OnceLock::new();
    let (cell, any) = if v4 {
        (&V4, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    } else {
        (&V6, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
    };
    cell.get_or_init(|| {
        let s = UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    })
    .as_ref()
}

#[cfg(test)]
mod tests;
