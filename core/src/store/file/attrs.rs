//! What is kept beside an object's bytes: its metadata and boot-clock stamp (extended
//! attributes set on the temporary file, so they change atomically with the contents), and the
//! version, a hash of both.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::io_error;
use crate::clock::BootTime;
use crate::error::{Error, ErrorKind, Result};
use crate::store::{Meta, Version};

const META_XATTR: &str = "user.lease.meta";
const STAMP_XATTR: &str = "user.lease.stamp";

pub(super) fn version_of(bytes_hash: Sha256, meta: &Meta) -> Version {
    let mut h = bytes_hash;
    if !meta.is_empty() {
        h.update([0xff]);
        h.update(serde_json::to_vec(meta).expect("string maps serialize"));
    }
    let digest = h.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    Version::etag(format!("\"{hex}\""))
}

/// An extended attribute of an open file; `None` when it is absent or unsupported.
fn get_xattr(file: &File, name: &str, path: &Path) -> Result<Option<Vec<u8>>> {
    use std::os::fd::AsRawFd;
    let name = CString::new(name).expect("no NUL");
    let mut buf = vec![0u8; 4096];
    // SAFETY: the fd is open for the lifetime of `file`; buf is valid for buf.len() bytes.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
            _ => Err(io_error(e, "cannot read extended attributes of", path)),
        };
    }
    buf.truncate(n as usize);
    Ok(Some(buf))
}

/// Set an extended attribute on an open file. `Ok(false)` when the file system has none.
fn set_xattr(file: &File, name: &str, value: &[u8], path: &Path) -> Result<bool> {
    use std::os::fd::AsRawFd;
    let name = CString::new(name).expect("no NUL");
    // SAFETY: the fd is open; value is valid for value.len() bytes.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOTSUP) {
        return Ok(false);
    }
    Err(io_error(e, "cannot write extended attributes of", path))
}

pub(super) fn read_meta(file: &File, path: &Path) -> Result<Meta> {
    match get_xattr(file, META_XATTR, path)? {
        None => Ok(Meta::new()),
        Some(buf) => serde_json::from_slice(&buf).map_err(|e| {
            Error::new(
                ErrorKind::Corrupt,
                format!("unreadable metadata on {}", path.display()),
            )
            .with_source(e)
        }),
    }
}

pub(super) fn write_meta(file: &File, meta: &Meta, path: &Path) -> Result<()> {
    if meta.is_empty() {
        return Ok(());
    }
    let value = serde_json::to_vec(meta).expect("string maps serialize");
    if !set_xattr(file, META_XATTR, &value, path)? {
        return Err(Error::store(format!(
            "the file system under {} does not support extended attributes, which fenced writes need",
            path.display()
        )));
    }
    Ok(())
}

/// Stamp a file with the boot clock, if this machine has one and the file system keeps it:
/// `BOOT_ID NANOS_SINCE_BOOT TIME_NAMESPACE`.
pub(super) fn write_stamp(file: &File, boot: Option<BootTime>, path: &Path) -> Result<()> {
    if let Some(b) = boot {
        let value = format!(
            "{} {} {}",
            b.boot_id,
            b.since_boot.as_nanos(),
            b.time_namespace
        );
        set_xattr(file, STAMP_XATTR, value.as_bytes(), path)?;
    }
    Ok(())
}

/// A file's boot-clock stamp.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) boot_id: String,
    pub(super) since_boot: Duration,
    /// `None` for a stamp written before stamps named their time namespace: on which clock it
    /// was read is unknown, so it is not trusted (see `Inner::store_times`).
    pub(super) time_namespace: Option<String>,
}

impl Stamp {
    /// `None` for anything but two or three fields with a number second.
    pub(super) fn parse(text: &str) -> Option<Stamp> {
        let mut fields = text.split(' ');
        let boot_id = fields.next()?.to_string();
        let since_boot = Duration::from_nanos(fields.next()?.parse().ok()?);
        let time_namespace = fields.next().map(str::to_string);
        if fields.next().is_some() {
            return None;
        }
        Some(Stamp {
            boot_id,
            since_boot,
            time_namespace,
        })
    }

    /// Whether this stamp was read on the same `CLOCK_BOOTTIME` as `now`.
    pub(super) fn same_clock_as(&self, now: &BootTime) -> bool {
        self.boot_id == *now.boot_id && self.time_namespace.as_deref() == Some(&*now.time_namespace)
    }
}

pub(super) fn read_stamp(file: &File, path: &Path) -> Result<Option<Stamp>> {
    let Some(buf) = get_xattr(file, STAMP_XATTR, path)? else {
        return Ok(None);
    };
    Ok(Stamp::parse(&String::from_utf8_lossy(&buf)))
}
