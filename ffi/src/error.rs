//! Status codes (`lease_code`) and error objects (`lease_error`): the one mapping of the
//! core's error kinds to C.

use lease_core::ErrorKind;
use std::ffi::{c_char, c_int, CStr, CString};

/// The result of every fallible call. The numbers are fixed and never reused; new codes may be
/// added, so treat an unknown code like `LEASE_INTERNAL`. `lease_code_name` gives the name.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum lease_code {
    /// Success.
    LEASE_OK = 0,
    /// The lease is held by someone else and the call was asked not to wait (`wait_ms = 0`).
    LEASE_HELD = 1,
    /// The wait for the lease ran out (`wait_ms` elapsed).
    LEASE_TIMEOUT = 2,
    /// A waiting acquire was cancelled through its `lease_cancel_token`.
    LEASE_CANCELLED = 3,
    /// The lease was lost (taken over, broken, expired without renewal, deleted) or released.
    LEASE_LOST = 4,
    /// A write carried an epoch lower than one already recorded: a newer holder exists.
    LEASE_FENCED = 5,
    /// The store is unavailable or overloaded; the same call may succeed later.
    LEASE_UNAVAILABLE = 6,
    /// Bad input: a NULL handle or pointer, invalid UTF-8, a bad URL, name, ttl or option, or a
    /// blocking call made from a runtime thread (inside a lost callback).
    LEASE_INVALID = 7,
    /// A permanent store problem: permissions, missing bucket or directory, credentials.
    LEASE_STORE = 8,
    /// A stored object could not be understood.
    LEASE_CORRUPT = 9,
    /// A bug in the library.
    LEASE_INTERNAL = 10,
    /// The library panicked (a bug); the panic was caught at the C boundary.
    LEASE_PANIC = 11,
    /// The process forked after the library started: liblease cannot be used in the child
    /// (its runtime threads exist only in the parent). Use it before `fork()` only in the
    /// parent, or `exec` in the child.
    LEASE_FORKED = 12,
    /// A version-conditional write (`lease_fenced_put_if`) found the object changed since the
    /// version the caller read, by a writer of the same or a lower epoch (a higher epoch is
    /// `LEASE_FENCED`): nothing was written. Read it again and decide again.
    LEASE_CONFLICT = 13,
    /// A queued lock's record has no room for another participant (its size limit is reached):
    /// nothing was written; the same call may succeed once others have left.
    LEASE_QUEUE_FULL = 14,
    /// A stored record was written by a newer version of liblease (a format, mode or feature
    /// this version does not know): it is never taken over or written over. Upgrade.
    LEASE_UNSUPPORTED = 15,
}

pub(crate) use lease_code::*;

impl lease_code {
    pub(crate) fn name(self) -> &'static CStr {
        match self {
            LEASE_OK => c"LEASE_OK",
            LEASE_HELD => c"LEASE_HELD",
            LEASE_TIMEOUT => c"LEASE_TIMEOUT",
            LEASE_CANCELLED => c"LEASE_CANCELLED",
            LEASE_LOST => c"LEASE_LOST",
            LEASE_FENCED => c"LEASE_FENCED",
            LEASE_UNAVAILABLE => c"LEASE_UNAVAILABLE",
            LEASE_INVALID => c"LEASE_INVALID",
            LEASE_STORE => c"LEASE_STORE",
            LEASE_CORRUPT => c"LEASE_CORRUPT",
            LEASE_INTERNAL => c"LEASE_INTERNAL",
            LEASE_PANIC => c"LEASE_PANIC",
            LEASE_FORKED => c"LEASE_FORKED",
            LEASE_CONFLICT => c"LEASE_CONFLICT",
            LEASE_QUEUE_FULL => c"LEASE_QUEUE_FULL",
            LEASE_UNSUPPORTED => c"LEASE_UNSUPPORTED",
        }
    }

    pub(crate) fn from_int(code: c_int) -> Option<lease_code> {
        const ALL: [lease_code; 16] = [
            LEASE_OK,
            LEASE_HELD,
            LEASE_TIMEOUT,
            LEASE_CANCELLED,
            LEASE_LOST,
            LEASE_FENCED,
            LEASE_UNAVAILABLE,
            LEASE_INVALID,
            LEASE_STORE,
            LEASE_CORRUPT,
            LEASE_INTERNAL,
            LEASE_PANIC,
            LEASE_FORKED,
            LEASE_CONFLICT,
            LEASE_QUEUE_FULL,
            LEASE_UNSUPPORTED,
        ];
        ALL.into_iter().find(|c| *c as c_int == code)
    }
}

/// The one mapping of the core's error kinds to C codes.
pub(crate) fn code_of(kind: ErrorKind) -> lease_code {
    match kind {
        ErrorKind::Held => LEASE_HELD,
        ErrorKind::Timeout => LEASE_TIMEOUT,
        ErrorKind::Cancelled => LEASE_CANCELLED,
        ErrorKind::Lost => LEASE_LOST,
        ErrorKind::Fenced => LEASE_FENCED,
        ErrorKind::Conflict => LEASE_CONFLICT,
        ErrorKind::Unavailable => LEASE_UNAVAILABLE,
        ErrorKind::Invalid => LEASE_INVALID,
        ErrorKind::Store => LEASE_STORE,
        ErrorKind::Corrupt => LEASE_CORRUPT,
        ErrorKind::Internal => LEASE_INTERNAL,
        ErrorKind::QueueFull => LEASE_QUEUE_FULL,
        ErrorKind::Unsupported => LEASE_UNSUPPORTED,
        // ErrorKind is non-exhaustive: a kind added to the core and not yet mapped here.
        _ => LEASE_INTERNAL,
    }
}

/// Details of a failed call: its code and a one-line message (for people; not API).
/// Created by the library, owned by the caller, freed with `lease_error_free`.
pub struct lease_error {
    pub(crate) code: lease_code,
    pub(crate) message: CString,
    pub(crate) epoch: u64,
}

/// Why a call failed, before it becomes a `lease_error`.
pub(crate) struct Failure {
    pub(crate) code: lease_code,
    pub(crate) message: String,
    /// The epoch involved, when known (for `LEASE_FENCED`: the newer holder's).
    pub(crate) epoch: Option<u64>,
}

impl Failure {
    pub(crate) fn new(code: lease_code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            epoch: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(LEASE_INVALID, message)
    }
}

impl From<lease_core::Error> for Failure {
    fn from(e: lease_core::Error) -> Failure {
        Failure {
            code: code_of(e.kind()),
            message: e.to_string(),
            epoch: e.epoch(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors, codes, version

/// The code of an error (`LEASE_OK` if `e` is NULL).
///
/// # Safety
/// `e` is NULL or a live error.
#[no_mangle]
pub unsafe extern "C" fn lease_error_kind(e: *const lease_error) -> lease_code {
    // Works after fork too (the child's LEASE_FORKED errors are read this way): it only reads
    // memory the child owns.
    // SAFETY: the caller's contract.
    unsafe { e.as_ref() }.map_or(LEASE_OK, |e| e.code)
}

/// The message of an error: one line for people, not API. Borrowed: valid until
/// `lease_error_free(e)`. Never NULL (an empty string if `e` is NULL).
///
/// # Safety
/// `e` is NULL or a live error.
#[no_mangle]
pub unsafe extern "C" fn lease_error_message(e: *const lease_error) -> *const c_char {
    // Works after fork too: it only reads memory the child owns.
    // SAFETY: the caller's contract.
    match unsafe { e.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// The epoch an error is about, when known, else 0. For `LEASE_FENCED` it is the epoch of the
/// newer holder whose write refused this one.
///
/// # Safety
/// `e` is NULL or a live error.
#[no_mangle]
pub unsafe extern "C" fn lease_error_epoch(e: *const lease_error) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { e.as_ref() }.map_or(0, |e| e.epoch)
}

/// Free an error. NULL is a no-op.
///
/// # Safety
/// `e` is NULL or an error from this library, not freed before.
#[no_mangle]
pub unsafe extern "C" fn lease_error_free(e: *mut lease_error) {
    if e.is_null() {
        return;
    }
    // SAFETY: the caller's contract. Plain memory: freed in a forked child too.
    drop(unsafe { Box::from_raw(e) });
}

/// The name of a code, e.g. "LEASE_HELD" (static storage; "LEASE_UNKNOWN" for a number that
/// is not a code).
#[no_mangle]
pub extern "C" fn lease_code_name(code: c_int) -> *const c_char {
    lease_code::from_int(code)
        .map_or(c"LEASE_UNKNOWN", lease_code::name)
        .as_ptr()
}

/// The library's version, e.g. "0.1.0" (static storage).
#[no_mangle]
pub extern "C" fn lease_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("version contains NUL"),
        };
    VERSION.as_ptr()
}
