//! Shared sessions (docs/protocol.md §10, "Shared sessions: one heartbeat for many grants",
//! issue 24): `lease_session_open` opens one `SharedSession` of the core on a store, and
//! `lease_session_acquire` takes queued-lock grants through it (`lease_shared_grant`), all kept
//! by the session's one renewal task and one confirmation task, however many they are.
//!
//! As `held.rs` does for a `lease`: opaque handles, blocking calls on the store's runtime,
//! options in a sized struct, cancellation through `lease_options.cancel`, errors mapped once
//! (`error.rs`), and a forked child never touches its parent's session or grants (they are
//! leaked there). The API and its behaviour are those of the Python binding's
//! (`python/src/session.rs`).

use lease_core::{Client, LeaseUrl, SessionOptions, SharedGrant, SharedSession, StoreUrl};
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::{boundary::*, error::*, held::*, runtime::*, store::*};

/// How a shared session is opened. Start from `lease_session_options_default()`; strings are
/// borrowed for the duration of the call. The struct grows at its end as options are added
/// (docs/ffi.md, "Options").
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lease_session_options {
    /// `sizeof(lease_session_options)` as the program was compiled: set by
    /// `lease_session_options_default()`; leave it. 0 is `LEASE_INVALID`.
    pub struct_size: usize,
    /// The session's ttl in ms (100 ms to 24 h; default 30 000), which every grant held
    /// through it has: the session renews every ttl/3; once its process is gone, others remove
    /// its grants ttl + grace after its last renewal.
    pub ttl_ms: u64,
    /// A label for people (shown by `status`), at most 256 bytes, or NULL.
    pub label: *const c_char,
    /// Where its record goes: `PREFIX.lease-sessions/SID`. NULL or `""`: the store's root;
    /// else a prefix ending in `/` (`"team-a/"`).
    pub prefix: *const c_char,
}

/// The default session options: ttl 30 s, no label, the store's root.
#[no_mangle]
pub extern "C" fn lease_session_options_default() -> lease_session_options {
    lease_session_options {
        struct_size: std::mem::size_of::<lease_session_options>(),
        ttl_ms: 30_000,
        label: std::ptr::null(),
        prefix: std::ptr::null(),
    }
}

/// The first layout with `struct_size` is the whole of this one: fields added later go after
/// `prefix`, and the struct must end with no padding.
const SESSION_OPTIONS_MIN_SIZE: usize =
    std::mem::offset_of!(lease_session_options, prefix) + std::mem::size_of::<*const c_char>();
const _: () = assert!(
    std::mem::size_of::<lease_session_options>() == SESSION_OPTIONS_MIN_SIZE,
    "lease_session_options must end without padding"
);

/// A shared session of this process on one store: one record, one renewal task and one
/// confirmation task for any number of grants. Thread-safe: any thread may acquire through it,
/// read it or close it.
pub struct lease_session {
    rt: Arc<Rt>,
    session: SharedSession,
    /// Its store, to refuse the locks of other stores.
    store: StoreUrl,
    /// `lease_session_close` was called (or started).
    closed: AtomicBool,
    sid: CString,
    key: CString,
    url: CString,
}

/// A grant of a queued lock held through a shared session: kept by the session's renewals and
/// confirmations (no task of its own). Thread-safe.
pub struct lease_shared_grant {
    pub(crate) rt: Arc<Rt>,
    /// Its release, loss and idempotence are the core's (`SharedGrant::release(&self)`); its
    /// fenced calls are `fence.rs`'s (`lease_shared_grant_fenced_put`, …).
    pub(crate) grant: SharedGrant,
    epoch: u64,
    mode: lease_mode,
    key: CString,
    url: CString,
    id: CString,
    /// `URL#EPOCH@SID.N`, with the grant's mode and scope.
    token: CString,
    /// The URL of the lock's store (`lease_shared_grant_store_url`).
    store_url: CString,
    /// The process that made it: a forked child refuses its parent's grants (`made_here`) and
    /// uses its own (`lease_acquire_on_process_session`).
    pid: u32,
}

impl lease_shared_grant {
    fn new(rt: Arc<Rt>, store: &StoreUrl, grant: SharedGrant) -> Box<lease_shared_grant> {
        let info = grant.grant();
        Box::new(lease_shared_grant {
            rt,
            epoch: info.token,
            mode: match info.mode {
                lease_core::Mode::Exclusive => lease_mode::LEASE_MODE_EXCLUSIVE,
                lease_core::Mode::Shared => lease_mode::LEASE_MODE_SHARED,
            },
            key: c_string(grant.key()),
            url: c_string(grant.url()),
            id: c_string(grant.id()),
            token: c_string(&grant.token().to_string()),
            store_url: c_string(&store.to_string()),
            grant,
            pid: std::process::id(),
        })
    }

    /// `LEASE_FORKED` when this grant is the parent's (this is a forked child).
    pub(crate) fn here(&self) -> Result<&lease_shared_grant, Failure> {
        made_here(self.pid)?;
        Ok(self)
    }
}

/// Open a shared session on `store` (docs/protocol.md §10, "Shared sessions: one heartbeat for
/// many grants"): its first record is written before this returns, and its one renewal task
/// starts on the store's runtime. `opts` may be NULL for the defaults. Blocks.
///
/// Nothing attaches to it unless asked (`lease_session_acquire`); it lives until
/// `lease_session_close` or `lease_session_free`, or until it is lost. On success writes the
/// session to `*out`; on failure (`LEASE_INVALID`: a ttl out of range, a label too long, a
/// prefix not ending in `/`; `LEASE_STORE`, `LEASE_UNAVAILABLE`, …) writes an error to `*err`
/// when `err` is not NULL.
///
/// # Safety
/// `store` is NULL or a live store; `opts` is NULL or a valid `lease_session_options` (its
/// strings NULL or NUL-terminated); `out` points to writable storage for a pointer; `err` is
/// NULL or points to writable storage for a pointer. Must not be called from a runtime thread
/// (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_session_open(
    store: *const lease_store,
    opts: *const lease_session_options,
    out: *mut *mut lease_session,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let store = unsafe { handle(store, "store") }?;
        let out = out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let o = unsafe {
            sized_options(
                opts,
                "lease_session_options",
                lease_session_options_default(),
                SESSION_OPTIONS_MIN_SIZE,
            )
        }?;
        let mut so = SessionOptions::new(Duration::from_millis(o.ttl_ms));
        // SAFETY: the caller's contract.
        if let Some(label) = unsafe { opt_str_arg(o.label, "label") }? {
            so = so.label(label);
        }
        // SAFETY: the caller's contract.
        if let Some(prefix) = unsafe { opt_str_arg(o.prefix, "prefix") }? {
            so = so.prefix(prefix);
        }
        let client = &store.client;
        let session = store
            .rt
            .block_on(async { SharedSession::open(client, so).await })??;
        let s = Box::new(lease_session {
            rt: store.rt.clone(),
            sid: c_string(&session.sid()),
            key: c_string(session.key()),
            url: c_string(session.url()),
            session,
            store: store.url.clone(),
            closed: AtomicBool::new(false),
        });
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(s) };
        Ok(())
    })
}

impl lease_session {
    /// The key in this session's store of `lock`: a lock URL (`s3://…`, `file://…`, a path
    /// starting with `/` or `.`) in the same store, or a key (`jobs/7`: no scheme, not a path).
    fn key_of(&self, lock: &str) -> Result<String, Failure> {
        Ok(lease_core::session_lock_key(&self.store, lock, false)?)
    }
}

/// Acquire a grant of the queued lock `lock` through `session`: `lock` is its key in the
/// session's store (`"jobs/7"`), or its URL in that store (`"s3://bucket/jobs/7?…"`,
/// `"file:///var/locks/jobs/7"`). The grant is attached to the session before its request is
/// sent, and held by the session's renewals. `opts` (NULL for the defaults) as for
/// `lease_acquire` with `queue` (always queued): `wait_ms`, `shared`, `permits`, `scope`,
/// `range_*`, `priority`, `poll_interval_ms`, `wake_hints`, `owner`, `label`, and `cancel`
/// (cancelling it makes a waiting request leave the lock's queue and the session, and return
/// `LEASE_CANCELLED`). Blocks.
///
/// `LEASE_INVALID` for: `ttl_ms` other than the default (the session's ttl applies to every
/// grant held through it: open the session with the ttl wanted), `data` (not kept on a shared
/// session), a lock of another store, a session closed by `lease_session_close`, and the
/// option errors of `lease_acquire`. `LEASE_LOST` when the session was lost. Otherwise the
/// codes of `lease_acquire` (`LEASE_HELD`, `LEASE_TIMEOUT`, `LEASE_CANCELLED`, …).
///
/// On success writes the grant to `*out` (release it with `lease_shared_grant_release`, free
/// it with `lease_shared_grant_free`).
///
/// # Safety
/// `session` is NULL or a live session; `lock` is NULL or a NUL-terminated string; `opts` is
/// NULL or a valid `lease_options` (its strings NULL or NUL-terminated, its `cancel` NULL or a
/// live token); `out` points to writable storage for a pointer; `err` is NULL or points to
/// writable storage for a pointer. Must not be called from a runtime thread (a lost callback):
/// that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_session_acquire(
    session: *const lease_session,
    lock: *const c_char,
    opts: *const lease_options,
    out: *mut *mut lease_shared_grant,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let s = unsafe { handle(session, "session") }?;
        // SAFETY: the caller's contract.
        let lock = unsafe { str_arg(lock, "lock") }?;
        let out = out_arg(out, "out")?;
        if s.closed.load(Ordering::SeqCst) {
            return Err(Failure::invalid(format!(
                "the shared session {} is closed: open another (lease_session_open) to acquire \
                 more",
                s.session.url()
            )));
        }
        let key = s.key_of(lock)?;
        // SAFETY: the caller's contract.
        let ttl_ms = unsafe { options_ttl_ms(opts) }?;
        let default_ttl = lease_options_default().ttl_ms;
        if ttl_ms != default_ttl {
            return Err(Failure::invalid(format!(
                "ttl_ms {ttl_ms} was given to lease_session_acquire: the session's ttl applies \
                 to every grant held through it (a checker judges a grant by its session's \
                 record); leave ttl_ms at its default ({default_ttl}) and open the session with \
                 the ttl wanted (lease_session_options.ttl_ms)"
            )));
        }
        // SAFETY: the caller's contract.
        let (opts, cancel) = unsafe { convert_options(opts) }?;
        let cancel = cancel.unwrap_or_else(CancellationToken::new);
        let grant =
            s.rt.block_on(s.session.acquire_with_cancel(&key, &opts, &cancel))??;
        let g = lease_shared_grant::new(s.rt.clone(), &s.store, grant);
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(g) };
        Ok(())
    })
}

/// Acquire the queued lock at `url` through **the process's shared session** for its store and
/// ttl (docs/protocol.md §10, "The API": *Per-process default*): one session record and one
/// renewal task for every grant this process holds or waits for this way on that store with
/// that ttl, opened on first use at the store's root (`.lease-sessions/SID`), released and
/// deleted by itself one ttl after nothing is attached to it, and opened afresh by the next
/// acquisition (after that, after a loss, or in a forked child). No `lease_session` to open or
/// close: the process's sessions are liblease's, on a runtime of its own, started on first use
/// and kept to the process's end. Blocks.
///
/// `url` is the lock's URL, as `lease_acquire`'s name (`s3://bucket/jobs/7?…`,
/// `file:///var/locks/jobs/7`, a path, or a bare name in the default file store): the same
/// store in one process always reaches the same session. `opts` (NULL for the defaults) as for
/// `lease_acquire`, queued implied (`queue` need not be set): `ttl_ms` chooses the session (one
/// per ttl; the grant's health is its session's), `wait_ms`, `shared`, `permits`, `scope`,
/// `range_*`, `priority`, `poll_interval_ms`, `wake_hints`, `owner`, `label` (the request's, not
/// the session's: the session is the process's), and `cancel` (cancelling it makes a waiting
/// request leave the lock's queue and the session, and return `LEASE_CANCELLED`).
///
/// `LEASE_INVALID` for `data` (not kept on a shared session) and the option errors of
/// `lease_acquire`; otherwise its codes (`LEASE_HELD`, `LEASE_TIMEOUT`, `LEASE_CANCELLED`,
/// `LEASE_UNAVAILABLE`, …), with an error in `*err` when `err` is not NULL.
///
/// On success writes the grant to `*out`: the type `lease_session_acquire` returns (token
/// `URL#EPOCH@SID.N`, fenced calls, `lease_shared_grant_release`, `lease_shared_grant_free`).
///
/// Works in a forked child, unlike the rest of liblease: the child's first acquisition starts
/// the child's own runtime and session; a grant made in the parent returns `LEASE_FORKED` from
/// the child.
///
/// # Safety
/// `url` is NULL or a NUL-terminated string; `opts` is NULL or a valid `lease_options` (its
/// strings NULL or NUL-terminated, its `cancel` NULL or a live token); `out` points to writable
/// storage for a pointer; `err` is NULL or points to writable storage for a pointer. Must not
/// be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`. In a forked
/// child, no other thread of the parent may have been inside liblease at the fork (as for any
/// library that takes locks).
#[no_mangle]
pub unsafe extern "C" fn lease_acquire_on_process_session(
    url: *const c_char,
    opts: *const lease_options,
    out: *mut *mut lease_shared_grant,
    err: *mut *mut lease_error,
) -> lease_code {
    call_here(err, || {
        // SAFETY: the caller's contract.
        let url = unsafe { str_arg(url, "url") }?;
        let out = out_arg(out, "out")?;
        // SAFETY: the caller's contract.
        let (opts, cancel) = unsafe { convert_options(opts) }?;
        not_on_runtime_thread()?;
        let rt = process_runtime()?;
        let (client, key) = {
            let _in_runtime = rt.runtime().enter();
            Client::for_url(url)?
        };
        let store = LeaseUrl::parse(url)?.store;
        let cancel = cancel.unwrap_or_default();
        let grant = rt.block_on(SharedSession::acquire_on_process_session_with_cancel(
            &client, &key, &opts, &cancel,
        ))??;
        let g = lease_shared_grant::new(rt, &store, grant);
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = Box::into_raw(g) };
        Ok(())
    })
}

/// Close the session (idempotent): every grant still attached to it is released (its leave
/// sent, so the next waiter is granted), then the session's record is released and deleted.
/// Its grants' handles stay valid (not held; free them with `lease_shared_grant_free`); a
/// later `lease_session_acquire` returns `LEASE_INVALID`. An acquire still waiting through the
/// session leaves the lock's queue and returns `LEASE_INVALID` ("closed while this
/// acquisition waited"). Blocks until done.
///
/// # Safety
/// `session` is NULL or a live session; `err` is NULL or points to writable storage for a
/// pointer. Must not be called from a runtime thread (a lost callback): that returns
/// `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_session_close(
    session: *const lease_session,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let s = unsafe { handle(session, "session") }?;
        // Refused before the session is marked closed.
        not_on_runtime_thread()?;
        if s.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        s.rt.block_on(s.session.close())
    })
}

/// Free a session handle. A session not closed is closed first (blocking, as
/// `lease_session_close`; from a runtime thread, in the background instead): its grants are no
/// longer held, though their handles stay valid until `lease_shared_grant_free`. NULL is a
/// no-op.
///
/// # Safety
/// `session` is NULL or a session from `lease_session_open`, not freed before and not in use by
/// another thread during or after this call.
#[no_mangle]
pub unsafe extern "C" fn lease_session_free(session: *mut lease_session) {
    if session.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let b = unsafe { Box::from_raw(session) };
    if forked() {
        std::mem::forget(b);
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(move || {
        if !b.closed.swap(true, Ordering::SeqCst) {
            if on_runtime_thread() {
                let s = b.session.clone();
                b.rt.runtime().spawn(async move { s.close().await });
            } else {
                let _ = b.rt.block_on(b.session.close());
            }
        }
        drop(b);
    }));
}

/// The session's id (`SID`), which its grants' ids begin with. Borrowed: valid until
/// `lease_session_free(session)`. An empty string when `session` is NULL.
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_sid(session: *const lease_session) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { session.as_ref() }.map_or(c"".as_ptr(), |s| s.sid.as_ptr())
}

/// The session record's key in its store (`PREFIX.lease-sessions/SID`). Borrowed: valid until
/// `lease_session_free(session)`. An empty string when `session` is NULL.
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_key(session: *const lease_session) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { session.as_ref() }.map_or(c"".as_ptr(), |s| s.key.as_ptr())
}

/// The session record's URL. Borrowed: valid until `lease_session_free(session)`. An empty
/// string when `session` is NULL.
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_url(session: *const lease_session) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { session.as_ref() }.map_or(c"".as_ptr(), |s| s.url.as_ptr())
}

/// The session's ttl in ms (0 when `session` is NULL).
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_ttl_ms(session: *const lease_session) -> u64 {
    quiet(0, || {
        // SAFETY: the caller's contract.
        let ms = unsafe { session.as_ref() }?.session.ttl().as_millis();
        Some(u64::try_from(ms).unwrap_or(u64::MAX))
    })
}

/// 1 while the session is believed (its last landed renewal less than a ttl ago) and not
/// closed; else 0 (and when `session` is NULL).
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_alive(session: *const lease_session) -> c_int {
    quiet(0, || {
        // SAFETY: the caller's contract.
        let s = unsafe { session.as_ref() }?;
        Some(c_int::from(
            !s.closed.load(Ordering::SeqCst) && s.session.is_alive(),
        ))
    })
}

/// How many grants and waiting requests are attached to the session (0 when `session` is
/// NULL).
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_attached(session: *const lease_session) -> usize {
    // SAFETY: the caller's contract.
    quiet(0, || Some(unsafe { session.as_ref() }?.session.attached()))
}

/// Why the session was lost (one line for people), or NULL while it is not (and when
/// `session` is NULL). A new string: free it with `lease_string_free`.
///
/// # Safety
/// `session` is NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn lease_session_lost_reason(session: *const lease_session) -> *mut c_char {
    quiet(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let reason = unsafe { session.as_ref() }?.session.lost_reason()?;
        Some(c_string(&reason.to_string()).into_raw())
    })
}

// ---------------------------------------------------------------------------------------------
// A grant held through a session

/// The grant's fencing epoch: strictly increasing per lock, unchanged by renewals and release
/// (0 when `g` is NULL). Hand it to resources that check it.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_epoch(g: *const lease_shared_grant) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(0, |g| g.epoch)
}

/// The grant's fencing token, `URL#EPOCH@SID.N` (with `;shared`, `;path=…` or `;range=…` as
/// `lease_token` writes them): the value to hand to resources that check it (a `lease_gate`,
/// a database). Its holder is the grant's entry id `SID.N`, so two grants of one session are
/// two holders. Parse it with `lease_token_parse_holder`. Borrowed: valid until
/// `lease_shared_grant_free(g)`. An empty string when `g` is NULL.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_token(g: *const lease_shared_grant) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(c"".as_ptr(), |g| g.token.as_ptr())
}

/// What the grant is: `LEASE_MODE_EXCLUSIVE` or `LEASE_MODE_SHARED` (`LEASE_MODE_NONE` when
/// `g` is NULL).
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_mode(g: *const lease_shared_grant) -> lease_mode {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(lease_mode::LEASE_MODE_NONE, |g| g.mode)
}

/// The lock's key in the session's store. Borrowed: valid until `lease_shared_grant_free(g)`.
/// An empty string when `g` is NULL.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_key(g: *const lease_shared_grant) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(c"".as_ptr(), |g| g.key.as_ptr())
}

/// The lock's URL. Borrowed: valid until `lease_shared_grant_free(g)`. An empty string when
/// `g` is NULL.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_url(g: *const lease_shared_grant) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(c"".as_ptr(), |g| g.url.as_ptr())
}

/// The URL of the lock's store (`s3://bucket?…`, `file:///dir`: for a file URL, the lock's
/// directory), where its session's record is (`.lease-sessions/SID`) and where
/// `lease_fenced_get` reads what the grant's fenced calls wrote (open it with
/// `lease_store_open`). Borrowed: valid until `lease_shared_grant_free(g)`. An empty string when
/// `g` is NULL.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_store_url(
    g: *const lease_shared_grant,
) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(c"".as_ptr(), |g| g.store_url.as_ptr())
}

/// The grant's entry id in the lock's record, `SID.N` (its session's id, a dot, its number).
/// Borrowed: valid until `lease_shared_grant_free(g)`. An empty string when `g` is NULL.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_id(g: *const lease_shared_grant) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { g.as_ref() }.map_or(c"".as_ptr(), |g| g.id.as_ptr())
}

/// 1 while the grant is held: its session believed, and a read of the lock's record sent less
/// than a ttl ago showed it. 0 once lost or released (and when `g` is NULL).
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_held(g: *const lease_shared_grant) -> c_int {
    quiet_here(0, || {
        // SAFETY: the caller's contract.
        let g = unsafe { g.as_ref() }?.here().ok()?;
        Some(c_int::from(g.grant.is_held()))
    })
}

/// Why the grant was lost (its own loss, or its session's; one line for people), or NULL while
/// it is not (and when `g` is NULL). A new string: free it with `lease_string_free`.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_lost_reason(
    g: *const lease_shared_grant,
) -> *mut c_char {
    quiet_here(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let reason = unsafe { g.as_ref() }?.here().ok()?.grant.lost_reason()?;
        Some(c_string(&reason.to_string()).into_raw())
    })
}

/// The kind of the grant's loss, a stable name: `session_deleted` (its session's record was
/// deleted), `expired`, `removed`, `lock_replaced`, `taken_over`, …; or NULL while it is not
/// lost (and when `g` is NULL). A new string: free it with `lease_string_free`.
///
/// # Safety
/// `g` is NULL or a live grant.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_lost_kind(g: *const lease_shared_grant) -> *mut c_char {
    quiet_here(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let reason = unsafe { g.as_ref() }?.here().ok()?.grant.lost_reason()?;
        Some(c_string(reason.kind()).into_raw())
    })
}

/// `LEASE_OK` while the grant is held; otherwise `LEASE_LOST` naming why (lost, with its
/// session or alone, or released), with an error in `*err` when `err` is not NULL. Call it
/// before each step that needs the lock. Does not block.
///
/// # Safety
/// `g` is NULL or a live grant; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_ensure_held(
    g: *const lease_shared_grant,
    err: *mut *mut lease_error,
) -> lease_code {
    call_here(err, || {
        // SAFETY: the caller's contract.
        let g = unsafe { handle(g, "grant") }?.here()?;
        g.grant.ensure_held().map_err(Failure::from)
    })
}

/// Release the grant alone (idempotent, as `lease_release`: a second call sends nothing and
/// returns what the first did, `LEASE_OK`, or `LEASE_LOST` again for a grant lost before): it
/// is no longer held from now on, its leave grants the next waiter, and the session's other
/// grants stay held. Returns `LEASE_LOST` if the grant was lost before it was released
/// (whatever was done under it may have overlapped with another holder). Blocks. The handle stays valid:
/// free it with `lease_shared_grant_free`.
///
/// # Safety
/// `g` is NULL or a live grant; `err` is NULL or points to writable storage for a pointer.
/// Must not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_release(
    g: *const lease_shared_grant,
    err: *mut *mut lease_error,
) -> lease_code {
    call_here(err, || {
        // SAFETY: the caller's contract.
        let g = unsafe { handle(g, "grant") }?.here()?;
        not_on_runtime_thread()?;
        g.rt.block_on(g.grant.release())??;
        Ok(())
    })
}

/// Free a grant handle. A grant still held is released first (blocking, as
/// `lease_shared_grant_release`, ignoring the outcome; from a runtime thread, in the background
/// instead). NULL is a no-op.
///
/// # Safety
/// `g` is NULL or a grant from `lease_session_acquire` or `lease_acquire_on_process_session`,
/// not freed before and not in use by another thread during or after this call. In a forked
/// child, a grant made in the parent is leaked (its runtime's threads are not there).
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_free(g: *mut lease_shared_grant) {
    if g.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let b = unsafe { Box::from_raw(g) };
    if b.here().is_err() {
        // The parent's: its runtime's threads do not exist here.
        std::mem::forget(b);
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(move || {
        if on_runtime_thread() {
            // Dropped on the runtime: the core sends its leave in the background (nothing,
            // when released).
            let _entered = b.rt.runtime().enter();
            drop(b);
        } else {
            // Released (nothing sent again when it was), then dropped.
            let _ = b.rt.block_on(b.grant.release());
            drop(b);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::ptr::{null, null_mut};

    /// The code and message of a call that wrote `err` (freed here).
    fn outcome(code: lease_code, err: *mut lease_error) -> (lease_code, String) {
        // SAFETY: `err` is NULL or was just written by the call.
        let msg = unsafe { CStr::from_ptr(lease_error_message(err)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        unsafe { lease_error_free(err) };
        (code, msg)
    }

    /// What `lease_session_acquire` refuses before it sends anything, each with
    /// `LEASE_INVALID` and a message that says what to do: a ttl (the session's applies), a
    /// lock of another store, and any acquisition once the session is closed. On the memory
    /// store.
    #[test]
    fn session_acquire_refuses_a_ttl_another_store_and_a_closed_session() {
        let mut rt = null_mut();
        let mut store = null_mut();
        let mut session = null_mut();
        // SAFETY: valid pointers throughout; every handle freed at the end.
        unsafe {
            assert_eq!(lease_runtime_new(null(), &mut rt, null_mut()), LEASE_OK);
            let url = c"memory://ffi-session-unit";
            assert_eq!(
                lease_store_open(rt, url.as_ptr(), &mut store, null_mut()),
                LEASE_OK
            );
            let mut so = lease_session_options_default();
            so.ttl_ms = 5_000;
            assert_eq!(
                lease_session_open(store, &so, &mut session, null_mut()),
                LEASE_OK
            );
            assert_eq!(lease_session_ttl_ms(session), 5_000);
            let acquire = |lock: &CStr, opts: &lease_options| {
                let mut g = null_mut();
                let mut err = null_mut();
                let code = lease_session_acquire(session, lock.as_ptr(), opts, &mut g, &mut err);
                assert!(g.is_null(), "a refused acquire wrote a grant");
                outcome(code, err)
            };
            let mut with_ttl = lease_options_default();
            with_ttl.ttl_ms = 5_000;
            let (code, msg) = acquire(c"jobs/1", &with_ttl);
            assert_eq!(code, LEASE_INVALID);
            assert!(msg.contains("the session's ttl applies"), "{msg}");
            for other in [c"memory://elsewhere/jobs/1", c"file:///tmp/jobs-1"] {
                let (code, msg) = acquire(other, &lease_options_default());
                assert_eq!(code, LEASE_INVALID);
                assert!(msg.contains("not in this session's store"), "{msg}");
            }
            // The same store by URL, and by key: granted.
            for lock in [c"memory://ffi-session-unit/jobs/1", c"jobs/2"] {
                let mut g = null_mut();
                let code =
                    lease_session_acquire(session, lock.as_ptr(), null(), &mut g, null_mut());
                assert_eq!(code, LEASE_OK);
                assert_eq!(lease_shared_grant_held(g), 1);
                lease_shared_grant_free(g);
            }
            assert_eq!(lease_session_close(session, null_mut()), LEASE_OK);
            let (code, msg) = acquire(c"jobs/1", &lease_options_default());
            assert_eq!(code, LEASE_INVALID);
            assert!(msg.contains("is closed"), "{msg}");
            lease_session_free(session);
            lease_store_free(store);
            lease_runtime_free(rt);
        }
    }
    /// `lease_acquire_on_process_session`: two locks of one store (by URL, no runtime or store
    /// handle) share the process's session for their ttl, another ttl gets another session,
    /// `data` is refused with `LEASE_INVALID` naming it, and a grant made by another process
    /// (what a forked child sees of its parent's: the pid it was made in is not this one) is
    /// refused with `LEASE_FORKED` and reads as not held. On the memory store.
    #[test]
    fn process_session_grants_share_one_session_per_ttl_and_a_parents_grant_is_refused() {
        let acquire = |url: &CStr, ttl_ms: u64, data: Option<&CStr>| {
            let mut o = lease_options_default();
            o.ttl_ms = ttl_ms;
            o.data = data.map_or(null(), |d| d.as_ptr());
            let mut g = null_mut();
            let mut err = null_mut();
            // SAFETY: valid pointers; the grant is freed by the caller.
            let code =
                unsafe { lease_acquire_on_process_session(url.as_ptr(), &o, &mut g, &mut err) };
            (code, g, err)
        };
        let sid = |g: *mut lease_shared_grant| {
            // SAFETY: a live grant.
            let id = unsafe { CStr::from_ptr(lease_shared_grant_id(g)) }
                .to_str()
                .unwrap();
            id.rsplit_once('.').unwrap().0.to_string()
        };
        let (code, a, _) = acquire(c"memory://ffi-process-unit/jobs/a", 4_000, None);
        assert_eq!(code, LEASE_OK);
        let (code, b, _) = acquire(c"memory://ffi-process-unit/jobs/b", 4_000, None);
        assert_eq!(code, LEASE_OK);
        let (code, c, _) = acquire(c"memory://ffi-process-unit/jobs/c", 5_000, None);
        assert_eq!(code, LEASE_OK);
        assert_eq!(sid(a), sid(b));
        assert_ne!(sid(a), sid(c));
        // SAFETY: live grants.
        unsafe {
            assert_eq!(
                CStr::from_ptr(lease_shared_grant_store_url(a)),
                c"memory://ffi-process-unit"
            );
        }
        let (code, g, err) = acquire(c"memory://ffi-process-unit/jobs/d", 4_000, Some(c"x"));
        assert!(g.is_null());
        let (code, msg) = outcome(code, err);
        assert_eq!(code, LEASE_INVALID);
        assert!(msg.contains("data"), "{msg}");
        // SAFETY: live grants, freed at the end.
        unsafe {
            let mine = (*a).pid;
            (*a).pid = mine.wrapping_add(1);
            let mut err = null_mut();
            let (code, msg) = outcome(lease_shared_grant_release(a, &mut err), err);
            assert_eq!(code, LEASE_FORKED);
            assert!(msg.contains("fork"), "{msg}");
            assert_eq!(lease_shared_grant_held(a), 0);
            (*a).pid = mine;
            assert_eq!(lease_shared_grant_held(a), 1);
            for g in [a, b, c] {
                assert_eq!(lease_shared_grant_release(g, null_mut()), LEASE_OK);
                lease_shared_grant_free(g);
            }
        }
    }

    /// A grant's fenced calls and a lease's share their bodies (`fence.rs`): the grant's key
    /// is placed as the lease's, its write is stamped with its epoch, and once it is released
    /// and a lease of the lock writes with a higher epoch, the grant's stale write is refused
    /// with `LEASE_FENCED` naming that epoch. On the memory store.
    #[test]
    fn a_grants_fenced_write_is_placed_as_a_leases_and_fenced_after_a_takeover() {
        use crate::fence::*;
        let mut rt = null_mut();
        let mut store = null_mut();
        let mut session = null_mut();
        let mut g = null_mut();
        let mut l = null_mut();
        let key = c"x";
        // SAFETY: valid pointers throughout; every handle and string freed at the end.
        unsafe {
            assert_eq!(lease_runtime_new(null(), &mut rt, null_mut()), LEASE_OK);
            let url = c"memory://ffi-session-fence-unit";
            assert_eq!(
                lease_store_open(rt, url.as_ptr(), &mut store, null_mut()),
                LEASE_OK
            );
            let code = lease_session_open(store, null(), &mut session, null_mut());
            assert_eq!(code, LEASE_OK);
            let lock = c"jobs/f";
            let code = lease_session_acquire(session, lock.as_ptr(), null(), &mut g, null_mut());
            assert_eq!(code, LEASE_OK);
            let mut placed = null_mut();
            let code = lease_shared_grant_object_key(g, key.as_ptr(), &mut placed, null_mut());
            assert_eq!(code, LEASE_OK);
            assert_eq!(CStr::from_ptr(placed), c"jobs/x");
            let a = b"a";
            let code = lease_shared_grant_fenced_put(
                g,
                key.as_ptr(),
                a.as_ptr(),
                1,
                null_mut(),
                null_mut(),
            );
            assert_eq!(code, LEASE_OK);
            let mut obj = null_mut();
            let code = lease_fenced_get(store, placed, &mut obj, null_mut());
            assert_eq!(code, LEASE_OK);
            assert_eq!(lease_object_epoch(obj), lease_shared_grant_epoch(g));
            lease_object_free(obj);
            assert_eq!(lease_shared_grant_release(g, null_mut()), LEASE_OK);

            let mut o = lease_options_default();
            o.queue = 1;
            assert_eq!(
                lease_acquire(store, lock.as_ptr(), &o, &mut l, null_mut()),
                LEASE_OK
            );
            assert!(lease_epoch(l) > lease_shared_grant_epoch(g));
            let mut lease_placed = null_mut();
            let code = lease_object_key(l, key.as_ptr(), &mut lease_placed, null_mut());
            assert_eq!(code, LEASE_OK);
            assert_eq!(CStr::from_ptr(lease_placed), CStr::from_ptr(placed));
            let b = b"b";
            let code = lease_fenced_put(l, key.as_ptr(), b.as_ptr(), 1, null_mut(), null_mut());
            assert_eq!(code, LEASE_OK);
            let mut err = null_mut();
            let code =
                lease_shared_grant_fenced_put(g, key.as_ptr(), a.as_ptr(), 1, null_mut(), &mut err);
            assert_eq!(code, LEASE_FENCED);
            assert_eq!(lease_error_epoch(err), lease_epoch(l));
            lease_error_free(err);
            let mut err = null_mut();
            let code = lease_shared_grant_fenced_put(
                null(),
                key.as_ptr(),
                a.as_ptr(),
                1,
                null_mut(),
                &mut err,
            );
            let (code, msg) = outcome(code, err);
            assert_eq!(code, LEASE_INVALID);
            assert!(msg.contains("grant"), "{msg}");

            assert_eq!(lease_release(l, null_mut()), LEASE_OK);
            lease_free(l);
            lease_string_free(placed);
            lease_string_free(lease_placed);
            lease_shared_grant_free(g);
            lease_session_free(session);
            lease_store_free(store);
            lease_runtime_free(rt);
        }
    }
}
