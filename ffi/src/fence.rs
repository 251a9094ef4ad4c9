//! Fencing the store enforces: tokens, fenced writes and reads (`lease_object`) under a lease or
//! a shared grant (one body per operation, given a `Fencer`), gates.

use lease_core::store::Version;
use lease_core::{FencedObject, FencedRef, FencingGate, FencingToken, Mode, Scope};
use std::ffi::{c_char, c_int, CString};
use std::sync::Arc;

use crate::session::lease_shared_grant;
use crate::{boundary::*, error::*, held::*, runtime::*, store::*};

/// What a fenced call acts under, borrowed from its handle for the call (no clone): a lease
/// or a shared grant, and the runtime that drives it. Each fenced operation has one body
/// taking it, called by its `lease_*` and its `lease_shared_grant_*` entry point.
#[derive(Clone, Copy)]
struct Fencer<'a> {
    rt: &'a Rt,
    holder: FencedRef<'a>,
}

impl<'a> Fencer<'a> {
    /// The lease `l`; `LEASE_INVALID` when it is NULL.
    ///
    /// # Safety
    /// `l` is NULL or a live lease, alive for `'a`.
    unsafe fn lease(l: *const lease) -> Result<Fencer<'a>, Failure> {
        // SAFETY: the caller's contract.
        let l = unsafe { handle(l, "lease") }?;
        Ok(Fencer {
            rt: &l.rt,
            holder: FencedRef::Lease(&l.held),
        })
    }

    /// The shared grant `g`; `LEASE_INVALID` when it is NULL.
    ///
    /// # Safety
    /// `g` is NULL or a live grant, alive for `'a`.
    unsafe fn grant(g: *const lease_shared_grant) -> Result<Fencer<'a>, Failure> {
        // SAFETY: the caller's contract.
        let g = unsafe { handle(g, "grant") }?.here()?;
        Ok(Fencer {
            rt: &g.rt,
            holder: FencedRef::Grant(&g.grant),
        })
    }
}

/// The fencing token of a lease, `LEASE_URL#EPOCH@HOLDER` (e.g.
/// `s3://bucket/locks/gc#1767225600000@3f2a9c…`): the value to hand to resources that check it
/// (a `lease_gate`, a database, an HTTP API). The holder id tells two holders apart should they
/// ever share an epoch, so that fenced writes and gates never admit both. A queued lock's
/// shared or scoped grant adds `;shared`, `;path=PATH` or `;range=START..END`. Parse it with
/// `lease_token_parse_holder` (or `lease_token_parse`) and `lease_token_parse_grant`. Does not
/// block.
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

/// What a fencing token says of its grant, which decides what it fences (docs/protocol.md §7):
/// a queued lock's shared or scoped grant adds `;shared`, `;path=PATH` or `;range=START..END`
/// to its token. `LEASE_INVALID` if `token` is not a token.
///
/// On success writes, for each out-parameter that is not NULL: `LEASE_MODE_SHARED` or
/// `LEASE_MODE_EXCLUSIVE` (every plain lease's token) to `*mode_out`; the path the grant holds
/// to `*scope_out` (a new string: free it with `lease_string_free`; NULL for the whole lock or
/// a byte range); the bytes `[start, end)` it holds to `*range_start_out` and `*range_end_out`
/// (both 0 when it holds no range). Does not block.
///
/// # Safety
/// `token` is NULL or a NUL-terminated string; the out-parameters are NULL or point to
/// writable storage; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_token_parse_grant(
    token: *const c_char,
    mode_out: *mut lease_mode,
    scope_out: *mut *mut c_char,
    range_start_out: *mut u64,
    range_end_out: *mut u64,
    err: *mut *mut lease_error,
) -> lease_code {
    call(err, || {
        // SAFETY: the caller's contract.
        let token: FencingToken = unsafe { str_arg(token, "token") }?.parse()?;
        let (path, (start, end)) = match token.scope() {
            Scope::Whole => (None, (0, 0)),
            Scope::Path(p) => (Some(p.as_str()), (0, 0)),
            Scope::Range { start, end } => (None, (*start, *end)),
        };
        let mode = match token.mode() {
            Mode::Exclusive => lease_mode::LEASE_MODE_EXCLUSIVE,
            Mode::Shared => lease_mode::LEASE_MODE_SHARED,
        };
        if !mode_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *mode_out = mode };
        }
        if !scope_out.is_null() {
            let s = path.map_or(std::ptr::null_mut(), |p| c_string(p).into_raw());
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *scope_out = s };
        }
        if !range_start_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *range_start_out = start };
        }
        if !range_end_out.is_null() {
            // SAFETY: non-NULL; the caller's contract.
            unsafe { *range_end_out = end };
        }
        Ok(())
    })
}

/// # Safety
/// `data` is NULL with `len` 0, or valid for reading `len` bytes.
pub(crate) unsafe fn bytes_arg(data: *const u8, len: usize) -> Result<Vec<u8>, Failure> {
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
    // SAFETY: the caller's contract.
    call(err, || unsafe {
        fenced_put(Fencer::lease(l)?, key, data, len, None, version_out)
    })
}

/// The body of `lease_fenced_put` and `lease_shared_grant_fenced_put` (`expected` None:
/// whatever is there), and of their `_put_if` (`Some(version)`, or `Some(None)` for "still
/// absent").
///
/// # Safety
/// The contract of `lease_fenced_put` (for the arguments after `f`).
unsafe fn fenced_put(
    f: Fencer<'_>,
    key: *const c_char,
    data: *const u8,
    len: usize,
    expected: Option<Option<Version>>,
    version_out: *mut *mut c_char,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let key = unsafe { str_arg(key, "key") }?;
    // SAFETY: the caller's contract.
    let bytes = unsafe { bytes_arg(data, len) }?;
    let version = match expected {
        None => f.rt.block_on(f.holder.fenced_put(key, bytes))??,
        Some(expected) => {
            f.rt.block_on(f.holder.fenced_put_if(key, bytes, expected.as_ref()))??
        }
    };
    if !version_out.is_null() {
        // SAFETY: non-NULL; the caller's contract.
        unsafe { *version_out = c_string(&version.etag).into_raw() };
    }
    Ok(())
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
        let f = unsafe { Fencer::lease(l) }?;
        // SAFETY: the caller's contract.
        unsafe { fenced_put_if(f, key, data, len, if_version, version_out) }
    })
}

/// The body of `lease_fenced_put_if` and `lease_shared_grant_fenced_put_if`.
///
/// # Safety
/// The contract of `lease_fenced_put_if` (for the arguments after `f`).
unsafe fn fenced_put_if(
    f: Fencer<'_>,
    key: *const c_char,
    data: *const u8,
    len: usize,
    if_version: *const c_char,
    version_out: *mut *mut c_char,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let expected = unsafe { opt_str_arg(if_version, "if_version") }?
        .filter(|v| !v.is_empty())
        .map(Version::etag);
    // SAFETY: the caller's contract.
    unsafe { fenced_put(f, key, data, len, Some(expected), version_out) }
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
    // SAFETY: the caller's contract.
    call(err, || unsafe {
        fenced_delete(Fencer::lease(l)?, key, deleted_out)
    })
}

/// The body of `lease_fenced_delete` and `lease_shared_grant_fenced_delete`.
///
/// # Safety
/// The contract of `lease_fenced_delete` (for the arguments after `f`).
unsafe fn fenced_delete(
    f: Fencer<'_>,
    key: *const c_char,
    deleted_out: *mut c_int,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let key = unsafe { str_arg(key, "key") }?;
    let deleted = f.rt.block_on(f.holder.fenced_delete(key))??;
    if !deleted_out.is_null() {
        // SAFETY: non-NULL; the caller's contract.
        unsafe { *deleted_out = c_int::from(deleted) };
    }
    Ok(())
}

/// Where the fenced calls of `l` put `key`: its key in the store, from the store's root. A key
/// is read like a relative path from the lease's own directory, on every store: `x` and `./x`
/// beside the lease, `jobs/x` below it, `../x` one level up (never above the store's root:
/// `LEASE_INVALID`, naming the key), `/x` from the store's root. `lease_fenced_get`, which has
/// no lease, reads keys from the store's root: pass it this key to read what `lease_fenced_put`
/// wrote. Does not block.
///
/// On success writes a new string to `*key_out` (free it with `lease_string_free`).
///
/// # Safety
/// `l` is NULL or a live lease; `key` is NULL or a NUL-terminated string; `key_out` points to
/// writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_object_key(
    l: *const lease,
    key: *const c_char,
    key_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract.
    call(err, || unsafe {
        object_key(Fencer::lease(l)?, key, key_out)
    })
}

/// The body of `lease_object_key` and `lease_shared_grant_object_key`.
///
/// # Safety
/// The contract of `lease_object_key` (for the arguments after `f`).
unsafe fn object_key(
    f: Fencer<'_>,
    key: *const c_char,
    key_out: *mut *mut c_char,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let key = unsafe { str_arg(key, "key") }?;
    let out = out_arg(key_out, "key_out")?;
    let placed = c_string(&f.holder.object_key(key)?);
    // SAFETY: checked non-NULL; the caller's contract.
    unsafe { *out = placed.into_raw() };
    Ok(())
}

/// An object read by `lease_fenced_get` (or a fenced read): its bytes, its version, and the
/// lease, epoch and holder of the fenced write that wrote it. Immutable; thread-safe. Free it
/// with `lease_object_free`.
pub struct lease_object {
    pub(crate) data: Vec<u8>,
    pub(crate) epoch: u64,
    pub(crate) lease: Option<CString>,
    pub(crate) holder: Option<CString>,
    pub(crate) version: CString,
}

/// Read the object at `key` in `store` with the stamp of the fenced write that wrote it. Needs
/// only read permission. Blocks. A store has no lease, so `key` is read from the store's root
/// (`x`, `./x` and `/x` are the same object): for what `lease_fenced_put(l, "x", …)` wrote,
/// pass `lease_object_key(l, "x", …)`'s key (the same key when the lease's name has no `/`).
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
        // SAFETY: checked non-NULL; the caller's contract.
        unsafe { *out = object_ptr(obj) };
        Ok(())
    })
}

/// A new `lease_object` for the caller to free, or NULL.
fn object_ptr(obj: Option<FencedObject>) -> *mut lease_object {
    obj.map_or(std::ptr::null_mut(), |o| {
        Box::into_raw(Box::new(lease_object {
            data: o.bytes.to_vec(),
            epoch: o.epoch.unwrap_or(0),
            lease: o.lease.as_deref().map(c_string),
            holder: o.holder.as_deref().map(c_string),
            version: c_string(&o.version.etag),
        }))
    })
}

/// Read the object at `key` (placed as `lease_fenced_put` places it) and fence it with this
/// lease's token: from then on no holder whose grant ended before this one began can change it,
/// so a reader (a shared grant) sees its data stay while it holds, whatever a stale writer
/// does (docs/protocol.md §7). The first read of an object under a grant writes it back
/// unchanged with this token in its metadata (1 GET + 1 PUT); reading it again costs 1 GET.
/// Where nothing is, it leaves an empty marker that fenced reads see as absent. Returns
/// `LEASE_FENCED` when a later conflicting grant wrote or fenced the object (this grant has
/// ended). Blocks.
///
/// On success writes to `*out` a new object (free it with `lease_object_free`), or NULL when
/// there is no object at `key`.
///
/// # Safety
/// `l` is NULL or a live lease; `key` is NULL or a NUL-terminated string; `out` points to
/// writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
/// Must not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_fenced_read(
    l: *const lease,
    key: *const c_char,
    out: *mut *mut lease_object,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract.
    call(err, || unsafe { fenced_read(Fencer::lease(l)?, key, out) })
}

/// The body of `lease_fenced_read` and `lease_shared_grant_fenced_read`.
///
/// # Safety
/// The contract of `lease_fenced_read` (for the arguments after `f`).
unsafe fn fenced_read(
    f: Fencer<'_>,
    key: *const c_char,
    out: *mut *mut lease_object,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let key = unsafe { str_arg(key, "key") }?;
    let out = out_arg(out, "out")?;
    let obj = f.rt.block_on(f.holder.fenced_read(key))??;
    // SAFETY: checked non-NULL; the caller's contract.
    unsafe { *out = object_ptr(obj) };
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A shared grant's fenced calls: the lease's, under the grant's token (`URL#EPOCH@SID.N`), with
// the same bodies.

/// Write `len` bytes at `key` under the shared grant `g`, as `lease_fenced_put` does under a
/// lease: the object is stamped with the grant's lock, epoch and holder (its entry id `SID.N`),
/// and the write is refused with `LEASE_FENCED` (`lease_error_epoch` gives the newer epoch)
/// once a holder of the lock with a higher epoch (or another holder with the same epoch) has
/// written it: after the grant's session was cut off and another took the lock, its writes
/// land nowhere. Exclusive grants only: a grant in shared mode (`LEASE_MODE_SHARED`) gets
/// `LEASE_INVALID`, and reads with `lease_shared_grant_fenced_read`. `key` is placed as
/// `lease_shared_grant_object_key` says. A write that landed is never reported `LEASE_FENCED`;
/// when its outcome cannot be told the call returns `LEASE_UNAVAILABLE`. Not a
/// read-modify-write: use `lease_shared_grant_fenced_put_if` for that. Blocks.
///
/// On success writes the object's new version (its ETag) to `*version_out` when that is not
/// NULL (free it with `lease_string_free`); it is empty when the write landed but a newer write
/// replaced it before this call learned its version.
///
/// # Safety
/// `g` is NULL or a live grant; `key` is NULL or a NUL-terminated string; `data` is valid for
/// `len` bytes (NULL only when `len` is 0); `version_out` is NULL or points to writable storage
/// for a pointer; `err` is NULL or points to writable storage for a pointer. Must not be called
/// from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_fenced_put(
    g: *const lease_shared_grant,
    key: *const c_char,
    data: *const u8,
    len: usize,
    version_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract.
    call_here(err, || unsafe {
        fenced_put(Fencer::grant(g)?, key, data, len, None, version_out)
    })
}

/// Write `len` bytes at `key` under the shared grant `g`, as `lease_fenced_put_if` does under a
/// lease: only if the object is still at the version `if_version` (as `lease_object_version` or
/// an earlier fenced put gave it), or still absent when `if_version` is NULL or empty. If it
/// changed since, nothing is written and the call returns `LEASE_CONFLICT` when a writer of
/// this epoch or a lower one changed it (read it again, decide again, retry), or `LEASE_FENCED`
/// when a holder with a higher epoch wrote it (stop: a newer holder exists; `lease_error_epoch`
/// gives its epoch). A fenced put whose outcome could not be told returns `LEASE_UNAVAILABLE`;
/// a write that landed is never reported as `LEASE_FENCED` or `LEASE_CONFLICT`. Blocks.
///
/// On success writes the object's new version to `*version_out` when that is not NULL (free
/// it with `lease_string_free`); it is empty when the write landed but a newer write replaced
/// it before this call learned its version.
///
/// # Safety
/// `g` is NULL or a live grant; `key` is NULL or a NUL-terminated string; `data` is valid for
/// `len` bytes (NULL only when `len` is 0); `if_version` is NULL or a NUL-terminated string;
/// `version_out` is NULL or points to writable storage for a pointer; `err` is NULL or points
/// to writable storage for a pointer. Must not be called from a runtime thread (a lost
/// callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_fenced_put_if(
    g: *const lease_shared_grant,
    key: *const c_char,
    data: *const u8,
    len: usize,
    if_version: *const c_char,
    version_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    call_here(err, || {
        // SAFETY: the caller's contract.
        let f = unsafe { Fencer::grant(g) }?;
        // SAFETY: the caller's contract.
        unsafe { fenced_put_if(f, key, data, len, if_version, version_out) }
    })
}

/// Delete `key` under the shared grant `g` unless a holder of the lock with a higher epoch has
/// written it (then `LEASE_FENCED`), as `lease_fenced_delete` does under a lease. Needs a store
/// with conditional deletes (the file and memory stores, and S3 where the URL says
/// `conditional_delete=true`); elsewhere it returns `LEASE_STORE` and deletes nothing. A
/// deleted key carries no fence any more. Blocks.
///
/// On success writes to `*deleted_out` (when not NULL) 1 if an object was deleted, 0 if there
/// was none.
///
/// # Safety
/// `g` is NULL or a live grant; `key` is NULL or a NUL-terminated string; `deleted_out` is NULL
/// or points to a writable int; `err` is NULL or points to writable storage for a pointer. Must
/// not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_fenced_delete(
    g: *const lease_shared_grant,
    key: *const c_char,
    deleted_out: *mut c_int,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract.
    call_here(err, || unsafe {
        fenced_delete(Fencer::grant(g)?, key, deleted_out)
    })
}

/// Where the fenced calls of the shared grant `g` put `key`: its key in the store, from the
/// store's root, read as `lease_object_key` reads it for a lease, from the lock's directory
/// (`x` beside the lock, `jobs/x` below it, `../x` one level up, never above the store's root:
/// `LEASE_INVALID`; `/x` from the store's root). Pass it to `lease_fenced_get` to read what
/// `lease_shared_grant_fenced_put` wrote. Does not block.
///
/// On success writes a new string to `*key_out` (free it with `lease_string_free`).
///
/// # Safety
/// `g` is NULL or a live grant; `key` is NULL or a NUL-terminated string; `key_out` points to
/// writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_object_key(
    g: *const lease_shared_grant,
    key: *const c_char,
    key_out: *mut *mut c_char,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract.
    call_here(err, || unsafe {
        object_key(Fencer::grant(g)?, key, key_out)
    })
}

/// Read the object at `key` (placed as `lease_shared_grant_fenced_put` places it) and fence it
/// with the shared grant's token, as `lease_fenced_read` does with a lease's: from then on no
/// holder whose grant ended before this one began can change it. The first read of an object
/// under a grant writes it back unchanged with this token in its metadata (1 GET + 1 PUT);
/// reading it again costs 1 GET. Where nothing is, it leaves an empty marker that fenced reads
/// see as absent. Returns `LEASE_FENCED` when a later conflicting grant wrote or fenced the
/// object (this grant has ended). Blocks.
///
/// On success writes to `*out` a new object (free it with `lease_object_free`), or NULL when
/// there is no object at `key`.
///
/// # Safety
/// `g` is NULL or a live grant; `key` is NULL or a NUL-terminated string; `out` points to
/// writable storage for a pointer; `err` is NULL or points to writable storage for a pointer.
/// Must not be called from a runtime thread (a lost callback): that returns `LEASE_INVALID`.
#[no_mangle]
pub unsafe extern "C" fn lease_shared_grant_fenced_read(
    g: *const lease_shared_grant,
    key: *const c_char,
    out: *mut *mut lease_object,
    err: *mut *mut lease_error,
) -> lease_code {
    // SAFETY: the caller's contract.
    call_here(err, || unsafe { fenced_read(Fencer::grant(g)?, key, out) })
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
/// `o` is NULL or an object from `lease_fenced_get`, `lease_fenced_read` or
/// `lease_shared_grant_fenced_read`, not freed before.
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
    pub(crate) rt: Arc<Rt>,
    pub(crate) gate: FencingGate,
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
