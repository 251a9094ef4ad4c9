//! `file://` — the embedded local store, safe across processes on one machine.
//!
//! - An object is a file that is never changed in place: every write goes to a fully written,
//!   fsynced temporary file in the same directory, which then replaces the object atomically.
//!   A crash at any point leaves the old or the new object, never a torn one.
//! - `Create` is `link(2)` of the temporary file to the object's name: it fails with `EEXIST`
//!   when the object exists, atomically, without any lock.
//! - `Match` and `delete` run under an exclusive `flock` on a sidecar lock file
//!   (`.NAME.lock`): read the current version, compare, `rename(2)` over (or unlink), fsync the
//!   directory. The lock is taken with non-blocking attempts between async sleeps, for at most
//!   [`DEFAULT_LOCK_WAIT`]: a process stopped inside the lock costs each waiting call neither a
//!   thread nor more than that wait, and the call fails `Unavailable`, naming the lock file and
//!   its holder. The holder removes the lock file when done, and a lock counts only if its file
//!   is still the one under its name (`sidecar`): no lock file piles up.
//! - A delete removes the folders it leaves empty, up to the store's directory; a writer whose
//!   folder was removed between making it and creating its file in it makes it again.
//! - Temporary files are `.NAME.HEX.tmp`, locked (`flock`) by their writer from creation until
//!   they are renamed or removed. Those of writers killed mid-write are removed by a later
//!   writer: the first write to a directory by a `FileStore`, and then at most every
//!   [`SWEEP_INTERVAL`], removes the temporary files there that are older than
//!   [`STALE_TEMP_AGE`] and that it can lock.
//! - The version is a hash of the contents and metadata. Every lease record differs from the
//!   previous one (its `rev` grows), so equal hashes mean equal records: no ABA.
//! - Metadata (used by fenced writes) is an extended attribute (`user.lease.meta`) set on the
//!   temporary file before it is linked or renamed, so it changes atomically with the contents.
//! - The store's clock. Each write is stamped with this machine's boot id, time since boot and
//!   Linux time namespace (`user.lease.stamp`, set with the metadata). A reader in the same boot
//!   and time namespace reports `last_modified` and `server_now` on that boot clock: immune to
//!   wall-clock steps (NTP, a resumed VM) and counting suspend, like the holder's own deadline.
//!   A file written in another boot or another time namespace (whose `CLOCK_BOOTTIME` is
//!   shifted), by another machine over a network file system, on a file system without
//!   extended attributes, or stamped before stamps named their namespace, falls back to its
//!   mtime and this machine's wall clock, which no time namespace shifts.
//!
//! Names starting with `.` are reserved for the sidecar files.

mod attrs;
mod sidecar;
pub use sidecar::negative_control;
#[cfg(test)]
mod tests;
mod watch;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Put,
    Store, Version,
};
use crate::clock::{Clock, Instant, Rng, SystemClock};
use crate::error::{Error, ErrorKind, Result};

use attrs::{read_meta, read_stamp, version_of, write_meta, write_stamp, Stamp};
use sidecar::{is_temp_name, sidecar, SidecarLock};

/// Longest path segment accepted, leaving room for the sidecar prefix and suffix within the
/// 255-byte limit of common file systems.
const MAX_SEGMENT: usize = 200;

/// How long a conditional write or delete waits for the sidecar lock of its object before it
/// fails `Unavailable`. A write holds the lock for a read, a write and two fsyncs (milliseconds),
/// so a longer wait means its holder is stopped or stuck. Shorter than the default request
/// timeout (5 s at the default ttl), so the caller sees this clear error rather than a timeout;
/// where the caller's timeout is shorter it ends the wait first (also `Unavailable`).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(1);
/// The longest pause between two attempts to take a busy sidecar lock.
const MAX_LOCK_POLL: Duration = Duration::from_millis(20);
/// After this long waiting for a sidecar lock, log who holds it (once per call).
const LOCK_WARN_AFTER: Duration = Duration::from_millis(250);
/// A temporary file this old (by mtime) that no writer holds locked is left by a killed
/// writer. The age only covers the instant between a writer creating its file and locking it.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(60);
/// How often one `FileStore` looks for stale temporary files in a directory it writes to.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(600);

/// The file store, rooted at a directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
    lock_wait: Duration,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    url: String,
    clock: Arc<dyn Clock>,
    rng: Rng,
    /// When this store last looked for stale temporary files in each directory.
    swept: Mutex<HashMap<PathBuf, Instant>>,
}

/// The directory used for bare lease names: `$LEASE_HOME`, else `$XDG_STATE_HOME/lease`,
/// else `~/.local/state/lease`.
pub fn default_root() -> Result<PathBuf> {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = non_empty("LEASE_HOME") {
        return Ok(home);
    }
    if let Some(state) = non_empty("XDG_STATE_HOME") {
        return Ok(state.join("lease"));
    }
    if let Some(home) = non_empty("HOME") {
        return Ok(home.join(".local/state/lease"));
    }
    Err(Error::invalid(
        "cannot find the default lease directory: set LEASE_HOME (or XDG_STATE_HOME or HOME)",
    ))
}

impl FileStore {
    /// A store rooted at `root`: an accessible directory, or a path where one can be made. A
    /// missing directory is created by the first write (a lease's directory, like those of
    /// fenced objects, is created when needed: what users of py-filelock expect), never by a
    /// read.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        FileStore::open_with_clock(root, Arc::new(SystemClock))
    }

    pub fn open_with_clock(root: impl Into<PathBuf>, clock: Arc<dyn Clock>) -> Result<Self> {
        let root = root.into();
        if !root.is_absolute() {
            return Err(Error::invalid(format!(
                "file store directory {} must be an absolute path",
                root.display()
            )));
        }
        match fs::metadata(&root) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::store(format!(
                    "file store path {} is not a directory",
                    root.display()
                )))
            }
            Ok(_) => {
                // Fail early, with a clear message, on a directory we cannot read.
                fs::read_dir(&root)
                    .map_err(|e| io_error(e, "cannot read file store directory", &root))?;
            }
            // Created by the first write (`write_temp`), which says why if it cannot be.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(e, "cannot access file store directory", &root)),
        }
        let url = format!("file://{}", super::file_root_in_url(&root));
        Ok(FileStore {
            inner: Arc::new(Inner {
                root,
                url,
                clock,
                rng: Rng::from_entropy(),
                swept: Mutex::new(HashMap::new()),
            }),
            lock_wait: DEFAULT_LOCK_WAIT,
        })
    }

    /// The same store, waiting at most `wait` for a sidecar lock (default
    /// [`DEFAULT_LOCK_WAIT`]).
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// The store for bare lease names, creating its directory when missing.
    pub fn open_default() -> Result<Self> {
        let root = default_root()?;
        fs::create_dir_all(&root)
            .map_err(|e| io_error(e, "cannot create the default lease directory", &root))?;
        FileStore::open(root)
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The file holding the object at `key`.
    pub fn path_of(&self, key: &str) -> Result<PathBuf> {
        validate_key(key)?;
        let segments: Vec<&str> = key.split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            // Shared sessions live under `.lease-sessions/` (docs/protocol.md §10): a directory
            // name no sidecar takes (sidecars are `.NAME.lock` and `.NAME.HEX.tmp`, files
            // beside an object), so it is allowed as a directory, and only that one.
            let sessions_dir = crate::store::SESSIONS_DIR.trim_end_matches('/');
            if *segment == sessions_dir && i + 1 < segments.len() {
                continue;
            }
            if segment.starts_with('.') {
                return Err(Error::invalid(format!(
                    "invalid lease name {key:?}: the file store reserves names starting with '.'"
                )));
            }
            if segment.len() > MAX_SEGMENT {
                return Err(Error::invalid(format!(
                    "invalid lease name: the file store allows at most {MAX_SEGMENT} bytes between '/'s"
                )));
            }
        }
        Ok(self.inner.root.join(key))
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| Error::internal(format!("file store task failed: {e}")))?
    }

    /// Run `f` under the exclusive sidecar lock of the object at `path`, then remove the lock
    /// file (see `sidecar`: a lock file lives as long as a write that needs it).
    ///
    /// The lock is waited for here, with non-blocking attempts between async sleeps, not in a
    /// blocking thread: a thread blocked in `flock` can be neither cancelled nor bounded, and
    /// a stopped lock holder would pin one per waiting call. `f` runs in a blocking thread that
    /// owns the lock, so a caller that gives up meanwhile cannot leave the lock held.
    async fn locked<T: Send + 'static>(
        &self,
        path: PathBuf,
        f: impl FnOnce(&Inner, &Path) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let lock = self.lock(&path).await?;
        self.blocking(move |inner| {
            let out = f(inner, &path);
            if let Some(lock) = lock {
                lock.remove();
            }
            out
        })
        .await
    }

    /// Take the sidecar lock of the object at `path` (`None`: its directory does not exist),
    /// or fail `Unavailable` after `lock_wait`.
    async fn lock(&self, path: &Path) -> Result<Option<SidecarLock>> {
        let open = || {
            let path = path.to_path_buf();
            self.blocking(move |_| SidecarLock::open(&path))
        };
        let clock = &self.inner.clock;
        let started = clock.now();
        let give_up_at = started + self.lock_wait;
        let mut pause = Duration::from_millis(1);
        let mut warned = false;
        let Some(mut lock) = open().await? else {
            return Ok(None);
        };
        loop {
            if lock.try_lock()? {
                if lock.is_current()? {
                    return Ok(Some(lock));
                }
                // Its last holder removed it: this lock guards nothing. Take the one under
                // the name now.
                match open().await? {
                    Some(again) => lock = again,
                    None => return Ok(None),
                }
                if lock.try_lock()? && lock.is_current()? {
                    return Ok(Some(lock));
                }
            }
            let now = clock.now();
            if now >= give_up_at {
                return Err(Error::unavailable(format!(
                    "the lock file {} is held by {} for more than {}: \
                     nothing was changed",
                    lock.path.display(),
                    lock.holder(),
                    crate::duration::format_duration(self.lock_wait)
                )));
            }
            if !warned && now - started >= LOCK_WARN_AFTER {
                warned = true;
                warn!(
                    "waiting for the lock file {}, held by {}",
                    lock.path.display(),
                    lock.holder()
                );
            }
            clock.sleep(pause.min(give_up_at - now)).await;
            pause = (pause * 2).min(MAX_LOCK_POLL);
        }
    }

    /// Remove stale temporary files from `dir`, if this store has not looked there lately.
    async fn sweep_if_due(&self, dir: PathBuf) {
        let now = self.inner.clock.now();
        {
            let mut swept = self.inner.swept.lock().unwrap_or_else(|e| e.into_inner());
            if swept
                .get(&dir)
                .is_some_and(|at| now.saturating_duration_since(*at) < SWEEP_INTERVAL)
            {
                return;
            }
            swept.insert(dir.clone(), now);
        }
        let _ = self
            .blocking(move |inner| {
                inner.sweep(&dir);
                Ok(())
            })
            .await;
    }
}

pub(super) fn io_error(e: io::Error, what: &str, path: &Path) -> Error {
    let kind = match e.kind() {
        io::ErrorKind::PermissionDenied
        | io::ErrorKind::ReadOnlyFilesystem
        | io::ErrorKind::StorageFull => ErrorKind::Store,
        io::ErrorKind::NotADirectory
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::InvalidFilename => ErrorKind::Invalid,
        io::ErrorKind::NotFound => ErrorKind::Store,
        _ => ErrorKind::Unavailable,
    };
    let hint = match e.kind() {
        io::ErrorKind::PermissionDenied => ": check the permissions of the directory",
        io::ErrorKind::NotADirectory => ": a lease name uses another lease's file as a directory",
        io::ErrorKind::IsADirectory => ": a directory is in the way of the lease file",
        _ => "",
    };
    Error::new(kind, format!("{what} {}{hint}", path.display())).with_source(e)
}

/// What is at a path now.
struct Current {
    bytes: Option<Bytes>,
    size: u64,
    version: Version,
    /// The file's mtime.
    mtime: Option<SystemTime>,
    stamp: Option<Stamp>,
    meta: Meta,
}

impl Inner {
    fn read(&self, path: &Path, max_len: Option<u64>) -> Result<Option<Current>> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(io_error(e, "cannot open", path)),
        };
        let stat = file
            .metadata()
            .map_err(|e| io_error(e, "cannot stat", path))?;
        if stat.is_dir() {
            return Err(Error::invalid(format!(
                "{} is a directory, not a lease",
                path.display()
            )));
        }
        let size = stat.len();
        let mut hash = Sha256::new();
        let keep = max_len.is_none_or(|max| size <= max);
        let mut kept = Vec::with_capacity(if keep { size as usize } else { 0 });
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = file
                .read(&mut chunk)
                .map_err(|e| io_error(e, "cannot read", path))?;
            if n == 0 {
                break;
            }
            hash.update(&chunk[..n]);
            if keep {
                kept.extend_from_slice(&chunk[..n]);
            }
        }
        let meta = read_meta(&file, path)?;
        Ok(Some(Current {
            bytes: keep.then(|| Bytes::from(kept)),
            size,
            version: version_of(hash, &meta),
            mtime: stat.modified().ok(),
            stamp: read_stamp(&file, path)?,
            meta,
        }))
    }

    /// `(last_modified, server_now)` of an object, both on one clock: the boot clock when the
    /// object was stamped in this boot and this time namespace, else mtime and the wall clock
    /// (neither is shifted by time namespaces).
    fn store_times(&self, current: Option<&Current>) -> (Option<SystemTime>, Option<SystemTime>) {
        let boot = self.clock.boot_time();
        if let (Some(c), Some(b)) = (current, &boot) {
            if let Some(stamp) = c.stamp.as_ref().filter(|s| s.same_clock_as(b)) {
                return (
                    Some(SystemTime::UNIX_EPOCH + stamp.since_boot),
                    Some(SystemTime::UNIX_EPOCH + b.since_boot),
                );
            }
        }
        (current.and_then(|c| c.mtime), Some(self.clock.wall()))
    }

    /// Write `bytes` and `meta` to a new, fsynced temporary file next to `path`. The file comes
    /// back open and locked, which tells `sweep` that its writer is alive: keep it until the
    /// temporary name is renamed or removed.
    fn write_temp(&self, path: &Path, bytes: &[u8], meta: &Meta) -> Result<(PathBuf, File)> {
        let dir = path.parent().expect("object paths have a parent");
        let temp = sidecar(path, &format!(".{:016x}.tmp", self.rng.next_u64()));
        // Another process removes a folder it left empty (`prune`), perhaps between our making
        // it and our file landing in it: make it again. Once our file is in it, it is not empty.
        let mut attempts = 0;
        let created = loop {
            attempts += 1;
            match fs::create_dir_all(dir) {
                // Made by another writer and removed in between (`create_dir_all` then fails
                // with `EEXIST`, or `ENOENT` for a parent, on a folder that is gone): again.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::AlreadyExists | io::ErrorKind::NotFound
                    ) && attempts < 100
                        && !dir.exists() =>
                {
                    continue
                }
                made => made,
            }
            .map_err(|e| match e.kind() {
                // Some part of the path is a file: another lease's.
                io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => {
                    Error::invalid(format!(
                        "cannot create directory {}: a lease name uses another lease's file as \
                         a directory",
                        dir.display()
                    ))
                }
                _ => io_error(e, "cannot create directory", dir),
            })?;
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&temp)
            {
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 100 => continue,
                other => break other,
            }
        };
        let result = (|| {
            let mut f = created.map_err(|e| io_error(e, "cannot create temporary file", &temp))?;
            // A fresh, randomly named file: nobody else locks it but a sweeper that found it
            // stale, which cannot happen this young.
            f.try_lock().map_err(|e| {
                Error::unavailable(format!(
                    "cannot lock temporary file {}: {e}",
                    temp.display()
                ))
            })?;
            f.write_all(bytes)
                .map_err(|e| io_error(e, "cannot write", &temp))?;
            write_meta(&f, meta, &temp)?;
            // Read after the writer's t_send, as the protocol requires of a store's stamp.
            write_stamp(&f, self.clock.boot_time(), &temp)?;
            f.sync_all()
                .map_err(|e| io_error(e, "cannot sync", &temp))?;
            Ok(f)
        })();
        match result {
            Ok(f) => Ok((temp, f)),
            Err(e) => {
                let _ = fs::remove_file(&temp);
                Err(e)
            }
        }
    }

    fn written(&self, bytes: &[u8], meta: &Meta) -> Put {
        let mut h = Sha256::new();
        h.update(bytes);
        Put::Written {
            version: version_of(h, meta),
            server_now: Some(self.clock.wall()),
        }
    }

    fn create(&self, path: &Path, bytes: &[u8], meta: &Meta) -> Result<Put> {
        let (temp, locked) = self.write_temp(path, bytes, meta)?;
        let linked = fs::hard_link(&temp, path);
        let _ = fs::remove_file(&temp);
        drop(locked);
        match linked {
            Ok(()) => {
                sync_dir(path.parent().expect("has parent"))?;
                Ok(self.written(bytes, meta))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Put::ConditionFailed),
            Err(e) => Err(io_error(e, "cannot create", path)),
        }
    }

    /// Replace the object at `path` if it is at `expected`; run under its sidecar lock.
    fn replace(&self, path: &Path, expected: &Version, bytes: &[u8], meta: &Meta) -> Result<Put> {
        match self.read(path, Some(0))? {
            Some(current) if &current.version == expected => {}
            _ => return Ok(Put::ConditionFailed),
        }
        let (temp, _locked) = self.write_temp(path, bytes, meta)?;
        if let Err(e) = fs::rename(&temp, path) {
            let _ = fs::remove_file(&temp);
            return Err(io_error(e, "cannot replace", path));
        }
        sync_dir(path.parent().expect("has parent"))?;
        Ok(self.written(bytes, meta))
    }

    /// Delete the object at `path` if it is at `expected`; run under its sidecar lock.
    fn remove(&self, path: &Path, expected: &Version) -> Result<Delete> {
        match self.read(path, Some(0))? {
            Some(current) if &current.version == expected => {}
            _ => return Ok(Delete::ConditionFailed),
        }
        fs::remove_file(path).map_err(|e| io_error(e, "cannot delete", path))?;
        sync_dir(path.parent().expect("has parent"))?;
        Ok(Delete::Deleted)
    }

    /// Remove `dir` and the folders above it that are empty, up to the store's own directory
    /// (kept). A folder is removed only when empty (`rmdir`), so nothing in it is lost; a
    /// writer that made it again meanwhile makes it once more (`write_temp`).
    fn prune(&self, dir: &Path) {
        let mut dir = dir;
        while dir != self.root && dir.starts_with(&self.root) && fs::remove_dir(dir).is_ok() {
            debug!("removed the empty folder {}", dir.display());
            match dir.parent() {
                Some(up) => dir = up,
                None => return,
            }
        }
    }

    /// Remove the temporary files in `dir` left by writers killed mid-write: older than
    /// `STALE_TEMP_AGE` and not locked. A live writer holds its file's lock from the moment
    /// it is created (give or take the age) until it is renamed or removed, so its file is
    /// never removed; the lock is kept while removing, so no writer can start using it.
    fn sweep(&self, dir: &Path) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let now = self.clock.wall();
        for entry in entries.flatten() {
            if !entry.file_name().to_str().is_some_and(is_temp_name) {
                continue;
            }
            let path = entry.path();
            let Ok(file) = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
            else {
                continue;
            };
            let stale = file.metadata().is_ok_and(|m| {
                m.is_file()
                    && m.modified()
                        .ok()
                        .and_then(|t| now.duration_since(t).ok())
                        .is_some_and(|age| age >= STALE_TEMP_AGE)
            });
            if stale && file.try_lock().is_ok() {
                match fs::remove_file(&path) {
                    Ok(()) => debug!(
                        "removed {}, left by a writer killed mid-write",
                        path.display()
                    ),
                    Err(e) => debug!("cannot remove stale {}: {e}", path.display()),
                }
            }
        }
    }
}

#[async_trait]
impl Store for FileStore {
    fn url(&self) -> &str {
        &self.inner.url
    }

    fn answers_carry_store_clock(&self) -> bool {
        true
    }

    fn capabilities(&self) -> Capabilities {
        // The kernel stamps mtimes from a coarse clock (a few ms); 10 ms covers it.
        Capabilities {
            conditional_delete: true,
            clock_resolution: Duration::from_millis(10),
            store_clock_rule: true,
            wall_clock: false,
            // The version hashes the contents and the metadata, and every fenced write's
            // metadata carries a nonce.
            versions_are_unique: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        let path = self.path_of(key)?;
        let max_len = opts.max_len;
        let if_none_match = opts.if_none_match.cloned();
        self.blocking(move |inner| {
            let current = inner.read(&path, max_len)?;
            let (last_modified, server_now) = inner.store_times(current.as_ref());
            Ok(match current {
                None => Get::NotFound { server_now },
                Some(c) if Some(&c.version) == if_none_match.as_ref() => {
                    Get::NotModified { server_now }
                }
                Some(c) => Get::Found(Object {
                    bytes: c.bytes,
                    size: c.size,
                    version: c.version,
                    last_modified,
                    server_now,
                    meta: c.meta,
                }),
            })
        })
        .await
    }

    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        let path = self.path_of(key)?;
        validate_meta(meta)?;
        let meta = meta.clone();
        let dir = path.parent().expect("has parent").to_path_buf();
        let put = match cond {
            Cond::Create => {
                self.blocking(move |inner| inner.create(&path, &bytes, &meta))
                    .await
            }
            Cond::Match(v) => {
                self.locked(path, move |inner, path| {
                    inner.replace(path, &v, &bytes, &meta)
                })
                .await
            }
        };
        // Writers leave temporary files when killed; writers clean them up (not readers).
        self.sweep_if_due(dir).await;
        put
    }

    fn dead_holder_rule(&self) -> bool {
        true
    }

    fn watch(&self, key: &str) -> Option<Box<dyn crate::store::Watch>> {
        let path = self.path_of(key).ok()?;
        watch::FileWatch::new(&path).map(|w| Box::new(w) as Box<dyn crate::store::Watch>)
    }

    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        let path = self.path_of(key)?;
        let dir = path.parent().expect("has parent").to_path_buf();
        let version = version.clone();
        let deleted = self
            .locked(path, move |inner, path| inner.remove(path, &version))
            .await?;
        if matches!(deleted, Delete::Deleted) {
            // The folders it leaves empty go too (a queued lock's `NAME.q/` once its last
            // session is deleted): a store's directory does not fill with empty folders.
            let _ = self
                .blocking(move |inner| {
                    inner.prune(&dir);
                    Ok(())
                })
                .await;
        }
        Ok(deleted)
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(e, "cannot sync directory", dir))
}
