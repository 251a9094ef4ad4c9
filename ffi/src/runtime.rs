//! `lease_runtime`: the tokio runtime every handle made from it runs on.

use std::ffi::c_char;
use std::future::Future;
use std::sync::Arc;

use crate::{boundary::*, error::*};

/// A tokio runtime shared by the handles made from it: stores and leases keep it alive, so it
/// shuts down when the last of `lease_runtime_free`, `lease_store_free`, `lease_free` runs.
pub(crate) struct Rt {
    pub(crate) runtime: Option<tokio::runtime::Runtime>,
}

pub(crate) fn on_runtime_thread() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// `LEASE_INVALID` on a runtime thread, where a blocking call would stall renewals (and tokio
/// would panic): what [`Rt::block_on`] checks, for calls that must refuse before they change
/// anything.
pub(crate) fn not_on_runtime_thread() -> Result<(), Failure> {
    if on_runtime_thread() {
        return Err(Failure::invalid(
            "a blocking liblease call was made from a runtime thread (inside a lost \
             callback?): call it from another thread",
        ));
    }
    Ok(())
}

impl Rt {
    pub(crate) fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is present until dropped")
    }

    /// Block the calling thread on `f`, refusing to do so on a runtime thread (where tokio
    /// would panic, and where blocking would stall renewals).
    pub(crate) fn block_on<F: Future>(&self, f: F) -> Result<F::Output, Failure> {
        not_on_runtime_thread()?;
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

/// This process's own runtime, for what belongs to the process rather than to a handle the
/// program made (the per-process shared sessions, `lease_acquire_on_process_session`): started
/// on first use with the defaults of `lease_runtime_new`, kept to the process's end. A forked
/// child starts its own on its first use (the parent's threads do not exist there; its handle
/// is leaked, never dropped).
pub(crate) fn process_runtime() -> Result<Arc<Rt>, Failure> {
    static PROCESS: std::sync::Mutex<Option<(u32, Arc<Rt>)>> = std::sync::Mutex::new(None);
    let me = std::process::id();
    let mut slot = PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((pid, rt)) = slot.as_ref() {
        if *pid == me {
            return Ok(rt.clone());
        }
    }
    std::mem::forget(slot.take());
    let rt = Arc::new(new_rt(2, "c")?);
    *slot = Some((me, rt.clone()));
    Ok(rt)
}

/// A runtime of `threads` workers; the process's client name is `name` unless one was set
/// before (the first runtime sets it).
fn new_rt(threads: usize, name: &str) -> Result<Rt, Failure> {
    watch_forks();
    lease_core::set_client_name(name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("lease-rt")
        .enable_all()
        .build()
        .map_err(|e| Failure::new(LEASE_INTERNAL, format!("cannot start a runtime: {e}")))?;
    Ok(Rt {
        runtime: Some(runtime),
    })
}

/// A runtime: the threads that renew leases and run store requests. One per process is
/// usual; every store and lease made from it keeps it alive.
pub struct lease_runtime {
    pub(crate) rt: Arc<Rt>,
}

/// Options of `lease_runtime_new`. Start from `lease_runtime_options_default()`. The struct
/// grows at its end as options are added (docs/ffi.md, "Options").
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lease_runtime_options {
    /// `sizeof(lease_runtime_options)` as the program was compiled: set by
    /// `lease_runtime_options_default()`; leave it. 0 is `LEASE_INVALID`.
    pub struct_size: usize,
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
        struct_size: std::mem::size_of::<lease_runtime_options>(),
        worker_threads: 0,
        client_name: std::ptr::null(),
    }
}

/// The first `lease_runtime_options` with `struct_size` ends at `client_name`: the smallest a
/// caller may pass. Options added later go after it, and the struct ends with no padding (as
/// `lease_options`, checked below).
const RUNTIME_OPTIONS_MIN_SIZE: usize =
    std::mem::offset_of!(lease_runtime_options, client_name) + std::mem::size_of::<*const c_char>();
const _: () = assert!(
    std::mem::size_of::<lease_runtime_options>() == RUNTIME_OPTIONS_MIN_SIZE,
    "lease_runtime_options must end without padding at its last field"
);

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
        let opts = unsafe {
            sized_options(
                opts,
                "lease_runtime_options",
                lease_runtime_options_default(),
                RUNTIME_OPTIONS_MIN_SIZE,
            )
        }?;
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
        let rt = Box::new(lease_runtime {
            rt: Arc::new(new_rt(threads, name)?),
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
