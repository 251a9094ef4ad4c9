//! The sidecar files next to an object: its lock file (`.NAME.lock`), who holds that lock, and
//! the names of temporary files.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::io_error;
use crate::error::Result;

/// An open sidecar lock file (`.NAME.lock`); the lock, once taken, is released when dropped.
pub(super) struct SidecarLock {
    file: File,
    pub(super) path: PathBuf,
}

impl SidecarLock {
    /// The lock file of the object at `path`; `None` when the object's directory does not
    /// exist: nothing can be at `path` then, so a condition on it fails, and creating the
    /// directory for a lock file would only leave litter.
    pub(super) fn open(path: &Path) -> Result<Option<SidecarLock>> {
        if !path.parent().expect("has parent").exists() {
            return Ok(None);
        }
        let lock_path = sidecar(path, ".lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&lock_path)
            .map_err(|e| io_error(e, "cannot open lock file", &lock_path))?;
        Ok(Some(SidecarLock {
            file,
            path: lock_path,
        }))
    }

    /// One attempt that never blocks: `Ok(false)` when another process holds the lock.
    pub(super) fn try_lock(&self) -> Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(e)) => Err(io_error(e, "cannot lock", &self.path)),
        }
    }

    /// Who holds the lock, as far as `/proc/locks` tells: ` (pid 123 "flock", stopped)`, or
    /// nothing. Read only after a long wait.
    pub(super) fn holder(&self) -> String {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = self.file.metadata() else {
            return String::new();
        };
        let Ok(locks) = fs::read_to_string("/proc/locks") else {
            return String::new();
        };
        let Some(pid) = flock_holder(&locks, meta.dev(), meta.ino()) else {
            return String::new();
        };
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let mut about = format!(" (pid {pid}");
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
