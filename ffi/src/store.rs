//! `lease_store`: an open store (through the core's registry), and `lease_status`.

use lease_core::{Client, StoreUrl};
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::{boundary::*, error::*, runtime::*};

/// An open store (`s3://bucket?…`, `file:///dir`, `memory://namespace`): leases are acquired by
/// name in it. Thread-safe.
pub struct lease_store {
    pub(crate) rt: Arc<Rt>,
    pub(crate) client: Client,
    /// The store as parsed: a shared session on it refuses locks of other stores.
    pub(crate) url: StoreUrl,
}

/// The process's client of the store (the core's registry), so what a client learns about
/// keys (the version it released, the highest epoch) is shared by every handle.
pub(crate) fn client_for(url: &StoreUrl) -> Result<Client, lease_core::Error> {
    Client::for_store(url)
}

/// Open the store at `url`: `s3://BUCKET?options`, `s3://BUCKET/PREFIX`, `file:///DIR`,
/// `memory://NAMESPACE`, or a directory path. Does not contact the store.
///
/// On success writes a new store to `*out` (free it with `lease_store_free`); on failure
/// (`LEASE_INVALID` for a bad URL, `LEASE_STORE` for a store that cannot be opened) writes an
/// error to `*err` when `err` is not NULL.
///
/// # Safety
/// `rt` is NULL or a live runtime; `url` is NULL or a NUL-terminated string; `out` points to
/// writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_store_open(
    rt: *const lease_runtime,
    url: *const c_char,
    out: *mut *mut lease_store,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let rt = unsafe { handle(rt, "runtime") }?;
        // SAFETY: the caller's contract.
        let url = unsafe { str_arg(url, "url") }?;
        let out = out_arg(out, "out")?;
        let parsed = StoreUrl::parse(url)?;
        let client = {
            let _in_runtime = rt.rt.runtime().enter();
            client_for(&parsed)?
        };
        let store = Box::new(lease_store {
            rt: rt.rt.clone(),
            client,
            url: parsed,
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(store) };
        Ok(())
    })
}

/// Free a store handle. Leases acquired from it stay valid. NULL is a no-op.
///
/// # Safety
/// `store` is NULL or a store from `lease_store_open`, not freed before and not in use by
/// another thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn lease_store_free(store: *mut lease_store) {
    free_box(store);
}

/// The state of the lease `name` as the store shows it now, as one line of JSON (the shape
/// `lease status --json` prints and every binding exposes): `url`, `state`, `epoch`, `holder`
/// (`id`, `label`, `host`, `pid`, `user`, `client`), `ttl_ms`, `expires_in_ms`, `data`,
/// `acquired_at`, `renewed_at`, `detail`, and for a queued lock (docs/protocol.md §10)
/// `permits`, `holders` (in the order granted) and `waiting` (in arrival order), each
/// participant `{holder, mode, scope, token, ttl_ms, since, data}` with `scope` `null`,
/// `{"path": …}` or `{"start": …, "end": …}` (all three `null` for a plain lease). `state` is `free` (no record), `held`, `released`,
/// `expired` (a waiter may take it over now), `broken` (by `lease break`: nobody may take it
/// until the broken holder's deadline has surely passed, unless that holder releases) or
/// `corrupt`. `expires_in_ms` (held or broken leases) is the estimated time until a waiter may
/// take the lease over: ttl + grace + the store clock's resolution after the last write, by the
/// store's clock; the holder's own deadline comes before it. Needs only read permission. Blocks.
///
/// On success writes a new string to `*json_out` (free it with `lease_string_free`).
///
/// # Safety
/// `store` is NULL or a live store; `name` is NULL or a NUL-terminated string; `json_out` points
/// to writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
/// Must not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_status(
    store: *const lease_store,
    name: *const c_char,
    json_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let store = unsafe { handle(store, "store") }?;
        // SAFETY: the caller's contract.
        let name = unsafe { str_arg(name, "name") }?;
        let out = out_arg(json_out, "json_out")?;
        let status = store.rt.block_on(store.client.status(name))??;
        let json = c_string(&status.to_json().to_string());
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = json.into_raw() };
        Ok(())
    })
}

/// Free a string returned by the library (`lease_status`). NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a string returned by this library, not freed before.
#[no_mangle]
pub unsafe extern "C" fn lease_string_free(s: *mut c_char) {
    if s.is_null() || forked() {
        return;
    }
    // SAFETY: the caller's contract: `s` came from CString::into_raw.
    let s = unsafe { CString::from_raw(s) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(s)));
}
