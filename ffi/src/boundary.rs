//! What every `extern "C"` function goes through: [`call`] and [`quiet`] (panics never unwind
//! into C; outputs are written only on success), fork detection, and checks of the arguments
//! C passes (NULL pointers, invalid UTF-8).

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crate::error::*;

/// A CString from any text: an interior NUL (which C cannot carry) is shown as `\0`.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Run the body of a fallible call: panics caught, fork checked, the error object written to
/// `*err` (when `err` is not NULL) only on failure.
pub(crate) fn call(
    err: *mut *mut lease_error,
    body: impl FnOnce() -> Result<(), Failure>,
) -> lease_code {
    let failure = match catch_unwind(AssertUnwindSafe(|| {
        check_fork()?;
        body()
    })) {
        Ok(Ok(())) => return LEASE_OK,
        Ok(Err(failure)) => failure,
        Err(payload) => Failure::new(
            LEASE_PANIC,
            format!(
                "liblease panicked (a bug, please report it): {}",
                panic_message(payload.as_ref())
            ),
        ),
    };
    let code = failure.code;
    if !err.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let e = Box::new(lease_error {
                code,
                message: c_string(&failure.message),
                epoch: failure.epoch.unwrap_or(0),
            });
            // SAFETY: the caller passes a valid `lease_error **` or NULL (checked above).
            unsafe { *err = Box::into_raw(e) };
        }));
    }
    code
}

/// Run the body of an infallible call: a panic, a fork or bad input gives `neutral`.
pub(crate) fn quiet<T: Copy>(neutral: T, body: impl FnOnce() -> Option<T>) -> T {
    if forked() {
        return neutral;
    }
    catch_unwind(AssertUnwindSafe(body))
        .ok()
        .flatten()
        .unwrap_or(neutral)
}

// ---------------------------------------------------------------------------------------------
// Fork detection

pub(crate) static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_fork_child() {
    // Async-signal-safe: one atomic store.
    FORKED.store(true, Ordering::SeqCst);
}

pub(crate) fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
    });
}

pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

pub(crate) fn check_fork() -> Result<(), Failure> {
    if forked() {
        return Err(Failure::new(
            LEASE_FORKED,
            "liblease cannot be used in a child process after fork(): its runtime threads \
             live only in the parent; use it in the parent, or exec in the child",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Argument checks

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the lifetime `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|e| Failure::invalid(format!("{what} is not valid UTF-8 ({e})")))
}

/// # Safety
/// As [`str_arg`]; NULL is allowed and gives `None`.
pub(crate) unsafe fn opt_str_arg(p: *const c_char, what: &str) -> Result<Option<String>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { str_arg(p, what) }.map(|s| Some(s.to_string()))
}

/// # Safety
/// `p` is NULL or points to a live `T` for the lifetime `'a`.
pub(crate) unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

pub(crate) fn out_arg<T>(p: *mut *mut T, what: &str) -> Result<*mut *mut T, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} (the output pointer) is NULL"
        )));
    }
    Ok(p)
}

/// Drop a boxed handle, or leak it in a forked child (whose copy of the library's threads and
/// locks cannot be trusted).
pub(crate) fn free_box<T>(p: *mut T) {
    if p.is_null() {
        return;
    }
    // SAFETY: the callers' contract: `p` came from Box::into_raw and is freed once.
    let b = unsafe { Box::from_raw(p) };
    if forked() {
        std::mem::forget(b);
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(move || drop(b)));
}
