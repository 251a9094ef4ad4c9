//! Health and metrics in C: `lease_health`, `lease_on_health`, `lease_metrics_json`,
//! `lease_metrics_text`.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use crate::boundary::*;
use crate::error::*;
use crate::held::{lease, lease_health, HealthCallback};

/// Called with the current health, then at each change: `user_data` as given to
/// `lease_on_health`, the health, the milliseconds left, and why it was lost (`expired`,
/// `taken_over`, `broken`, `preempted`, `vanished`, `overwritten`; a queued lock's grant:
/// `session_deleted`, `removed`, `lock_replaced`; borrowed, valid only during the call) or
/// NULL.
pub type lease_health_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        health: lease_health,
        remaining_ms: u64,
        reason: *const c_char,
    ),
>;

/// The lease's health now; `LEASE_HEALTH_LOST` for NULL.
///
/// # Safety
/// `l` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn lease_health_now(l: *const lease) -> lease_health {
    quiet(lease_health::LEASE_HEALTH_LOST, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }.ok()?;
        Some(l.held.health().into())
    })
}

/// Call `callback(user_data, health, remaining_ms, reason)` with the current health, then at
/// each change (`healthy` → `late` → `unknown` → `lost`, or back to `healthy` when a renewal
/// lands), in order, from one runtime thread; a release ends the calls without one. Never
/// called (nor still running) after `lease_free` returns. Same rules as a lost callback: keep
/// it short, never block, never call blocking functions, never unwind.
///
/// Returns `LEASE_OK`, or `LEASE_INVALID` if `l` or `callback` is NULL.
///
/// # Safety
/// `l` is NULL or a live lease; `callback` is NULL or a function safe to call from any thread
/// with `user_data`, which must stay valid until `lease_free(l)` has returned.
#[no_mangle]
pub unsafe extern "C" fn lease_on_health(
    l: *const lease,
    callback: lease_health_callback,
    user_data: *mut c_void,
) -> lease_code {
    call(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        let f = callback.ok_or_else(|| Failure::invalid("callback is NULL"))?;
        let cb = Arc::new(HealthCallback::new(f, user_data));
        l.health_callbacks.lock().unwrap().push(cb.clone());
        l.held.on_health(move |e| cb.call(e));
        Ok(())
    })
}

/// This process's lease metrics as JSON: a list of `{name, help, type, samples}`, each sample
/// `{labels: {…}, value}` or, for a histogram, `{labels, buckets: [[le, cumulative count], …],
/// sum, count}` (the numbers every language shares). Writes a new string to `*json_out` (free
/// it with `lease_string_free`).
///
/// # Safety
/// `json_out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_metrics_json(json_out: *mut *mut c_char) -> lease_code {
    call(std::ptr::null_mut(), || {
        let out = out_arg(json_out, "json_out")?;
        let json = c_string(&lease_core::metrics::snapshot().to_json().to_string());
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = json.into_raw() };
        Ok(())
    })
}

/// This process's lease metrics in the Prometheus (OpenMetrics) text format. Writes a new
/// string to `*text_out` (free it with `lease_string_free`).
///
/// # Safety
/// `text_out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_metrics_text(text_out: *mut *mut c_char) -> lease_code {
    call(std::ptr::null_mut(), || {
        let out = out_arg(text_out, "text_out")?;
        let text = c_string(&lease_core::metrics::encode_text());
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = text.into_raw() };
        Ok(())
    })
}
