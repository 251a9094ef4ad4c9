//! liblease: the C ABI of lease.
//!
//! Blocking calls over the async core, driven by one runtime handle that owns every renewal
//! task. The conventions (status codes, error objects, ownership, threads, fork, callbacks) are
//! written down in `docs/ffi.md`; `include/liblease.h` is generated from this file by cbindgen
//! (`ffi/header`), so the doc comments here are the header's documentation.
//!
//! Every `extern "C"` function runs its body inside [`call`] or [`quiet`], which catch panics
//! (a panic never unwinds into C: it becomes `LEASE_PANIC` or a neutral value), check that the
//! process has not forked since the library started, and write outputs only on success.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::thread::ThreadId;
use std::time::Duration;

use lease_core::store::Version;
use lease_core::{Client, ErrorKind, FencingGate, FencingToken, Lease, LeaseOptions, StoreUrl};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// Status codes and error objects

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
}

use lease_code::*;

impl lease_code {
    fn name(self) -> &'static CStr {
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
        }
    }

    fn from_int(code: c_int) -> Option<lease_code> {
        const ALL: [lease_code; 14] = [
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
        ];
        ALL.into_iter().find(|c| *c as c_int == code)
    }
}

/// The one mapping of the core's error kinds to C codes.
fn code_of(kind: ErrorKind) -> lease_code {
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
        // ErrorKind is non-exhaustive: a kind added to the core and not yet mapped here.
        _ => LEASE_INTERNAL,
    }
}

/// Details of a failed call: its code and a one-line message (for people; not API).
/// Created by the library, owned by the caller, freed with `lease_error_free`.
pub struct lease_error {
    code: lease_code,
    message: CString,
    epoch: u64,
}

/// Why a call failed, before it becomes a `lease_error`.
struct Failure {
    code: lease_code,
    message: String,
    /// The epoch involved, when known (for `LEASE_FENCED`: the newer holder's).
    epoch: Option<u64>,
}

impl Failure {
    fn new(code: lease_code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            epoch: None,
        }
    }

    fn invalid(message: impl Into<String>) -> Failure {
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

/// A CString from any text: an interior NUL (which C cannot carry) is shown as `\0`.
fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
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
fn call(err: *mut *mut lease_error, body: impl FnOnce() -> Result<(), Failure>) -> lease_code {
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
fn quiet<T: Copy>(neutral: T, body: impl FnOnce() -> Option<T>) -> T {
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

static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_fork_child() {
    // Async-signal-safe: one atomic store.
    FORKED.store(true, Ordering::SeqCst);
}

fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
    });
}

fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

fn check_fork() -> Result<(), Failure> {
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
unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
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
unsafe fn opt_str_arg(p: *const c_char, what: &str) -> Result<Option<String>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { str_arg(p, what) }.map(|s| Some(s.to_string()))
}

/// # Safety
/// `p` is NULL or points to a live `T` for the lifetime `'a`.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

fn out_arg<T>(p: *mut *mut T, what: &str) -> Result<*mut *mut T, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} (the output pointer) is NULL"
        )));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Runtime

/// A tokio runtime shared by the handles made from it: stores and leases keep it alive, so it
/// shuts down when the last of `lease_runtime_free`, `lease_store_free`, `lease_free` runs.
struct Rt {
    runtime: Option<tokio::runtime::Runtime>,
}

fn on_runtime_thread() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

impl Rt {
    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is present until dropped")
    }

    /// Block the calling thread on `f`, refusing to do so on a runtime thread (where tokio
    /// would panic, and where blocking would stall renewals).
    fn block_on<F: Future>(&self, f: F) -> Result<F::Output, Failure> {
        if on_runtime_thread() {
            return Err(Failure::invalid(
                "a blocking liblease call was made from a runtime thread (inside a lost \
                 callback?): call it from another thread",
            ));
        }
        Ok(self.runtime().block_on(f))
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if forked() {
            // Its threads do not exist in this process: joining them would hang.
            std::mem::forget(runtime);
        } else if on_runtime_thread() {
            // The last handle was freed from a runtime thread (in a lost callback): a
            // runtime cannot wait for its own threads.
            runtime.shutdown_background();
        } else {
            drop(runtime);
        }
    }
}

/// A runtime: the threads that renew leases and run store requests. One per process is
/// usual; every store and lease made from it keeps it alive.
pub struct lease_runtime {
    rt: Arc<Rt>,
}

/// Options of `lease_runtime_new`. Start from `lease_runtime_options_default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lease_runtime_options {
    /// Worker threads (renewals and store requests run there; blocking calls run on the
    /// caller's thread). 0 means the default, 2.
    pub worker_threads: u32,
    /// Shown in lease records as `lease VERSION (NAME)`, so people see which language holds a
    /// lease. NULL means "c". The first runtime created in the process sets it.
    pub client_name: *const c_char,
}

/// The default runtime options: 2 worker threads, client name "c".
#[no_mangle]
pub extern "C" fn lease_runtime_options_default() -> lease_runtime_options {
    lease_runtime_options {
        worker_threads: 0,
        client_name: std::ptr::null(),
    }
}

/// Create a runtime. `opts` may be NULL for the defaults.
///
/// On success writes a new runtime to `*out` (free it with `lease_runtime_free`) and returns
/// `LEASE_OK`; on failure writes an error to `*err` (when `err` is not NULL) and leaves `*out`
/// untouched.
///
/// # Safety
/// `opts` is NULL or points to a valid `lease_runtime_options` whose `client_name` is NULL or a
/// NUL-terminated string; `out` points to writable storage for a pointer; `err` is NULL or
/// points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_runtime_new(
    opts: *const lease_runtime_options,
    out: *mut *mut lease_runtime,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        let out = out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let opts = unsafe { opts.as_ref() }
            .copied()
            .unwrap_or_else(|| lease_runtime_options_default());
        // SAFETY: the caller's contract.
        let name = unsafe { opt_str_arg(opts.client_name, "client_name") }?;
        let name = name.as_deref().unwrap_or("c");
        if name.is_empty() || name.len() > 32 || !name.chars().all(|c| c.is_ascii_graphic()) {
            return Err(Failure::invalid(format!(
                "client_name {name:?} must be 1 to 32 printable ASCII characters"
            )));
        }
        let threads = match opts.worker_threads {
            0 => 2,
            n @ 1..=256 => n as usize,
            n => {
                return Err(Failure::invalid(format!(
                    "worker_threads {n} is out of range: use 1 to 256 (0 for the default)"
                )))
            }
        };
        watch_forks();
        lease_core::set_client_name(name);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("lease-rt")
            .enable_all()
            .build()
            .map_err(|e| Failure::new(LEASE_INTERNAL, format!("cannot start a runtime: {e}")))?;
        let rt = Box::new(lease_runtime {
            rt: Arc::new(Rt {
                runtime: Some(runtime),
            }),
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(rt) };
        Ok(())
    })
}

/// Free a runtime handle. Stores and leases made from it keep the runtime running until they
/// are freed too; the runtime shuts down (joining its threads) when the last one goes.
/// NULL is a no-op.
///
/// # Safety
/// `rt` is NULL or a runtime from `lease_runtime_new`, not freed before and not in use by
/// another thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn lease_runtime_free(rt: *mut lease_runtime) {
    free_box(rt);
}

/// Drop a boxed handle, or leak it in a forked child (whose copy of the library's threads and
/// locks cannot be trusted).
fn free_box<T>(p: *mut T) {
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

// ---------------------------------------------------------------------------------------------
// Stores

/// An open store (`s3://bucket?…`, `file:///dir`, `memory://namespace`): leases are acquired by
/// name in it. Thread-safe.
pub struct lease_store {
    rt: Arc<Rt>,
    client: Client,
}

/// The process's client of the store (the core's registry), so what a client learns about
/// keys (the version it released, the highest epoch) is shared by every handle.
fn client_for(url: &StoreUrl) -> Result<Client, lease_core::Error> {
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
/// `acquired_at`, `renewed_at`, `detail`. `state` is `free` (no record), `held`, `released`,
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

// ---------------------------------------------------------------------------------------------
// Cancellation

/// Cancels a waiting `lease_acquire` from another thread. One-shot: once cancelled it stays
/// cancelled; make a new one for the next acquire. Thread-safe.
pub struct lease_cancel_token {
    token: CancellationToken,
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

// ---------------------------------------------------------------------------------------------
// Acquiring

/// How a lease is acquired and held. Start from `lease_options_default()`; strings are
/// borrowed for the duration of the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lease_options {
    /// How long the lease lasts without renewal, in ms (100 ms to 24 h; default 30 000). The
    /// holder renews every ttl/3 in the background.
    pub ttl_ms: u64,
    /// How long to wait for a lease held by someone else, in ms: -1 waits forever (the
    /// default), 0 tries once (`LEASE_HELD` if held), more waits at most that long
    /// (`LEASE_TIMEOUT`).
    pub wait_ms: i64,
    /// A label for people (shown by `status`), at most 256 bytes, or NULL.
    pub label: *const c_char,
    /// A small payload stored in the record (at most 16 KiB), e.g. the leader's address, or NULL.
    pub data: *const c_char,
    /// How often a waiter re-reads the record, in ms; 0 means the default (ttl/10 within
    /// 50 ms to 2 s).
    pub poll_interval_ms: u64,
    /// Cancels the wait from another thread when cancelled, or NULL. Must stay alive until
    /// `lease_acquire` returns.
    pub cancel: *const lease_cancel_token,
}

/// The default options: ttl 30 s, wait forever, no label, no data, default poll, no cancel.
#[no_mangle]
pub extern "C" fn lease_options_default() -> lease_options {
    lease_options {
        ttl_ms: 30_000,
        wait_ms: -1,
        label: std::ptr::null(),
        data: std::ptr::null(),
        poll_interval_ms: 0,
        cancel: std::ptr::null(),
    }
}

/// # Safety
/// `opts` is NULL or a valid `lease_options` whose pointers are NULL or valid.
unsafe fn convert_options(
    opts: *const lease_options,
) -> Result<(LeaseOptions, Option<CancellationToken>), Failure> {
    // SAFETY: the caller's contract.
    let o = unsafe { opts.as_ref() }
        .copied()
        .unwrap_or_else(|| lease_options_default());
    let mut lo = LeaseOptions::new(Duration::from_millis(o.ttl_ms));
    lo = match o.wait_ms {
        -1 => lo.wait_forever(),
        w if w >= 0 => lo.wait(Duration::from_millis(w as u64)),
        w => {
            return Err(Failure::invalid(format!(
                "wait_ms {w} is invalid: use -1 (forever), 0 (try once) or a number of ms"
            )))
        }
    };
    // SAFETY: the caller's contract.
    if let Some(label) = unsafe { opt_str_arg(o.label, "label") }? {
        lo = lo.label(label);
    }
    // SAFETY: the caller's contract.
    if let Some(data) = unsafe { opt_str_arg(o.data, "data") }? {
        lo = lo.data(data);
    }
    if o.poll_interval_ms > 0 {
        lo = lo.poll_interval(Duration::from_millis(o.poll_interval_ms));
    }
    // SAFETY: the caller's contract.
    let cancel = unsafe { o.cancel.as_ref() }.map(|t| t.token.clone());
    Ok((lo, cancel))
}

/// A held lease. Renewed in the background on the runtime until released, lost or freed.
/// Thread-safe: any thread may read it, release it, or register callbacks.
pub struct lease {
    rt: Arc<Rt>,
    held: Lease,
    callbacks: Mutex<Vec<Arc<Callback>>>,
}

/// Acquire the lease `name` in `store`, waiting as `opts->wait_ms` says. `opts` may be NULL
/// for the defaults. Blocks the calling thread.
///
/// On success writes the held lease to `*out` (release it with `lease_release`, free it with
/// `lease_free`). On failure returns `LEASE_HELD` (try once, held elsewhere), `LEASE_TIMEOUT`,
/// `LEASE_CANCELLED`, `LEASE_INVALID` (bad name or options), `LEASE_UNAVAILABLE`, `LEASE_STORE`,
/// … and writes an error to `*err` when `err` is not NULL.
///
/// # Safety
/// `store` is NULL or a live store; `name` is NULL or a NUL-terminated string; `opts` is NULL
/// or a valid `lease_options` (its strings NULL or NUL-terminated, its `cancel` NULL or a live
/// token); `out` points to writable storage for a pointer; `err` is NULL or points to writable
/// storage for a pointer. Must not be called from a runtime thread (a lost callback): that
/// returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_acquire(
    store: *const lease_store,
    name: *const c_char,
    opts: *const lease_options,
    out: *mut *mut lease,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let store = unsafe { handle(store, "store") }?;
        // SAFETY: the caller's contract.
        let name = unsafe { str_arg(name, "name") }?;
        let out = out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let (opts, cancel) = unsafe { convert_options(opts) }?;
        let client = &store.client;
        let held = store.rt.block_on(async {
            match &cancel {
                Some(token) => client.acquire_with_cancel(name, &opts, token).await,
                None => client.acquire(name, &opts).await,
            }
        })??;
        let l = Box::new(lease {
            rt: store.rt.clone(),
            held,
            callbacks: Mutex::new(Vec::new()),
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(l) };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// A held lease

/// The fencing epoch: strictly increasing per lease name, unchanged by renewals and release.
/// Hand it to resources that check it. 0 when `l` is NULL. The first epoch of a new lease record
/// is the clock in milliseconds since 1970 (so a record deleted and made again never re-issues
/// an epoch); compare epochs with each other, never with small constants.
///
/// # Safety
/// `l` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn lease_epoch(l: *const lease) -> u64 {
    // SAFETY: the caller's contract.
    quiet(0, || Some(unsafe { l.as_ref() }?.held.epoch()))
}

/// How long, in ms, this holder may still rely on the lease: 0 once it is lost or released
/// (and when `l` is NULL). Check it, or call `lease_ensure_held`, before each step that needs
/// the lease.
///
/// # Safety
/// `l` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn lease_remaining_ms(l: *const lease) -> u64 {
    quiet(0, || {
        // SAFETY: the caller's contract.
        let ms = unsafe { l.as_ref() }?.held.remaining().as_millis();
        Some(u64::try_from(ms).unwrap_or(u64::MAX))
    })
}

/// `LEASE_OK` only if the lease is held for at least `min_remaining_ms` more; otherwise
/// `LEASE_LOST` (lost, released, or too little time left), with an error in `*err` when `err`
/// is not NULL. Call it before each step that needs the lease. Does not block.
///
/// # Safety
/// `l` is NULL or a live lease; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_ensure_held(
    l: *const lease,
    min_remaining_ms: u64,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        l.held
            .ensure_held(Duration::from_millis(min_remaining_ms))
            .map(drop)
            .map_err(Failure::from)
    })
}

/// Called once when a lease is lost: `user_data` as given to `lease_on_lost`, and a one-line
/// reason (borrowed: valid only during the call).
pub type lease_lost_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, reason: *const c_char)>;

/// `user_data` crosses threads: the caller promised it may (see `lease_on_lost`).
struct UserData(*mut c_void);
// SAFETY: the contract of lease_on_lost says user_data may be used from a runtime thread.
unsafe impl Send for UserData {}

enum CallbackState {
    Armed(unsafe extern "C" fn(*mut c_void, *const c_char), UserData),
    Running(ThreadId),
    Done,
}

/// One registered callback: runs at most once, and never after `lease_free` returns.
struct Callback {
    state: Mutex<CallbackState>,
    finished: Condvar,
}

impl Callback {
    fn fire(&self, reason: &CStr) {
        let (f, data) = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match std::mem::replace(
                &mut *st,
                CallbackState::Running(std::thread::current().id()),
            ) {
                CallbackState::Armed(f, data) => (f, data),
                other => {
                    *st = other;
                    return;
                }
            }
        };
        // SAFETY: the caller of lease_on_lost gave a valid function and user_data.
        unsafe { f(data.0, reason.as_ptr()) };
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = CallbackState::Done;
        self.finished.notify_all();
    }

    /// Never run from now on; if running on another thread, wait until it returns.
    fn disarm(&self) {
        let me = std::thread::current().id();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*st {
                CallbackState::Armed(..) => {
                    *st = CallbackState::Done;
                    return;
                }
                CallbackState::Running(t) if *t != me => {
                    st = self.finished.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                _ => return,
            }
        }
    }
}

/// Call `callback(user_data, reason)` once when the lease is lost: from a runtime thread when
/// a renewal finds the lease taken over, broken or deleted, or its deadline passes; at once,
/// on the calling thread, if it is already lost. Never called if the lease is released first,
/// and never called (nor still running) after `lease_free` returns.
///
/// The callback runs on a thread that renews leases: keep it short and never block there. It
/// may call `lease_epoch`, `lease_remaining_ms`, `lease_ensure_held`, `lease_cancel_token_cancel`,
/// `lease_error_*`, and signal the application (an atomic flag, a condition variable, a pipe);
/// it must not call blocking functions (`lease_acquire`, `lease_release`, `lease_status`,
/// `lease_store_open`: they return `LEASE_INVALID` there) and must not unwind (no C++
/// exceptions, no longjmp out of it).
///
/// Returns `LEASE_OK`, or `LEASE_INVALID` if `l` or `callback` is NULL.
///
/// # Safety
/// `l` is NULL or a live lease; `callback` is NULL or a function safe to call from any thread
/// with `user_data`, which must stay valid until the callback has run or `lease_free(l)` has
/// returned.
#[no_mangle]
pub unsafe extern "C" fn lease_on_lost(
    l: *const lease,
    callback: lease_lost_callback,
    user_data: *mut c_void,
) -> lease_code {
    call(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        let f = callback.ok_or_else(|| Failure::invalid("callback is NULL"))?;
        let cb = Arc::new(Callback {
            state: Mutex::new(CallbackState::Armed(f, UserData(user_data))),
            finished: Condvar::new(),
        });
        l.callbacks.lock().unwrap().push(cb.clone());
        let (url, epoch) = (l.held.url().to_string(), l.held.epoch());
        l.held.on_lost(move |reason| {
            cb.fire(&c_string(&format!(
                "{url} (epoch {epoch}) was lost: {reason}"
            )));
        });
        Ok(())
    })
}

/// Release the lease so a waiter can take it at once (it writes `released`, same epoch).
/// Idempotent: releasing a released lease returns `LEASE_OK`. Returns `LEASE_LOST` if the lease
/// was lost before it could be released (whatever was done under it may have overlapped with
/// another holder). Blocks. The handle stays valid: free it with `lease_free`.
///
/// # Safety
/// `l` is NULL or a live lease; `err` is NULL or points to writable storage for a pointer.
/// Must not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_release(l: *const lease, err: *mut *mut lease_error) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        l.rt.block_on(l.held.release())??;
        Ok(())
    })
}

/// Free a lease handle. If the lease is still held it is released first (blocking, as
/// `lease_release`, ignoring the outcome; from a runtime thread, in the background instead).
/// After this returns, no lost callback of this lease runs or is running. NULL is a no-op.
///
/// # Safety
/// `l` is NULL or a lease from `lease_acquire`, not freed before and not in use by another
/// thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn lease_free(l: *mut lease) {
    if l.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let b = unsafe { Box::from_raw(l) };
    if forked() {
        std::mem::forget(b);
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(move || {
        for cb in b.callbacks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            cb.disarm();
        }
        if b.held.is_held() && !on_runtime_thread() {
            let _ = b.rt.block_on(b.held.release());
        }
        drop(b);
    }));
}

// ---------------------------------------------------------------------------------------------
// Fencing the store enforces

/// The fencing token of a lease, `LEASE_URL#EPOCH@HOLDER` (e.g.
/// `s3://bucket/locks/gc#1767225600000@3f2a9c…`): the value to hand to resources that check it
/// (a `lease_gate`, a database, an HTTP API). The holder id tells two holders apart should they
/// ever share an epoch, so that fenced writes and gates never admit both. Parse it with
/// `lease_token_parse_holder` (or `lease_token_parse`). Does not block.
///
/// On success writes a new string to `*token_out` (free it with `lease_string_free`).
///
/// # Safety
/// `l` is NULL or a live lease; `token_out` points to writable storage for a pointer; `err` is
/// NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_token(
    l: *const lease,
    token_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        let out = out_arg(token_out, "token_out")?;
        let token = c_string(&l.held.token().to_string());
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = token.into_raw() };
        Ok(())
    })
}

/// Parse a fencing token, `LEASE_URL#EPOCH@HOLDER` (as `lease_token` writes it, or
/// `$LEASE_TOKEN` of `lease run`) or `LEASE_URL#EPOCH` (a token built by hand). `LEASE_INVALID`
/// if it is neither. The holder is not given: use `lease_token_parse_holder` for it.
///
/// On success writes the lease URL to `*lease_url_out` when that is not NULL (a new string:
/// free it with `lease_string_free`) and the epoch to `*epoch_out` when that is not NULL.
///
/// # Safety
/// `token` is NULL or a NUL-terminated string; `lease_url_out` and `epoch_out` are NULL or
/// point to writable storage; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_token_parse(
    token: *const c_char,
    lease_url_out: *mut *mut c_char,
    epoch_out: *mut u64,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract, passed on.
    unsafe { lease_token_parse_holder(token, lease_url_out, epoch_out, std::ptr::null_mut(), err) }
}

/// Parse a fencing token, `LEASE_URL#EPOCH@HOLDER` or `LEASE_URL#EPOCH`, into its lease URL,
/// epoch and holder id. `LEASE_INVALID` if it is not one.
///
/// On success writes, for each out-parameter that is not NULL: the lease URL to
/// `*lease_url_out` (a new string), the epoch to `*epoch_out`, and the holder id to
/// `*holder_out` (a new string, or NULL when the token names no holder). Free the strings with
/// `lease_string_free`.
///
/// # Safety
/// `token` is NULL or a NUL-terminated string; `lease_url_out`, `epoch_out` and `holder_out`
/// are NULL or point to writable storage; `err` is NULL or points to writable storage for a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_token_parse_holder(
    token: *const c_char,
    lease_url_out: *mut *mut c_char,
    epoch_out: *mut u64,
    holder_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let token: FencingToken = unsafe { str_arg(token, "token") }?.parse()?;
        if !lease_url_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *lease_url_out = c_string(token.lease()).into_raw() };
        }
        if !epoch_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *epoch_out = token.epoch() };
        }
        if !holder_out.is_null() {
            let holder = token
                .holder()
                .map_or(std::ptr::null_mut(), |h| c_string(h).into_raw());
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *holder_out = holder };
        }
        Ok(())
    })
}

/// # Safety
/// `data` is NULL with `len` 0, or valid for reading `len` bytes.
unsafe fn bytes_arg(data: *const u8, len: usize) -> Result<Vec<u8>, Failure> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if data.is_null() {
        return Err(Failure::invalid(format!("data is NULL but len is {len}")));
    }
    // SAFETY: non-NULL, valid for `len` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(data, len) }.to_vec())
}

/// Write `len` bytes at `key` (an object in the lease's store, not the lease record itself)
/// unless a holder of this lease with a higher epoch (or another holder with the same epoch)
/// has written it: then `LEASE_FENCED`, and `lease_error_epoch` gives that holder's epoch. The
/// object is stamped with this lease, epoch and holder (S3 user metadata; the file store's
/// metadata), and written with a conditional write after checking the stored stamp, so once a
/// writer with epoch E has written it no writer with a lower epoch can change it, whatever the
/// pauses and clocks. Costs 1 read + 1 conditional write, or 1 conditional write when this
/// holder wrote the object last. Blocks.
///
/// Not a read-modify-write: a writer of this epoch or a lower one may have written since the
/// caller's `lease_fenced_get`, and its update is then overwritten. Use `lease_fenced_put_if`
/// for that. A write that landed is never reported `LEASE_FENCED`; when its outcome cannot be
/// told the call returns `LEASE_UNAVAILABLE`.
///
/// It does not consult the holder's own deadline (that is `lease_ensure_held`'s job): the store's
/// check is what still holds when the holder was paused after `lease_ensure_held`.
///
/// On success writes the object's new version (its ETag) to `*version_out` when that is not
/// NULL (free it with `lease_string_free`); it is empty when the write landed but a newer write
/// replaced it before this call learned its version.
///
/// # Safety
/// `l` is NULL or a live lease; `key` is NULL or a NUL-terminated string; `data` is valid for
/// `len` bytes (NULL only when `len` is 0); `version_out` is NULL or points to writable storage
/// for a pointer; `err` is NULL or points to writable storage for a pointer. Must not be called
/// from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_fenced_put(
    l: *const lease,
    key: *const c_char,
    data: *const u8,
    len: usize,
    version_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        // SAFETY: the caller's contract.
        let key = unsafe { str_arg(key, "key") }?;
        // SAFETY: the caller's contract.
        let bytes = unsafe { bytes_arg(data, len) }?;
        let version = l.rt.block_on(l.held.fenced_put(key, bytes))??;
        if !version_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *version_out = c_string(&version.etag).into_raw() };
        }
        Ok(())
    })
}

/// Write `len` bytes at `key`, as `lease_fenced_put`, but only if the object is still at the
/// version `if_version` (as `lease_object_version` or an earlier fenced put gave it), or still
/// absent when `if_version` is NULL or empty: a read-modify-write that loses no update. If the
/// object changed since, nothing is written and the call returns `LEASE_CONFLICT` when a writer
/// of this epoch or a lower one changed it (read it again with `lease_fenced_get`, decide
/// again, and retry), or `LEASE_FENCED` when a holder with a higher epoch wrote it (stop: a
/// newer holder exists; `lease_error_epoch` gives its epoch). `lease_fenced_get` followed by a
/// plain `lease_fenced_put` is not atomic: another writer may write in between, and its
/// update is then lost. Blocks.
///
/// A fenced put whose outcome could not be told (the store failed and the object changed
/// since) returns `LEASE_UNAVAILABLE`: read the object again before deciding. A write that
/// landed is never reported as `LEASE_FENCED` or `LEASE_CONFLICT`.
///
/// On success writes the object's new version to `*version_out` when that is not NULL (free
/// it with `lease_string_free`); it is empty when the write landed but a newer write replaced
/// it before this call learned its version.
///
/// # Safety
/// `l` is NULL or a live lease; `key` is NULL or a NUL-terminated string; `data` is valid for
/// `len` bytes (NULL only when `len` is 0); `if_version` is NULL or a NUL-terminated string;
/// `version_out` is NULL or points to writable storage for a pointer; `err` is NULL or points
/// to writable storage for a pointer. Must not be called from a runtime thread (a lost
/// callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_fenced_put_if(
    l: *const lease,
    key: *const c_char,
    data: *const u8,
    len: usize,
    if_version: *const c_char,
    version_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        // SAFETY: the caller's contract.
        let key = unsafe { str_arg(key, "key") }?;
        // SAFETY: the caller's contract.
        let bytes = unsafe { bytes_arg(data, len) }?;
        // SAFETY: the caller's contract.
        let expected = unsafe { opt_str_arg(if_version, "if_version") }?
            .filter(|v| !v.is_empty())
            .map(Version::etag);
        let version =
            l.rt.block_on(l.held.fenced_put_if(key, bytes, expected.as_ref()))??;
        if !version_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *version_out = c_string(&version.etag).into_raw() };
        }
        Ok(())
    })
}

/// Delete `key` unless a holder of this lease with a higher epoch has written it (then
/// `LEASE_FENCED`). Needs a store with conditional deletes: the file and memory stores, and S3
/// where the URL says `conditional_delete=true` (AWS S3 honours `If-Match` on DeleteObject; some
/// S3-compatible servers ignore it); elsewhere it returns `LEASE_STORE` and deletes nothing. A
/// deleted key carries no fence any more: where that matters, write an empty value with
/// `lease_fenced_put` instead. Blocks.
///
/// On success writes to `*deleted_out` (when not NULL) 1 if an object was deleted, 0 if there
/// was none.
///
/// # Safety
/// `l` is NULL or a live lease; `key` is NULL or a NUL-terminated string; `deleted_out` is NULL
/// or points to a writable int; `err` is NULL or points to writable storage for a pointer. Must
/// not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_fenced_delete(
    l: *const lease,
    key: *const c_char,
    deleted_out: *mut c_int,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        // SAFETY: the caller's contract.
        let key = unsafe { str_arg(key, "key") }?;
        let deleted = l.rt.block_on(l.held.fenced_delete(key))??;
        if !deleted_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *deleted_out = c_int::from(deleted) };
        }
        Ok(())
    })
}

/// An object read by `lease_fenced_get`: its bytes, its version, and the lease, epoch and holder
/// of the fenced write that wrote it. Immutable; thread-safe. Free it with `lease_object_free`.
pub struct lease_object {
    data: Vec<u8>,
    epoch: u64,
    lease: Option<CString>,
    holder: Option<CString>,
    version: CString,
}

/// Read the object at `key` in `store` with the stamp of the fenced write that wrote it. Needs
/// only read permission. Blocks.
///
/// On success writes to `*out` a new object (free it with `lease_object_free`), or NULL when
/// there is no object at `key`.
///
/// # Safety
/// `store` is NULL or a live store; `key` is NULL or a NUL-terminated string; `out` points to
/// writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
/// Must not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_fenced_get(
    store: *const lease_store,
    key: *const c_char,
    out: *mut *mut lease_object,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let store = unsafe { handle(store, "store") }?;
        // SAFETY: the caller's contract.
        let key = unsafe { str_arg(key, "key") }?;
        let out = out_arg(out, "out")?;
        let obj = store.rt.block_on(store.client.fenced_get(key))??;
        let obj = obj.map(|o| {
            Box::into_raw(Box::new(lease_object {
                data: o.bytes.to_vec(),
                epoch: o.epoch.unwrap_or(0),
                lease: o.lease.as_deref().map(c_string),
                holder: o.holder.as_deref().map(c_string),
                version: c_string(&o.version.etag),
            }))
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = obj.unwrap_or(std::ptr::null_mut()) };
        Ok(())
    })
}

/// The bytes of an object; their number is written to `*len_out` (when not NULL). Borrowed:
/// valid until `lease_object_free(o)`. NULL (and length 0) when `o` is NULL; an empty object
/// gives a non-NULL pointer and length 0.
///
/// # Safety
/// `o` is NULL or a live object; `len_out` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn lease_object_data(
    o: *const lease_object,
    len_out: *mut usize,
) -> *const u8 {
    // SAFETY: the caller's contract.
    let o = unsafe { o.as_ref() };
    if !len_out.is_null() {
        // SAFETY: non-NULL; the caller's contract.
        unsafe { *len_out = o.map_or(0, |o| o.data.len()) };
    }
    o.map_or(std::ptr::null(), |o| o.data.as_ptr())
}

/// The epoch of the fenced write that wrote the object; 0 if it was not written by a fenced
/// write (or `o` is NULL).
///
/// # Safety
/// `o` is NULL or a live object.
#[no_mangle]
pub unsafe extern "C" fn lease_object_epoch(o: *const lease_object) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { o.as_ref() }.map_or(0, |o| o.epoch)
}

/// The lease (URL) whose holder wrote the object; NULL if it was not written by a fenced write
/// (or `o` is NULL). Borrowed: valid until `lease_object_free(o)`.
///
/// # Safety
/// `o` is NULL or a live object.
#[no_mangle]
pub unsafe extern "C" fn lease_object_lease(o: *const lease_object) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { o.as_ref() }
        .and_then(|o| o.lease.as_ref())
        .map_or(std::ptr::null(), |l| l.as_ptr())
}

/// The object's version (its ETag), as `lease_fenced_put` returned it: pass it to
/// `lease_fenced_put_if` to write only if the object has not changed since this read. Borrowed:
/// valid until `lease_object_free(o)`. An empty string when `o` is NULL (which
/// `lease_fenced_put_if` takes as "must be absent", as it takes NULL).
///
/// # Safety
/// `o` is NULL or a live object.
#[no_mangle]
pub unsafe extern "C" fn lease_object_version(o: *const lease_object) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { o.as_ref() }.map_or(c"".as_ptr(), |o| o.version.as_ptr())
}

/// The holder id of the fenced write that wrote the object (the `HOLDER` of its token); NULL
/// if it was not written by a fenced write, or by an older version that did not record it (or
/// `o` is NULL). Borrowed: valid until `lease_object_free(o)`.
///
/// # Safety
/// `o` is NULL or a live object.
#[no_mangle]
pub unsafe extern "C" fn lease_object_holder(o: *const lease_object) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { o.as_ref() }
        .and_then(|o| o.holder.as_ref())
        .map_or(std::ptr::null(), |h| h.as_ptr())
}

/// Free an object. NULL is a no-op.
///
/// # Safety
/// `o` is NULL or an object from `lease_fenced_get`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn lease_object_free(o: *mut lease_object) {
    if o.is_null() {
        return;
    }
    // SAFETY: the caller's contract. Plain memory: freed in a forked child too.
    drop(unsafe { Box::from_raw(o) });
}

/// A fencing gate: admits or rejects fencing tokens by the highest epoch seen per resource, for
/// resources outside the store (a database row, an HTTP API) that must refuse a zombie holder's
/// requests. In memory it protects one process; kept in a store it is shared by every process
/// that opens the same store and prefix. Thread-safe.
pub struct lease_gate {
    rt: Arc<Rt>,
    gate: FencingGate,
}

/// A gate kept in memory (one process), driven by runtime `rt`.
///
/// On success writes a new gate to `*out` (free it with `lease_gate_free`).
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` points to writable storage for a pointer; `err` is
/// NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_gate_new(
    rt: *const lease_runtime,
    out: *mut *mut lease_gate,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let rt = unsafe { handle(rt, "runtime") }?;
        let out = out_arg(out, "out")?;
        let g = Box::new(lease_gate {
            rt: rt.rt.clone(),
            gate: FencingGate::in_memory(),
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(g) };
        Ok(())
    })
}

/// A gate kept in `store`: one small object per resource under `prefix` (`PREFIX/RESOURCE`),
/// changed only by conditional writes, so a fleet of stateless services can share it. Does not
/// contact the store.
///
/// On success writes a new gate to `*out` (free it with `lease_gate_free`).
///
/// # Safety
/// `store` is NULL or a live store; `prefix` is NULL or a NUL-terminated string; `out` points
/// to writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_gate_open(
    store: *const lease_store,
    prefix: *const c_char,
    out: *mut *mut lease_gate,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let store = unsafe { handle(store, "store") }?;
        // SAFETY: the caller's contract.
        let prefix = unsafe { str_arg(prefix, "prefix") }?;
        let out = out_arg(out, "out")?;
        let gate = FencingGate::in_store(store.client.store().clone(), prefix)?;
        let g = Box::new(lease_gate {
            rt: store.rt.clone(),
            gate,
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(g) };
        Ok(())
    })
}

/// Admit the fencing token `token` (`LEASE_URL#EPOCH@HOLDER`, or `LEASE_URL#EPOCH`) for
/// `resource` if its epoch is above the highest admitted so far for that resource, or equal to
/// it and of the same holder (and remember it): `LEASE_OK`. Otherwise `LEASE_FENCED`
/// (`lease_error_epoch` gives the highest epoch seen): two holders are never both admitted with
/// one epoch, and a token of another lease than the one that guards the resource is refused
/// too. (A token without a holder cannot be told apart from another holder's.) `LEASE_INVALID` for a malformed token
/// or resource. Blocks (a store-backed gate reads and writes its object).
///
/// # Safety
/// `gate` is NULL or a live gate; `resource` and `token` are NULL or NUL-terminated strings;
/// `err` is NULL or points to writable storage for a pointer. Must not be called from a runtime
/// thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_gate_admit(
    gate: *const lease_gate,
    resource: *const c_char,
    token: *const c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let gate = unsafe { handle(gate, "gate") }?;
        // SAFETY: the caller's contract.
        let resource = unsafe { str_arg(resource, "resource") }?;
        // SAFETY: the caller's contract.
        let token: FencingToken = unsafe { str_arg(token, "token") }?.parse()?;
        gate.rt.block_on(gate.gate.admit(resource, &token))??;
        Ok(())
    })
}

/// Free a gate. NULL is a no-op.
///
/// # Safety
/// `gate` is NULL or a gate from `lease_gate_new` or `lease_gate_open`, not freed before and
/// not in use by another thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn lease_gate_free(gate: *mut lease_gate) {
    free_box(gate);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_its_own_code() {
        let kinds = [
            (ErrorKind::Held, LEASE_HELD),
            (ErrorKind::Timeout, LEASE_TIMEOUT),
            (ErrorKind::Cancelled, LEASE_CANCELLED),
            (ErrorKind::Lost, LEASE_LOST),
            (ErrorKind::Fenced, LEASE_FENCED),
            (ErrorKind::Conflict, LEASE_CONFLICT),
            (ErrorKind::Unavailable, LEASE_UNAVAILABLE),
            (ErrorKind::Invalid, LEASE_INVALID),
            (ErrorKind::Store, LEASE_STORE),
            (ErrorKind::Corrupt, LEASE_CORRUPT),
            (ErrorKind::Internal, LEASE_INTERNAL),
        ];
        assert_eq!(kinds.len(), ErrorKind::ALL.len(), "a kind without a code");
        for (kind, code) in kinds {
            assert_eq!(code_of(kind), code, "{kind}");
        }
        // Every kind the core has (not only those listed above) has a code of its own, whose
        // C name ends with the core's stable name of the kind.
        for kind in ErrorKind::ALL {
            let name = code_of(kind).name().to_str().unwrap().to_ascii_lowercase();
            assert_eq!(
                name,
                format!("lease_{}", kind.as_str()),
                "{kind} has no code"
            );
        }
        // The numbers are fixed, never renumbered nor reused; new codes come after the last.
        let fixed = [
            (LEASE_OK, 0),
            (LEASE_HELD, 1),
            (LEASE_TIMEOUT, 2),
            (LEASE_CANCELLED, 3),
            (LEASE_LOST, 4),
            (LEASE_FENCED, 5),
            (LEASE_UNAVAILABLE, 6),
            (LEASE_INVALID, 7),
            (LEASE_STORE, 8),
            (LEASE_CORRUPT, 9),
            (LEASE_INTERNAL, 10),
            (LEASE_PANIC, 11),
            (LEASE_FORKED, 12),
            (LEASE_CONFLICT, 13),
        ];
        for (code, n) in fixed {
            assert_eq!(code as c_int, n, "{:?}", code.name());
            assert_eq!(lease_code::from_int(n), Some(code));
        }
        assert!(lease_code::from_int(14).is_none());
        assert!(lease_code::from_int(-1).is_none());
    }

    #[test]
    fn a_panic_becomes_lease_panic_with_a_message() {
        let mut err: *mut lease_error = std::ptr::null_mut();
        let code = call(&mut err, || panic!("boom"));
        assert_eq!(code, LEASE_PANIC);
        // SAFETY: err was just written by `call`.
        unsafe {
            assert_eq!(lease_error_kind(err), LEASE_PANIC);
            let msg = CStr::from_ptr(lease_error_message(err)).to_str().unwrap();
            assert!(msg.contains("boom"), "{msg}");
            lease_error_free(err);
        }
    }
}
