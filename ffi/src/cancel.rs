//! `lease_cancel_token`: cancels a waiting acquire from another thread.

use std::panic::catch_unwind;
use tokio_util::sync::CancellationToken;

use crate::boundary::*;

/// Cancels a waiting `lease_acquire` from another thread. One-shot: once cancelled it stays
/// cancelled; make a new one for the next acquire. Thread-safe.
pub struct lease_cancel_token {
    pub(crate) token: CancellationToken,
}

/// A new, uncancelled token (free it with `lease_cancel_token_free`). NULL only after fork().
#[no_mangle]
pub extern "C" fn lease_cancel_token_new() -> *mut lease_cancel_token {
    if forked() {
        return std::ptr::null_mut();
    }
    catch_unwind(|| {
        Box::into_raw(Box::new(lease_cancel_token {
            token: CancellationToken::new(),
        }))
    })
    .unwrap_or(std::ptr::null_mut())
}

/// Cancel: an acquire waiting with this token returns `LEASE_CANCELLED` promptly, and later
/// acquires given it return `LEASE_CANCELLED` at once. Safe from any thread, any number of
/// times. NULL is a no-op.
///
/// # Safety
/// `token` is NULL or a live token.
#[no_mangle]
pub unsafe extern "C" fn lease_cancel_token_cancel(token: *const lease_cancel_token) {
    quiet((), || {
        // SAFETY: the caller's contract.
        unsafe { token.as_ref() }?.token.cancel();
        Some(())
    })
}

/// Free a token. NULL is a no-op.
///
/// # Safety
/// `token` is NULL or a token from `lease_cancel_token_new`, not freed before, and no
/// `lease_acquire` given it is still running.
#[no_mangle]
pub unsafe extern "C" fn lease_cancel_token_free(token: *mut lease_cancel_token) {
    free_box(token);
}
