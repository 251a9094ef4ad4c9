//! The sidecar files next to an object: its lock file (`.NAME.lock`), who holds that lock, and
//! the names of temporary files.
//!
//! A lock file lives only as long as a write that needs it: whoever holds its lock removes it
//! before letting go, so none piles up. That is the classic race of lock files removed by their
//! holders: a process that opened the file before it was removed may lock it afterwards and
//! hold a lock on a file nobody else can open, while a third creates a new file under the name
//! and locks that. So a lock counts only once its file is still the one linked under the name
//! ([`SidecarLock::is_current`]); otherwise the name is opened again. Only a holder removes
//! the file, while holding it, so a file found current when locked stays linked until its
//! holder is done: two processes can never both hold a current lock.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::io_error;
use crate::error::Result;

/// An open sidecar lock file (`.NAME.lock`); the lock, once taken, is released when dropped.
pub(super) struct SidecarLock {
    file: File,
    pub(super) path: PathBuf,
}

impl SidecarLock {
    /// The lock file of the object at `path`, created if needed; `None` when the object's
    /// directory does not exist: nothing can be at `path` then, so a condition on it fails,
    /// and creating the directory for a lock file would only leave litter.
    pub(super) fn open(path: &Path) -> Result<Option<SidecarLock>> {
        let lock_path = sidecar(path, ".lock");
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&lock_path);
        match opened {
            Ok(file) => Ok(Some(SidecarLock {
                file,
                path: lock_path,
            })),
            // The directory is missing (or was just removed, being empty).
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(e, "cannot open lock file", &lock_path)),
        }
    }

    /// One attempt that never blocks: `Ok(false)` when another process holds the lock.
    pub(super) fn try_lock(&self) -> Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(e)) => Err(io_error(e, "cannot lock", &self.path)),
        }
    }

    /// Whether the file locked is still the one linked under its name: `false` once its last
    /// holder removed it (and perhaps another process made a new one), when this lock guards
    /// nothing and the name must be opened again.
    pub(super) fn is_current(&self) -> Result<bool> {
        if negative_control::not_rechecked() {
            return Ok(true);
        }
        let ours = self
            .file
            .metadata()
            .map_err(|e| io_error(e, "cannot stat", &self.path))?;
        match fs::symlink_metadata(&self.path) {
            Ok(now) => Ok(now.dev() == ours.dev() && now.ino() == ours.ino()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error(e, "cannot stat", &self.path)),
        }
    }

    /// Remove the lock file, then let go of the lock: call while holding a current lock, once
    /// the write it guarded is done. Best effort: a file left behind is removed by the next
    /// holder.
    pub(super) fn remove(self) {
        let _ = fs::remove_file(&self.path);
    }

    /// Who holds the lock, as far as `/proc/locks` tells: `another process (pid 123 "flock",
    /// stopped)`, `another call of this process (pid 9)` (many clients of one process writing one
    /// object), or `another process`. Read only after a long wait.
    pub(super) fn holder(&self) -> String {
        let unknown = || "another process".to_string();
        let Ok(meta) = self.file.metadata() else {
            return unknown();
        };
        let Some(pid) = proc_locks_holder(meta.dev(), meta.ino()) else {
            return unknown();
        };
        if pid == std::process::id() {
            return format!("another call of this process (pid {pid})");
        }
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let mut about = format!("another process (pid {pid}");
        if let Ok(comm) = fs::read_to_string(proc.join("comm")) {
            about.push_str(&format!(" {:?}", comm.trim()));
        }
        // The state is the field after the command name, which ends at the last ')'.
        if let Ok(stat) = fs::read_to_string(proc.join("stat")) {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            match state {
                Some("T") => about.push_str(", stopped"),
                Some("t") => about.push_str(", stopped by a debugger"),
                _ => {}
            }
        }
        about.push(')');
        about
    }
}

/// How many times [`proc_locks_holder`] reads `/proc/locks` before it says it found no holder.
/// The kernel makes that file a page at a time: a lock taken or let go elsewhere between two
/// pages shifts its lines, and one read can skip the line of a lock held all along (measured
/// by `a_held_lock_is_found_in_proc_locks_while_other_locks_come_and_go`: 58 of 1,000 single
/// reads missed it while three threads churned locks). Only read after a long wait, to name a
/// holder in an error, so a few more reads cost nothing that matters.
const PROC_LOCKS_READS: usize = 8;

/// The pid holding a `flock` on the file (`dev`, `ino`), read from `/proc/locks`.
pub(super) fn proc_locks_holder(dev: u64, ino: u64) -> Option<u32> {
    (0..PROC_LOCKS_READS).find_map(|_| {
        let locks = fs::read_to_string("/proc/locks").ok()?;
        flock_holder(&locks, dev, ino)
    })
}

/// The pid holding a `flock` on the file (`dev`, `ino`) according to `/proc/locks`, whose lines
/// read `1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF` (waiters have `->` after the number).
pub(super) fn flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let file = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let at = fields.iter().position(|f| *f == file)?;
        fields
            .get(at.checked_sub(1)?)?
            .parse()
            .ok()
            .filter(|pid| *pid > 0)
    })
}

/// Whether `name` is one of this store's temporary files: `.NAME.` + 16 hex digits + `.tmp`.
pub(super) fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    match rest.rsplit_once('.') {
        Some((object, hex)) => {
            !object.is_empty() && hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Sidecar names next to the object `path`.
pub(super) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .expect("object paths have a file name")
        .to_string_lossy();
    path.with_file_name(format!(".{name}{suffix}"))
}

/// The file store's negative control (verify/tests/negative_controls.rs), kept here rather than
/// among the protocol's mutants: the lock file is the store's, not a protocol decision. With
/// the `negative-controls` feature only; otherwise the check is a constant `false`.
pub mod negative_control {
    #[cfg(feature = "negative-controls")]
    static NOT_RECHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Count a sidecar lock without checking that its file is still the one under its name
    /// (`LockFileNotRechecked`): a process that locked a removed file writes beside one that
    /// locked the new one. Test processes only.
    #[cfg(feature = "negative-controls")]
    pub fn set_lock_file_not_rechecked(on: bool) {
        NOT_RECHECKED.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    #[inline]
    pub(super) fn not_rechecked() -> bool {
        #[cfg(feature = "negative-controls")]
        {
            NOT_RECHECKED.load(std::sync::atomic::Ordering::SeqCst)
        }
        #[cfg(not(feature = "negative-controls"))]
        {
            false
        }
    }
}
