//! The extension's tokio runtime, fork detection, and the two ways Python waits for core futures:
//! blocking (GIL released, Ctrl-C checked between short slices) and asyncio (the future runs on
//! the runtime and settles an `asyncio.Future` through a callback run on a thread of ours).
//!
//! The runtime's threads run every renewal, so they never wait for the GIL: whatever needs
//! Python (asyncio results, `on_lost` callbacks, log records) is handed to a courier thread
//! (`Courier`), and only those threads wait for the GIL.
//!
//! A tokio runtime does not survive `fork()`: its worker threads exist only in the parent. The
//! runtime is therefore tagged with the PID that built it; a forked child that calls into the
//! library builds a fresh one and leaks the parent's copy (dropping it would wait for threads
//! that do not exist in the child). Every helper thread (the couriers below) is handled the same
//! way.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::{Handle, Runtime};
use tokio_util::sync::CancellationToken;

/// How long a blocking call waits before it checks for Ctrl-C (and other signals).
const SIGNAL_SLICE: Duration = Duration::from_millis(20);

/// Set by the `atexit` hook: from then on nothing calls back into Python from other threads.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Threads of ours that are inside (or about to enter) `with_python`.
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// How long the `atexit` hook waits for callbacks already running to finish.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);

pub fn shutting_down() -> bool {
    SHUTTING_DOWN.load(Ordering::SeqCst)
}

/// Run `f` with the GIL from one of our courier threads, unless the interpreter is shutting
/// down.
///
/// Why the count: once finalization has begun, a foreign thread that waits for the GIL is ended
/// by CPython with `pthread_exit`, whose unwinding runs pyo3's guard and releases a thread state
/// that is not current: a fatal error at exit ("PyGILState_Release: thread state … must be
/// current"). The `atexit` hook runs before finalization; it raises the flag and then waits for
/// this count to reach zero, so no thread of ours is near the GIL when finalization starts.
/// (Increment, then check the flag; the hook sets the flag, then reads the count: both SeqCst,
/// so at least one side sees the other.)
fn with_python<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    let out = if shutting_down() {
        None
    } else {
        Python::try_attach(f)
    };
    IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
    out
}

/// Called from the `atexit` hook: stop calling into Python from our threads, and wait (GIL
/// released, bounded) for those already calling to finish.
pub fn shut_down(py: Python<'_>) {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    // Real time on purpose: a bounded wait at interpreter exit.
    #[allow(clippy::disallowed_methods)]
    py.detach(|| {
        let start = std::time::Instant::now();
        while IN_PYTHON.load(Ordering::SeqCst) > 0 && start.elapsed() < SHUTDOWN_DRAIN {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// This process's id, kept up to date by a `pthread_atfork` child handler (getpid is a system
/// call, and this is read on every call).
static PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    PID.store(std::process::id(), Ordering::Release);
}

/// Record the PID and register the fork handler (once, at module import).
pub fn init_pid() {
    PID.store(std::process::id(), Ordering::Release);
    // SAFETY: registers a handler that only stores an integer; it runs in the child after
    // fork(), where async-signal-safe code is required, and a store and getpid are that.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    }
}

pub fn pid() -> u32 {
    match PID.load(Ordering::Acquire) {
        0 => std::process::id(),
        p => p,
    }
}

/// The runtime of this process. Built on first use; rebuilt in a forked child.
///
/// Only called with the GIL held (or from the runtime's own threads through `Handle::current`),
/// so a `fork()` — which Python performs with the GIL held — never finds the lock taken.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

pub fn handle() -> PyResult<Handle> {
    let me = pid();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((owner, rt)) = *slot {
        if owner == me {
            return Ok(rt.handle().clone());
        }
        // A forked child: the parent's runtime has no threads here. Leak it.
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lease-runtime")
        .enable_all()
        .build()
        .map_err(|e| {
            crate::error::to_py(lease::Error::internal(format!(
                "cannot start the lease runtime: {e}"
            )))
        })?;
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *slot = Some((me, rt));
    Ok(rt.handle().clone())
}

/// True on a thread where blocking on the runtime would deadlock or panic: one of the runtime's
/// own threads, or inside a `block_on`.
fn on_runtime_thread() -> bool {
    Handle::try_current().is_ok()
}

/// Run `fut` to completion on the runtime while this thread waits with the GIL released.
///
/// The future is polled on the calling thread (so an uncontended call costs no thread switch);
/// the runtime's workers drive its timers and I/O. Every `SIGNAL_SLICE` the GIL is taken back to
/// run Python's signal handlers: if one raises (Ctrl-C → `KeyboardInterrupt`), `cancel` is
/// cancelled, the rest of the future is handed to the runtime to finish in the background (an
/// acquire whose write was already sent resolves it and releases what it got), and the
/// exception is returned at once.
pub fn block<F>(py: Python<'_>, fut: F, cancel: Option<&CancellationToken>) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if on_runtime_thread() {
        return Err(crate::error::to_py(lease::Error::invalid(
            "a blocking lease call was made on the library's runtime thread; use the *_async \
             variant or another thread",
        )));
    }
    let h = handle()?;
    let mut fut = Box::pin(fut);
    // Most calls finish without waiting (an uncontended acquire, a release): poll once
    // before arming the signal-check timer.
    let first = {
        let _entered = h.enter();
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    };
    if let Some(out) = first {
        return Ok(out);
    }
    // Real time on purpose: how often a waiting Python thread looks at its signals.
    #[allow(clippy::disallowed_methods)]
    loop {
        let step = py.detach(|| {
            h.block_on(async { tokio::time::timeout(SIGNAL_SLICE, fut.as_mut()).await.ok() })
        });
        if let Some(out) = step {
            return Ok(out);
        }
        if let Err(e) = py.check_signals() {
            if let Some(c) = cancel {
                c.cancel();
            }
            h.spawn(async move {
                let _ = fut.await;
            });
            return Err(e);
        }
    }
}

/// A job for a delivery thread: runs there with the GIL.
type Job = Box<dyn FnOnce(Python<'_>) + Send>;

/// A thread of ours that alone waits for the GIL and runs jobs with it, one at a time, in the
/// order they were sent. Runtime threads never wait for the GIL themselves: the core's renewals
/// run on those threads, and C code (or a Python thread waiting for one of the core's locks) may
/// hold the GIL for longer than a ttl. They hand their Python work to a courier instead.
///
/// There are two: `CALLBACKS` (the notifier thread of the docs) runs user code (`on_lost`
/// callbacks, `logging` handlers), which may block for long, even on an asyncio result;
/// `RESULTS` settles asyncio futures and runs no user code, so a slow callback never holds back
/// a result.
///
/// Each is reached through an atomic pointer, not a mutex: runtime threads send to it at any
/// moment, and a `fork()` at that moment must not leave the child a lock that nobody will
/// release. A child sees the parent's PID in it and starts its own (the parent's is leaked).
struct Courier {
    thread_name: &'static str,
    running: AtomicPtr<Running>,
}

/// A courier's thread in one process: the PID that started it and the way to it.
struct Running {
    pid: u32,
    tx: mpsc::Sender<Job>,
}

static CALLBACKS: Courier = Courier::new("lease-notify");
static RESULTS: Courier = Courier::new("lease-settle");

impl Courier {
    const fn new(thread_name: &'static str) -> Self {
        Courier {
            thread_name,
            running: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn start(&self, me: u32) -> Option<&'static Running> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(self.thread_name.into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    // Dropped unrun once Python shuts down.
                    let _ = with_python(|py| {
                        // A panic in one job must not end the thread.
                        let _ = catch_unwind(AssertUnwindSafe(|| job(py)));
                    });
                }
            })
            .ok()?;
        Some(Box::leak(Box::new(Running { pid: me, tx })))
    }

    /// Queue `job`; never waits (safe on a runtime thread, with or without the core's locks).
    /// Dropped once Python shuts down.
    fn send(&self, job: Job) {
        if shutting_down() {
            return;
        }
        let me = pid();
        let current = self.running.load(Ordering::Acquire);
        // SAFETY: the pointer is null or a leaked, never freed `Running`.
        if let Some(r) = unsafe { current.as_ref() } {
            if r.pid == me {
                let _ = r.tx.send(job);
                return;
            }
        }
        let Some(fresh) = self.start(me) else {
            return;
        };
        let fresh_ptr = fresh as *const Running as *mut Running;
        let winner = match self.running.compare_exchange(
            current,
            fresh_ptr,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            // Another thread started one first: use it (ours idles, leaked, a rare race).
            // SAFETY: as above.
            Err(other) => unsafe { &*other },
        };
        let _ = winner.tx.send(job);
    }
}

/// Queue `job` (user code: an `on_lost` callback, a log record) to run with the GIL on the
/// callbacks thread. Dropped once Python shuts down.
pub fn notify(job: Job) {
    CALLBACKS.send(job);
}

/// Settle an asyncio future: once `fut` completes on the runtime, `done(ok, value)` is called
/// with the GIL on the results thread (never on a runtime thread: see `Courier`); the Python
/// side forwards it with `loop.call_soon_threadsafe`. `convert` turns the output into a Python
/// object, on that thread too.
pub fn spawn_settle<F, T>(
    py: Python<'_>,
    fut: F,
    done: Py<PyAny>,
    convert: impl FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
) -> PyResult<tokio::task::AbortHandle>
where
    F: Future<Output = Result<T, lease::Error>> + Send + 'static,
    T: Send + 'static,
{
    let _ = py;
    let h = handle()?;
    let task = h.spawn(async move {
        let out = fut.await;
        RESULTS.send(Box::new(move |py| {
            let (ok, value) = match out {
                Ok(v) => match convert(py, v) {
                    Ok(obj) => (true, obj),
                    Err(e) => (false, e.into_value(py).into_any()),
                },
                Err(e) => (false, crate::error::to_py(e).into_value(py).into_any()),
            };
            if let Err(e) = done.call1(py, (ok, value)) {
                e.write_unraisable(py, None);
            }
        }));
    });
    Ok(task.abort_handle())
}

/// An operation started for asyncio; `cancel()` stops it (an acquire is cancelled cleanly:
/// if its write already landed, the lease is released).
#[pyclass(module = "lease._lease", frozen)]
pub struct Pending {
    cancel: Option<CancellationToken>,
    abort: Option<tokio::task::AbortHandle>,
}

impl Pending {
    pub fn abort(abort: tokio::task::AbortHandle) -> Self {
        Pending {
            cancel: None,
            abort: Some(abort),
        }
    }

    /// Not stoppable: a release or resign goes on in the background if its caller stops
    /// waiting (stopping it halfway would leave the lease neither renewed nor released).
    pub fn detached() -> Self {
        Pending {
            cancel: None,
            abort: None,
        }
    }

    pub fn token(cancel: CancellationToken) -> Self {
        Pending {
            cancel: Some(cancel),
            abort: None,
        }
    }
}

#[pymethods]
impl Pending {
    fn cancel(&self) {
        if let Some(c) = &self.cancel {
            c.cancel();
        } else if let Some(a) = &self.abort {
            a.abort();
        }
    }
}
