//! How `lease run` tells of its lease's health (docs/protocol.md §4, "Health"): a line on
//! stderr at each change, and a file the command can read, named by `LEASE_HEALTH_FILE`.
//!
//! The file holds one JSON line, replaced atomically (written beside it, then renamed) at each
//! change: `{"health": "late", "remaining_ms": 17000, "epoch": …, "url": …, "reason": null,
//! "time": "…"}`. A command checks it before a step that needs the lease (or watches it with
//! inotify), and acts only through fenced writes once it says `unknown`. A file rather than a
//! signal: it needs no handler, cannot interrupt a system call, and says how much time is left;
//! `lease run` still sends SIGTERM when `unknown` begins, and SIGKILL on a loss.

use std::io::Write;
use std::path::{Path, PathBuf};

use lease::clock::{Clock, SystemClock};
use lease::{format_duration, Health, HealthEvent, Lease};

/// The health file of one `lease run`, removed when dropped.
pub struct HealthFile {
    path: PathBuf,
}

impl HealthFile {
    /// Create the file in the temporary directory, saying the lease is healthy.
    pub fn create() -> std::io::Result<HealthFile> {
        let dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let name = format!("lease-health-{}-{:x}", std::process::id(), nanos());
        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(HealthFile { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write `held`'s health now, whatever the monitor has written: before a signal the
    /// command may answer by reading the file.
    pub fn write_now(&self, held: &Lease) {
        let _ = write(&self.path, held.url(), held.epoch(), &held.health_event());
    }

    /// Report each change of `held`'s health on stderr and in the file.
    pub fn follow(&self, held: &Lease) {
        let path = self.path.clone();
        let (url, epoch) = (held.url().to_string(), held.epoch());
        // Written before the command starts, so it never reads an empty file.
        let _ = write(&path, &url, epoch, &held.health_event());
        let last = std::sync::Mutex::new(None);
        held.on_health(move |e: &HealthEvent| {
            let _ = write(&path, &url, epoch, e);
            let before = last.lock().unwrap().replace(e.health);
            // The first `healthy` is not news; every other change is.
            if before.is_some() || e.health != Health::Healthy {
                let why = e
                    .reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    std::io::stderr(),
                    "lease: {url} (epoch {epoch}) is {}{why}, {} left",
                    e.health,
                    format_duration(e.remaining)
                );
            }
        });
    }
}

fn nanos() -> u64 {
    SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64)
}

fn write(path: &Path, url: &str, epoch: u64, e: &HealthEvent) -> std::io::Result<()> {
    let line = serde_json::json!({
        "health": e.health.as_str(),
        "remaining_ms": e.remaining.as_millis() as u64,
        "epoch": epoch,
        "url": url,
        "reason": e.reason.as_ref().map(|r| r.kind()),
        "time": lease::record::timestamp(SystemClock.wall()),
    });
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{line}\n"))?;
    std::fs::rename(&tmp, path)
}

impl Drop for HealthFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
