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
    call_here(err, || {
        check_fork()?;
        body()
    })
}

/// [`call`] without the fork check, for calls that work in a forked child: the per-process
/// session's acquisition, which opens the child's own runtime and session, and the calls on
/// shared grants, whose bodies check that the grant is this process's ([`made_here`]).
pub(crate) fn call_here(
    err: *mut *mut lease_error,
    body: impl FnOnce() -> Result<(), Failure>,
) -> lease_code {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
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

/// [`quiet`] without the fork check: for handles that may be this process's after a fork (shared
/// grants), whose bodies check [`made_here`].
pub(crate) fn quiet_here<T: Copy>(neutral: T, body: impl FnOnce() -> Option<T>) -> T {
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
             live only in the parent; use it in the parent, or exec in the child \
             (lease_acquire_on_process_session works in a child: it opens the child's own \
             session)",
        ));
    }
    Ok(())
}

/// `LEASE_FORKED` for a handle made by another process (`pid`, the process that made it: a
/// forked child's parent), whose runtime threads do not exist here.
pub(crate) fn made_here(pid: u32) -> Result<(), Failure> {
    if pid != std::process::id() {
        return Err(Failure::new(
            LEASE_FORKED,
            "this handle was made before fork(), in the parent process: the parent's runtime \
             threads do not exist in this child; use it in the parent (a child acquires on its \
             own session with lease_acquire_on_process_session)",
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

/// An options struct that begins with its own size (`size_t struct_size`, set by its
/// `…_default()`), read from the caller. So the struct can grow at its end without breaking
/// programs built against an older header: a smaller struct (at least `min_size`, the size of
/// the first layout with `struct_size`) is read up to its size, and the fields it lacks keep
/// their defaults; a larger one (a header newer than this library) is accepted only when every
/// byte this library does not know is zero, as Linux's `copy_struct_from_user` does, so an
/// option this library cannot honour is never ignored silently. NULL gives `default`.
///
/// # Safety
/// `p` is NULL, or points to `struct_size` readable bytes (at least a `usize`) that begin with
/// `struct_size`, aligned for `T`.
pub(crate) unsafe fn sized_options<T: Copy>(
    p: *const T,
    name: &str,
    default: T,
    min_size: usize,
) -> Result<T, Failure> {
    if p.is_null() {
        return Ok(default);
    }
    // SAFETY: the caller's contract: the struct begins with its size.
    let size = unsafe { p.cast::<usize>().read() };
    let ours = std::mem::size_of::<T>();
    let start_from = format!("start from {name}_default(), which sets it");
    if size == 0 {
        return Err(Failure::invalid(format!(
            "{name}.struct_size is 0: {start_from}"
        )));
    }
    if size < min_size {
        return Err(Failure::invalid(format!(
            "{name}.struct_size is {size}, smaller than any {name} ({min_size} bytes or more): \
             {start_from}"
        )));
    }
    // More than any struct of options could ever be: not a size (an uninitialized struct).
    const MAX_SIZE: usize = 64 * 1024;
    if size > MAX_SIZE {
        return Err(Failure::invalid(format!(
            "{name}.struct_size is {size}, not the size of a {name}: {start_from}"
        )));
    }
    if size > ours {
        // SAFETY: the caller's contract: `size` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size) };
        if bytes[ours..].iter().any(|b| *b != 0) {
            return Err(Failure::invalid(format!(
                "{name} is larger than this liblease's ({size} bytes against {ours}) and sets \
                 options this liblease ({}) does not know: link the liblease whose header the \
                 program was compiled against",
                env!("CARGO_PKG_VERSION")
            )));
        }
    }
    let mut out = default;
    // SAFETY: `min(size, ours)` bytes are readable at `p` and writable at `out`, and `T` is a
    // plain C struct (`Copy`, every bit pattern of its fields the caller's to choose).
    unsafe {
        std::ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            (&mut out as *mut T).cast::<u8>(),
            size.min(ours),
        )
    };
    Ok(out)
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
