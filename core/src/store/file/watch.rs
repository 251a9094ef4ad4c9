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
    events: EventStream<Vec<u8>>,
    name: OsString,
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
            Ok(events) => Some(FileWatch { events, name }),
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
        loop {
            match self.events.next().await {
                Some(Ok(event)) if event.name.as_deref() == Some(self.name.as_os_str()) => return,
                Some(Ok(_)) => {}
                // The stream failed or ended: do not spin, let the poll do the work.
                Some(Err(_)) | None => std::future::pending::<()>().await,
            }
        }
    }
}
