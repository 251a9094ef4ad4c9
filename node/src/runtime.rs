//! The addon's own tokio runtime, and the one way a core future becomes a JavaScript promise.
//!
//! Every store request, renewal and wait runs on this runtime's two worker threads, never on the
//! JavaScript thread and never on a runtime some other addon started (slatedb #1813: a library
//! that inherited a host's runtime hung once that runtime was busy or gone). Node knows nothing
//! of these threads, so they never keep a process alive; a renewal goes on while the event loop
//! is blocked.
//!
//! The runtime is built on first use and lives as long as the process: it is shared by the main
//! thread and every `worker_threads` worker, so a worker that exits cannot take it down under the
//! others. Node starts processes with `spawn` (fork + exec), so no forked copy of it ever runs.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

use std::task::{Context, Poll};

use futures::FutureExt;
use napi::bindgen_prelude::{JsValue, Object, ToNapiValue, Unknown};
use napi::{Env, Result};
use tokio::runtime::{Handle, Runtime};

use crate::error;

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// The addon's runtime.
pub fn handle() -> Result<Handle> {
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lease-node")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match rt {
        Ok(rt) => Ok(rt.handle().clone()),
        Err(e) => Err(napi::Error::from_reason(format!(
            "cannot start the lease runtime: {e}"
        ))),
    }
}

type Resolver<D> = Box<dyn FnOnce(Env) -> Result<D>>;

/// Run `fut` on the runtime and return a promise of its outcome: `convert` turns a success into
/// a JavaScript value and runs on the JavaScript thread; an error becomes the library's error
/// object (`error::to_js`). A panic inside the future is caught and rejects the promise with a
/// `LEASE_INTERNAL` error instead of leaving it pending forever.
///
/// While the promise is pending it keeps the event loop alive (a program awaiting an acquire
/// waits for it); once settled it does not.
pub fn promise<T, D, F, C>(env: &Env, fut: F, convert: C) -> Result<Object<'_>>
where
    T: Send + 'static,
    D: ToNapiValue + 'static,
    F: Future<Output = lease::Result<T>> + Send + 'static,
    C: FnOnce(&Env, T) -> Result<D> + Send + 'static,
{
    let rt = handle()?;
    let (deferred, promise) = env.create_deferred::<D, Resolver<D>>()?;
    rt.spawn(async move {
        let out = flatten(AssertUnwindSafe(fut).catch_unwind().await);
        deferred.resolve(Box::new(move |env: Env| match out {
            Ok(v) => convert(&env, v),
            Err(e) => Err(error::to_napi(&env, &e)),
        }));
    });
    Ok(promise)
}

/// Like `promise`, but first polls `fut` once on the calling (JavaScript) thread, inside the
/// runtime's context: a call that completes at once (the memory store, an answer the core
/// already knows, a bad argument) returns its value (or throws) without two thread hand-offs;
/// otherwise the future moves to the runtime and a promise is returned. Only for calls behind
/// an `async` function of index.js, which turns either outcome into a promise.
///
/// This never blocks the event loop: the stores never block inside a poll (the file store
/// runs its system calls with `spawn_blocking`, S3 is asynchronous I/O), so a first poll
/// returns `Pending` as soon as it would wait.
pub fn call<'e, T, D, F, C>(env: &'e Env, fut: F, convert: C) -> Result<Unknown<'e>>
where
    T: Send + 'static,
    D: ToNapiValue + 'static,
    F: Future<Output = lease::Result<T>> + Send + 'static,
    C: FnOnce(&Env, T) -> Result<D> + Send + 'static,
{
    let rt = handle()?;
    let mut fut = Box::pin(AssertUnwindSafe(fut).catch_unwind());
    let first = {
        let _entered = rt.enter();
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        fut.as_mut().poll(&mut cx)
    };
    match first {
        Poll::Ready(out) => match flatten(out) {
            Ok(v) => {
                let d = convert(env, v)?;
                let raw = unsafe { D::to_napi_value(env.raw(), d)? };
                Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), raw) })
            }
            Err(e) => Err(error::to_napi(env, &e)),
        },
        // Spawned tasks are polled at least once, so the wake-up registered with the no-op
        // waker above is not lost: the runtime's poll registers its own.
        Poll::Pending => promise(env, fut.map(flatten), convert).map(|p| p.to_unknown()),
    }
}

fn flatten<T>(
    out: std::result::Result<lease::Result<T>, Box<dyn std::any::Any + Send>>,
) -> lease::Result<T> {
    match out {
        Ok(out) => out,
        Err(panic) => Err(lease::Error::internal(format!(
            "a lease call panicked: {}",
            panic_message(&panic)
        ))),
    }
}

pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}
