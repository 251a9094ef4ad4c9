//! Waking a file store's waiters by the kernel: an inotify watch on the directory of a key,
//! filtered to the key's file name. Every change of an object lands as a `link(2)` (create),
//! a `rename(2)` over it (replace) or an `unlink(2)` (delete), so `IN_CREATE`, `IN_MOVED_TO`
//! and `IN_DELETE` on its name are every change there is.

use std::ffi::OsString;
use std::path::Path;

use async_trait::async_trait;
use futures::StreamExt;
use inotify::{EventStream, Inotify, WatchMask};
use tracing::debug;

use crate::store::Watch;

pub(super) struct FileWatch {
    /// Taken only when the watch is dropped.
    events: Option<EventStream<Vec<u8>>>,
    name: OsString,
    /// The thread that closed the inotify instance (tests only).
    #[cfg(test)]
    pub(super) closed_on: std::sync::Arc<std::sync::OnceLock<std::thread::ThreadId>>,
}

impl FileWatch {
    /// A watch on `path`'s name in its directory; `None` when the kernel refuses (no inotify,
    /// the per-user watch limit reached): waiters then poll, as on every other store.
    pub(super) fn new(path: &Path) -> Option<FileWatch> {
        let dir = path.parent()?;
        let name = path.file_name()?.to_os_string();
        let made = (|| {
            // The directory may not exist yet (no record yet): watch the nearest one that does
            // not help — a create makes it. Waiters poll until the record exists.
            let inotify = Inotify::init()?;
            inotify.watches().add(
                dir,
                WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::DELETE,
            )?;
            inotify.into_event_stream(vec![0u8; 4096])
        })();
        match made {
            Ok(events) => Some(FileWatch {
                events: Some(events),
                name,
                #[cfg(test)]
                closed_on: Default::default(),
            }),
            Err(e) => {
                debug!(dir = %dir.display(), "no inotify watch, polling instead: {e}");
                None
            }
        }
    }
}

#[async_trait]
impl Watch for FileWatch {
    async fn changed(&mut self) {
        let Some(events) = self.events.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            match events.next().await {
                Some(Ok(event)) if event.name.as_deref() == Some(self.name.as_os_str()) => return,
                Some(Ok(_)) => {}
                // The stream failed or ended: do not spin, let the poll do the work.
                Some(Err(_)) | None => std::future::pending::<()>().await,
            }
        }
    }
}

impl Drop for FileWatch {
    /// Close the inotify instance without holding up the caller. `close(2)` of an instance
    /// that had a watch waits until the kernel has freed its marks (`fsnotify_destroy_group`
    /// flushes the mark reaper, which waits for an SRCU grace period): 0.2 to 16 ms measured
    /// here, most of a file-store hand-over (docs/benchmarks.md, issue 23). A waiter drops its
    /// watch the moment it sees its grant, so closing in place delayed every acquire that waited
    /// by that much, on a runtime worker. Nothing depends on the close being done: the watch
    /// only ever woke the one waiter that owned it.
    fn drop(&mut self) {
        let Some(events) = self.events.take() else {
            return;
        };
        #[cfg(test)]
        let closed_on = self.closed_on.clone();
        let close = move || {
            drop(events);
            #[cfg(test)]
            let _ = closed_on.set(std::thread::current().id());
        };
        run_elsewhere(close);
    }
}

/// Run `close` on the runtime's blocking pool, or here outside a runtime.
fn run_elsewhere(close: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(close)),
        Err(_) => close(),
    }
}
