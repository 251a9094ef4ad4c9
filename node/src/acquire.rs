//! Acquiring: `acquire`, `tryAcquire`, and the cancel tokens the JavaScript layer makes from
//! `AbortSignal`s.

use napi::bindgen_prelude::{Env, External, ExternalRef, Result, Unknown};
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

use crate::held::Lease;
use crate::options::LeaseOptions;
use crate::runtime;

/// Cancels a waiting call: the JavaScript layer makes one per `AbortSignal` (an opaque
/// `External`, so the public types stay those of index.js).
pub type Cancel = ExternalRef<CancellationToken>;

#[napi(js_name = "_cancelToken", skip_typescript)]
pub fn cancel_token() -> External<CancellationToken> {
    External::new(CancellationToken::new())
}

#[napi(js_name = "_cancel", skip_typescript)]
pub fn cancel(token: &External<CancellationToken>) {
    token.cancel();
}

pub(crate) fn token(cancel: Option<Cancel>) -> CancellationToken {
    cancel.map_or_else(CancellationToken::new, |c| (*c).clone())
}

/// `next`, unless `cancel` fires first: then `Cancelled`, saying `what` was cancelled (the
/// iterators of `watch()` and `Election.observe()`).
pub(crate) async fn next_or_cancelled<T>(
    next: impl std::future::Future<Output = lease::Result<T>>,
    cancel: CancellationToken,
    what: &str,
) -> lease::Result<T> {
    tokio::select! {
        r = next => r,
        _ = cancel.cancelled() => Err(lease::Error::new(
            lease::ErrorKind::Cancelled,
            format!("{what} was cancelled"),
        )),
    }
}

/// The shared client of the lease URL's store, and the lease's key.
pub(crate) fn client(url: &str) -> lease::Result<(lease::Client, String)> {
    lease::Client::for_url(url)
}

/// Acquire the lease at `url`, waiting as `options.wait` says (default: as long as it takes).
/// Rejects with `LEASE_TIMEOUT` when the wait runs out, `LEASE_HELD` when `wait` is 0 and
/// someone else holds it, an `AbortError` when `options.signal` aborts.
#[napi(
    ts_args_type = "url: string, options?: LeaseOptions",
    ts_return_type = "Promise<Lease>"
)]
pub fn acquire<'e>(
    env: &'e Env,
    url: String,
    options: Option<LeaseOptions>,
    cancel: Option<Cancel>,
) -> Result<Unknown<'e>> {
    let opts = options.unwrap_or_default().to_core();
    let cancel = token(cancel);
    runtime::call(
        env,
        async move {
            let opts = opts?;
            let (client, key) = client(&url)?;
            client.acquire_with_cancel(&key, &opts, &cancel).await
        },
        |env, l| Ok(Lease::register(env, l)),
    )
}

/// Try once: the lease, or `null` when someone else holds it.
#[napi(
    ts_args_type = "url: string, options?: Omit<LeaseOptions, 'wait' | 'signal'>",
    ts_return_type = "Promise<Lease | null>"
)]
pub fn try_acquire<'e>(
    env: &'e Env,
    url: String,
    options: Option<LeaseOptions>,
) -> Result<Unknown<'e>> {
    let opts = options.unwrap_or_default().to_core();
    runtime::call(
        env,
        async move {
            let opts = opts?;
            let (client, key) = client(&url)?;
            client.try_acquire(&key, &opts).await
        },
        |env, l| Ok(l.map(|l| Lease::register(env, l))),
    )
}
