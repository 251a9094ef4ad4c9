//! Waking a file store's waiters by the kernel: an inotify watch on the directory of a key,
//! filtered to the key's file name. Every change of an object lands as a `link(2)` (create),
//! a `rename(2)` over it (replace) or an `unlink(2)` (delete), so `IN_CREATE`, `IN_MOVED_TO`
//! and `IN_DELETE` on its name are every change there is.
//!
//! **(changed, issue 23)** One inotify instance per process holds every waiter's watch, read by
//! one thread that wakes the waiters whose directory and name an event names. Before, each
//! waiter opened an instance of its own, and the kernel lets a user open only
//! `max_user_instances` of them (128 by default): every waiter past that polled instead,
//! without a word. A process's watches are bounded by `max_user_watches` (8,192 or more) and
//! a directory watched by many waiters takes one. Past that limit a waiter polls, and the
//! first time it happens the process says so (a warning).
//!
//! Why a thread and not the runtime's reactor: the instance outlives any one runtime (tests
//! and bindings start and stop runtimes; a stream registered with a stopped runtime's reactor
//! would go deaf for every later waiter), and one blocking read for the whole process is one
//! thread whatever the number of waiters. A forked child starts an instance of its own
//! (`PerProcess`): the parent's thread does not exist in it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::error::{Error, ErrorKind};
use crate::per_process::PerProcess;
use crate::store::Watch;

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE);

/// The process's inotify instance: its watches, and who each one wakes.
struct Hub {
    state: Mutex<Watched>,
    next_id: AtomicU64,
}

struct Watched {
    /// Adds and removes watches on the instance the reading thread reads.
    watches: Watches,
    /// The waiters of each watched directory (one kernel watch per directory).
    dirs: HashMap<WatchDescriptor, Vec<Waiter>>,
}

struct Waiter {
    id: u64,
    name: OsString,
    wake: Arc<Notify>,
}

static HUB: PerProcess<(), Arc<Hub>> = PerProcess::new();

impl Hub {
    /// This process's hub, started on first use.
    fn get() -> Option<Arc<Hub>> {
        match HUB.get_or_open(&(), Hub::start) {
            Ok(hub) => Some(hub),
            Err(e) => {
                debug!("no inotify, polling instead: {e}");
                None
            }
        }
    }

    fn start() -> crate::error::Result<Arc<Hub>> {
        let io = |e: std::io::Error| Error::new(ErrorKind::Unavailable, format!("inotify: {e}"));
        let inotify = Inotify::init().map_err(io)?;
        let hub = Arc::new(Hub {
            state: Mutex::new(Watched {
                watches: inotify.watches(),
                dirs: HashMap::new(),
            }),
            next_id: AtomicU64::new(0),
        });
        let reader = hub.clone();
        std::thread::Builder::new()
            .name("lease-inotify".into())
            .spawn(move || reader.read(inotify))
            .map_err(io)?;
        Ok(hub)
    }

    fn lock(&self) -> MutexGuard<'_, Watched> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reading thread: wake the waiters each event names, for the life of the process.
    fn read(&self, mut inotify: Inotify) {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let events = match inotify.read_events_blocking(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Nothing wakes the waiters any more: they poll, as on every other store.
                    warn!("file store: reading inotify events failed, waiters poll: {e}");
                    return;
                }
            };
            let watched = self.lock();
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    // Events were lost: wake everyone (a wake costs a read, never more).
                    watched
                        .dirs
                        .values()
                        .flatten()
                        .for_each(|w| w.wake.notify_one());
                    continue;
                }
                let (Some(waiters), Some(name)) = (watched.dirs.get(&event.wd), event.name) else {
                    continue;
                };
                waiters
                    .iter()
                    .filter(|w| w.name == name)
                    .for_each(|w| w.wake.notify_one());
            }
        }
    }
}

pub(super) struct FileWatch {
    hub: Arc<Hub>,
    wd: WatchDescriptor,
    id: u64,
    wake: Arc<Notify>,
}

impl FileWatch {
    /// A watch on `path`'s name in its directory; `None` when the kernel refuses (no inotify,
    /// the watch limit reached, no directory yet): waiters then poll, as on every other store.
    pub(super) fn new(path: &Path) -> Option<FileWatch> {
        let dir = path.parent()?;
        let name = path.file_name()?.to_os_string();
        let hub = Hub::get()?;
        let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        let wd = {
            let mut watched = hub.lock();
            // Watching a directory already watched returns its descriptor (same mask).
            match watched.watches.add(dir, MASK) {
                Ok(wd) => {
                    watched.dirs.entry(wd.clone()).or_default().push(Waiter {
                        id,
                        name,
                        wake: wake.clone(),
                    });
                    wd
                }
                Err(e) => {
                    refused(dir, e);
                    return None;
                }
            }
        };
        Some(FileWatch { hub, wd, id, wake })
    }
}

/// The kernel refused a watch: the waiter polls. A missing directory is ordinary (no record
/// yet); a limit reached is said once per process, since every later waiter polls too.
fn refused(dir: &Path, e: std::io::Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if e.raw_os_error() == Some(libc::ENOSPC) && !SAID.swap(true, Ordering::Relaxed) {
        warn!(
            dir = %dir.display(),
            "file store: the inotify watch limit (fs.inotify.max_user_watches) is reached; \
             waiters poll from now on: raise the limit to wake them at once"
        );
    } else {
        debug!(dir = %dir.display(), "no inotify watch, polling instead: {e}");
    }
}

#[async_trait]
impl Watch for FileWatch {
    async fn changed(&mut self) {
        // A wake that came while nobody waited is kept (one permit): nothing is missed.
        self.wake.notified().await
    }
}

impl Drop for FileWatch {
    /// The directory's watch goes with its last waiter. `inotify_rm_watch(2)` only detaches
    /// the mark and leaves its freeing to the kernel's reaper; it is closing an instance that
    /// waits for the reaper (an SRCU grace period, up to 16 ms measured, issue 23), and the
    /// instance is never closed now. Done under the lock, so a waiter arriving for the same
    /// directory never gets a descriptor that is being removed.
    fn drop(&mut self) {
        let mut watched = self.hub.lock();
        let Some(waiters) = watched.dirs.get_mut(&self.wd) else {
            return;
        };
        waiters.retain(|w| w.id != self.id);
        if waiters.is_empty() {
            watched.dirs.remove(&self.wd);
            // Fails only when the kernel already removed it (the directory is gone).
            let _ = watched.watches.remove(self.wd.clone());
        }
    }
}
