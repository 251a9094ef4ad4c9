//! `lease_options`, `lease_acquire` and the held `lease`: epoch, time left, the lost
//! callback, release.

use lease_core::{Lease, LeaseOptions, Mode, Scope};
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::{boundary::*, cancel::*, error::*, runtime::*, store::*};

/// How a lease is acquired and held. Start from `lease_options_default()`; strings are
/// borrowed for the duration of the call. The struct grows at its end as options are added;
/// `struct_size` lets a program built against an older header keep working with a newer
/// liblease (docs/ffi.md, "Options").
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lease_options {
    /// `sizeof(lease_options)` as the program was compiled: set by `lease_options_default()`;
    /// leave it. 0 (a struct not started from the default) is `LEASE_INVALID`.
    pub struct_size: usize,
    /// How long the lease lasts without renewal, in ms (100 ms to 24 h; default 30 000). The
    /// holder renews every ttl/3 in the background.
    pub ttl_ms: u64,
    /// How long to wait for the lease, in ms: -1 waits as long as a holder keeps it (the
    /// default), 0 tries once (`LEASE_HELD` if held), more waits at most that long
    /// (`LEASE_TIMEOUT`; `LEASE_UNAVAILABLE` when the store did not answer). A store that has
    /// not answered for the ttl (at least 10 s) ends any wait with `LEASE_UNAVAILABLE`.
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
    /// Queued locks (docs/protocol.md §10), granted in arrival order among conflicting
    /// requests. Non-zero: a shared holder (a reader), beside other shared holders; an
    /// exclusive holder (a writer) holds alone.
    pub shared: i32,
    /// A semaphore of this many permits (1 to 65,536; implies shared), or 0 for none.
    pub permits: u32,
    /// Hold only this path of the lock (`"tables/users"`: it conflicts with the paths above
    /// and under it), or NULL.
    pub scope: *const c_char,
    /// Hold only the bytes `[range_start, range_end)` of one object (overlapping ranges
    /// conflict); `range_end` 0 means no range.
    pub range_start: u64,
    pub range_end: u64,
    /// Non-zero: queue an exclusive request in arrival order (a queued lock) rather than race
    /// for a plain lease. Shared, permits, a scope or a range always queue.
    pub queue: i32,
    /// Priority among waiters that conflict (-1,000,000,000 to 1,000,000,000; default 0, and
    /// non-zero queues): the higher is granted first, arrival order within a priority, and a
    /// waiter is passed over by at most 8 later ones. A holder is never preempted.
    pub priority: i32,
    /// Who in this process asks: acquiring a lease (or a conflicting grant) its own owner
    /// holds fails at once with `LEASE_HELD` instead of waiting for itself (leases are not
    /// re-entrant). NULL: the calling thread (the default); an empty string: nobody, no check
    /// (the Go binding's choice: goroutines move between threads); any other string names an
    /// owner.
    pub owner: *const c_char,
    /// Where this acquire, waiting in a queued lock's queue, can be woken by the write that
    /// grants it (docs/protocol.md §10, "Wake hints"): `"loopback"` (listen on 127.0.0.1: hints
    /// from writers on this host), `"off"` (no address in its queue entry: it learns of its
    /// grant at its next poll), `"route"` (the address this host's default route leaves from,
    /// for writers on other hosts), or the IP address of an interface to listen on
    /// (`"10.0.0.5"`). NULL: the default, `"loopback"`. Anything
    /// else: `LEASE_INVALID`. A hint only makes the waiter read the record sooner; a firewall
    /// that drops it leaves the poll.
    pub wake_hints: *const c_char,
    /// Non-zero: once waiting, ask the holders in this request's way to step aside for it
    /// (docs/protocol.md §10, "Yield on request"): a queued request; the holders'
    /// `lease_on_yield` callbacks are told, with this waiter's id as `by` and `to`, and each
    /// decides when to release. With a try (`lease_try_acquire`, or `wait_ms` 0), which never
    /// waits and so asks nobody: `LEASE_INVALID`. (An `int64_t`, so that the struct has no
    /// padding.)
    pub ask_yield: i64,
    /// With `ask_yield`: why, told to the holders (at most 256 bytes), or NULL. A reason
    /// without `ask_yield`: `LEASE_INVALID`.
    pub yield_reason: *const c_char,
    /// `"every-effect-fenced"`: take a live holder's plain lease at once, with the next epoch,
    /// instead of waiting out its deadline (docs/protocol.md §5, "Preemption for fenced
    /// workloads"), asserting that every effect of every holder of this lease goes through
    /// fenced writes or a fencing gate: the preempted holder goes on believing it holds until
    /// its next renewal (it then loses it, reason `preempted`). NULL or `"never"`: wait (the
    /// default). Any other string, or a queued request with it: `LEASE_INVALID`, saying what the
    /// mode risks.
    pub preempt: *const c_char,
}

/// What a held lease was granted (`lease_grant_mode`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum lease_mode {
    /// A plain lease (not a queued lock), or a NULL handle.
    LEASE_MODE_NONE = 0,
    /// An exclusive grant of a queued lock.
    LEASE_MODE_EXCLUSIVE = 1,
    /// A shared grant of a queued lock (fenced writes refuse it with `LEASE_INVALID`).
    LEASE_MODE_SHARED = 2,
}

/// The default options: ttl 30 s, wait forever, no label, no data, default poll, no cancel,
/// a plain exclusive lease (not shared, no permits, no scope, no range, no queue), the calling
/// thread as owner, wake hints on 127.0.0.1, no yield request, no preemption.
#[no_mangle]
pub extern "C" fn lease_options_default() -> lease_options {
    lease_options {
        struct_size: std::mem::size_of::<lease_options>(),
        ttl_ms: 30_000,
        wait_ms: -1,
        label: std::ptr::null(),
        data: std::ptr::null(),
        poll_interval_ms: 0,
        cancel: std::ptr::null(),
        shared: 0,
        permits: 0,
        scope: std::ptr::null(),
        range_start: 0,
        range_end: 0,
        queue: 0,
        priority: 0,
        owner: std::ptr::null(),
        wake_hints: std::ptr::null(),
        ask_yield: 0,
        yield_reason: std::ptr::null(),
        preempt: std::ptr::null(),
    }
}

/// The size of the first `lease_options` with `struct_size` (up to `wake_hints`, its last
/// field): the smallest a caller may pass. Options added later go after `wake_hints`, and the
/// struct must end with no padding, so that an added field always grows `struct_size` (checked
/// below: update the check to the new last field, never this).
const LEASE_OPTIONS_MIN_SIZE: usize =
    std::mem::offset_of!(lease_options, wake_hints) + std::mem::size_of::<*const c_char>();
const _: () = assert!(
    std::mem::size_of::<lease_options>()
        == std::mem::offset_of!(lease_options, preempt) + std::mem::size_of::<*const c_char>(),
    "lease_options must end without padding: pair a 4-byte option with another, or widen it"
);

/// # Safety
/// `opts` is NULL or a valid `lease_options` whose pointers are NULL or valid.
pub(crate) unsafe fn convert_options(
    opts: *const lease_options,
) -> Result<(LeaseOptions, Option<CancellationToken>), Failure> {
    // SAFETY: the caller's contract.
    let o = unsafe {
        sized_options(
            opts,
            "lease_options",
            lease_options_default(),
            LEASE_OPTIONS_MIN_SIZE,
        )
    }?;
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
    // Before `queue_options`, which checks them with the rest (a reason without `ask_yield`;
    // the core checks the reason's length).
    lo.ask_yield = o.ask_yield != 0;
    // SAFETY: the caller's contract.
    lo.yield_reason = unsafe { opt_str_arg(o.yield_reason, "yield_reason") }?;
    // SAFETY: the caller's contract.
    let scope = unsafe { opt_str_arg(o.scope, "scope") }?;
    lo = queue_options(lo, &o, scope.as_deref())?;
    // SAFETY: the caller's contract.
    lo = match unsafe { opt_str_arg(o.owner, "owner") }? {
        None => lo.owned_by_this_thread(),
        Some(owner) => lo.owner(owner),
    };
    // SAFETY: the caller's contract.
    if let Some(hints) = unsafe { opt_str_arg(o.wake_hints, "wake_hints") }? {
        lo = lo.wake_hints(hints.parse()?);
    }
    // SAFETY: the caller's contract.
    if let Some(preempt) = unsafe { opt_str_arg(o.preempt, "preempt") }? {
        lo = lo.preempt(preempt.parse()?);
    }
    // SAFETY: the caller's contract.
    let cancel = unsafe { o.cancel.as_ref() }.map(|t| t.token.clone());
    Ok((lo, cancel))
}

/// The `ttl_ms` of `opts` (the default's when NULL), read as `convert_options` reads it.
///
/// # Safety
/// As [`convert_options`].
pub(crate) unsafe fn options_ttl_ms(opts: *const lease_options) -> Result<u64, Failure> {
    // SAFETY: the caller's contract.
    let o = unsafe {
        sized_options(
            opts,
            "lease_options",
            lease_options_default(),
            LEASE_OPTIONS_MIN_SIZE,
        )
    }?;
    Ok(o.ttl_ms)
}

/// The queued-lock fields of `o`, checked as the core checks them.
fn queue_options(
    mut lo: LeaseOptions,
    o: &lease_options,
    scope: Option<&str>,
) -> Result<LeaseOptions, Failure> {
    if o.shared != 0 {
        lo = lo.shared();
    }
    if o.permits != 0 {
        lo = lo.permits(o.permits);
    }
    let range = match (o.range_start, o.range_end) {
        (0, 0) => None,
        (start, end) => Some(Scope::range(start, end)?),
    };
    match (scope, range) {
        (Some(_), Some(_)) => {
            return Err(Failure::invalid(
                "give a scope (a path) or a range (bytes), not both: one request covers one scope",
            ))
        }
        (Some(path), None) => lo = lo.scope(Scope::path(path)?),
        (None, Some(r)) => lo = lo.scope(r),
        (None, None) => {}
    }
    if o.queue != 0 {
        lo = lo.queue();
    }
    lo = lo.priority(o.priority);
    lo.check_queue()?;
    Ok(lo)
}

/// A held lease. Renewed in the background on the runtime until released, lost or freed.
/// Thread-safe: any thread may read it, release it, or register callbacks.
pub struct lease {
    pub(crate) rt: Arc<Rt>,
    pub(crate) held: Lease,
    pub(crate) callbacks: Mutex<Vec<Arc<Callback>>>,
    /// `lease_on_health` callbacks, disarmed by `lease_free`.
    pub(crate) health_callbacks: Mutex<Vec<Arc<HealthCallback>>>,
    /// `lease_on_yield` callbacks, disarmed by `lease_free`.
    pub(crate) yield_callbacks: Mutex<Vec<Arc<YieldCallback>>>,
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
            health_callbacks: Mutex::new(Vec::new()),
            yield_callbacks: Mutex::new(Vec::new()),
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

/// What a held queued lock granted: `LEASE_MODE_EXCLUSIVE` or `LEASE_MODE_SHARED`;
/// `LEASE_MODE_NONE` for a plain lease (and when `l` is NULL). The grant's fencing token is
/// `lease_epoch`; its scope and the lock's permits are what the request asked for.
///
/// # Safety
/// `l` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn lease_grant_mode(l: *const lease) -> lease_mode {
    // SAFETY: the caller's contract.
    quiet(lease_mode::LEASE_MODE_NONE, || {
        Some(match unsafe { l.as_ref() }?.held.grant()?.mode {
            Mode::Exclusive => lease_mode::LEASE_MODE_EXCLUSIVE,
            Mode::Shared => lease_mode::LEASE_MODE_SHARED,
        })
    })
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
pub(crate) struct UserData(*mut c_void);

// SAFETY: the contract of lease_on_lost says user_data may be used from a runtime thread.
unsafe impl Send for UserData {}

pub(crate) enum CallbackState {
    Armed(unsafe extern "C" fn(*mut c_void, *const c_char), UserData),
    Running(ThreadId),
    Done,
}

/// One registered callback: runs at most once, and never after `lease_free` returns.
pub(crate) struct Callback {
    pub(crate) state: Mutex<CallbackState>,
    pub(crate) finished: Condvar,
}

impl Callback {
    pub(crate) fn fire(&self, reason: &CStr) {
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
    pub(crate) fn disarm(&self) {
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

/// Called once per yield request that names the lease's grant (`lease_on_yield`): `user_data`
/// as given, who asks, the waiter's id to hand over to (NULL when none was named) and the
/// reason (NULL when none), all borrowed: valid only during the call.
pub type lease_yield_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        by: *const c_char,
        to: *const c_char,
        reason: *const c_char,
    ),
>;

type YieldFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, *const c_char);

/// One `lease_on_yield` registration: called once per request until disarmed, never after
/// `lease_free` returns. The lock is held during a call, so disarming waits for a call in
/// progress.
pub(crate) struct YieldCallback {
    armed: Mutex<Option<(YieldFn, UserData)>>,
}

impl YieldCallback {
    fn call(&self, y: &lease_core::YieldRequested) {
        let armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        let Some((f, data)) = armed.as_ref() else {
            return;
        };
        let by = c_string(&y.by);
        let to = y.to.as_deref().map(c_string);
        let reason = y.reason.as_deref().map(c_string);
        let ptr =
            |s: &Option<std::ffi::CString>| s.as_deref().map_or(std::ptr::null(), CStr::as_ptr);
        // SAFETY: the caller of lease_on_yield gave a valid function and user_data.
        unsafe { f(data.0, by.as_ptr(), ptr(&to), ptr(&reason)) };
    }

    fn disarm(&self) {
        *self.armed.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Call `callback(user_data, by, to, reason)` once per yield request that names this lease's
/// grant (docs/protocol.md §10, "Yield on request"; asked with `lease_ask_yield` or `lease
/// yield`), from a runtime thread, as the holder learns it: at its next renewal, or at once
/// through a wake hint; at once (from a runtime thread) if one already named it. It is not a
/// loss: the lease stays held until released. Never called (nor still running) after
/// `lease_free` returns. The rules of `lease_on_lost` hold for the callback: keep it short,
/// never block there, call no blocking function, never unwind.
///
/// Returns `LEASE_OK`, or `LEASE_INVALID` if `l` or `callback` is NULL.
///
/// # Safety
/// `l` is NULL or a live lease; `callback` is NULL or a function safe to call from any thread
/// with `user_data`, which must stay valid until `lease_free(l)` has returned.
#[no_mangle]
pub unsafe extern "C" fn lease_on_yield(
    l: *const lease,
    callback: lease_yield_callback,
    user_data: *mut c_void,
) -> lease_code {
    call(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        let f = callback.ok_or_else(|| Failure::invalid("callback is NULL"))?;
        let cb = Arc::new(YieldCallback {
            armed: Mutex::new(Some((f, UserData(user_data)))),
        });
        l.yield_callbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(cb.clone());
        l.held.on_yield(move |y| cb.call(y));
        Ok(())
    })
}

/// Ask the holders of the queued lock `name` in `store` to step aside (docs/protocol.md §10,
/// "Yield on request"): those in the way of the waiter `to` (its id, or an unambiguous prefix of
/// it), or every holder when `to` is NULL. `by` says who asks (NULL: `user@host` of this
/// process); `reason` is NULL or why. Each holder asked learns it once (`lease_on_yield`) and
/// keeps the lease until it releases. On success writes to `*asked` (when not NULL) how many
/// grants the request now names: 0 when nobody holds anything in `to`'s way. `LEASE_INVALID`
/// for a plain lease (not a queued lock), an unknown or ambiguous `to`, or a `by`/`reason` out
/// of bounds. Blocks.
///
/// # Safety
/// `store` is NULL or a live store; `name` is NULL or a NUL-terminated string; `to`, `reason`
/// and `by` are NULL or NUL-terminated strings; `asked` is NULL or points to writable storage
/// for a `size_t`; `err` is NULL or points to writable storage for a pointer. Must not be called
/// from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_ask_yield(
    store: *const lease_store,
    name: *const c_char,
    to: *const c_char,
    reason: *const c_char,
    by: *const c_char,
    asked: *mut usize,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let store = unsafe { handle(store, "store") }?;
        // SAFETY: the caller's contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: the caller's contract.
        let (to, reason, by) = unsafe {
            (
                opt_str_arg(to, "to")?,
                opt_str_arg(reason, "reason")?,
                opt_str_arg(by, "by")?,
            )
        };
        let ask = lease_core::YieldAsk {
            by: by.unwrap_or_else(lease_core::asker_name),
            to,
            reason,
        };
        let request = store.rt.block_on(store.client.ask_yield(name, ask))??;
        if !asked.is_null() {
            // SAFETY: checked non-NULL; the caller's contract.
            unsafe { *asked = request.map_or(0, |r| r.tokens.len()) };
        }
        Ok(())
    })
}

/// Change the lease's ttl to `ttl_ms` (100 ms to 24 h): a renewal made at once writes it, and
/// the renewals after it follow it (at the same fraction of the ttl: ttl/3). Waiters go by the
/// record's ttl; while a shorter ttl's write may land, this holder believes no longer than its
/// send + the shorter ttl. On success writes the milliseconds left to `*remaining_ms` (when not
/// NULL). `LEASE_INVALID` (out of range; a queued lock's grant keeps its ttl), `LEASE_LOST`.
/// Blocks.
///
/// # Safety
/// `l` is NULL or a live lease; `remaining_ms` is NULL or points to writable storage for a
/// `uint64_t`; `err` is NULL or points to writable storage for a pointer. Must not be called
/// from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_set_ttl(
    l: *const lease,
    ttl_ms: u64,
    remaining_ms: *mut u64,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        let left =
            l.rt.block_on(l.held.set_ttl(Duration::from_millis(ttl_ms)))??;
        if !remaining_ms.is_null() {
            // SAFETY: checked non-NULL; the caller's contract.
            unsafe { *remaining_ms = left.as_millis() as u64 };
        }
        Ok(())
    })
}

/// Change the data stored in the lease's record to `data` (at most 16 KiB; NULL removes it): a
/// renewal made at once writes it. On success writes the milliseconds left to `*remaining_ms`
/// (when not NULL). `LEASE_INVALID`, `LEASE_LOST`. Blocks.
///
/// # Safety
/// `l` is NULL or a live lease; `data` is NULL or a NUL-terminated string; `remaining_ms` is
/// NULL or points to writable storage for a `uint64_t`; `err` is NULL or points to writable
/// storage for a pointer. Must not be called from a runtime thread (a lost callback): that
/// returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_set_data(
    l: *const lease,
    data: *const c_char,
    remaining_ms: *mut u64,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        // SAFETY: the caller's contract.
        let data = unsafe { opt_str_arg(data, "data") }?;
        let left = l.rt.block_on(l.held.set_data(data.as_deref()))??;
        if !remaining_ms.is_null() {
            // SAFETY: checked non-NULL; the caller's contract.
            unsafe { *remaining_ms = left.as_millis() as u64 };
        }
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
        for cb in b
            .health_callbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            cb.disarm();
        }
        for cb in b
            .yield_callbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            cb.disarm();
        }
        if b.held.is_held() && !on_runtime_thread() {
            let _ = b.rt.block_on(b.held.release());
        }
        drop(b);
    }));
}

/// A held lease's health (docs/protocol.md §4).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum lease_health {
    /// Renewals are landing.
    LEASE_HEALTH_HEALTHY = 0,
    /// A renewal failed or is slow; the deadline is still far.
    LEASE_HEALTH_LATE = 1,
    /// No renewal landed and the deadline is near: act only through fenced writes.
    LEASE_HEALTH_UNKNOWN = 2,
    /// No longer held: lost, expired or released.
    LEASE_HEALTH_LOST = 3,
}

impl From<lease_core::Health> for lease_health {
    fn from(h: lease_core::Health) -> Self {
        match h {
            lease_core::Health::Healthy => lease_health::LEASE_HEALTH_HEALTHY,
            lease_core::Health::Late => lease_health::LEASE_HEALTH_LATE,
            lease_core::Health::Unknown => lease_health::LEASE_HEALTH_UNKNOWN,
            lease_core::Health::Lost => lease_health::LEASE_HEALTH_LOST,
        }
    }
}

type HealthFn = unsafe extern "C" fn(*mut c_void, lease_health, u64, *const c_char);

/// One `lease_on_health` registration: called until disarmed, never after `lease_free`
/// returns. The lock is held during a call, so disarming waits for a call in progress.
pub(crate) struct HealthCallback {
    armed: Mutex<Option<(HealthFn, UserData)>>,
}

impl HealthCallback {
    pub(crate) fn new(f: HealthFn, user_data: *mut c_void) -> HealthCallback {
        HealthCallback {
            armed: Mutex::new(Some((f, UserData(user_data)))),
        }
    }

    pub(crate) fn call(&self, e: &lease_core::HealthEvent) {
        let armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        let Some((f, data)) = armed.as_ref() else {
            return;
        };
        let reason = e.reason.as_ref().map(|r| c_string(r.kind()));
        let reason_ptr = reason.as_deref().map_or(std::ptr::null(), CStr::as_ptr);
        let remaining = e.remaining.as_millis().min(u64::MAX as u128) as u64;
        // SAFETY: the caller of lease_on_health gave a valid function and user_data.
        unsafe { f(data.0, e.health.into(), remaining, reason_ptr) };
    }

    pub(crate) fn disarm(&self) {
        *self.armed.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
