//! Node.js bindings of lease: a napi-rs addon over the core crate.
//!
//! The JavaScript layer (`node/index.js`) checks argument types, turns `AbortSignal`s into
//! `CancelToken`s, and adds what only JavaScript can (`Symbol.asyncDispose`, `AbortSignal`s,
//! async iterators). Everything else is here: each call starts a core future on the addon's own
//! runtime (`runtime.rs`) and returns a promise; errors are mapped once (`error.rs`). The files
//! mirror the core's modules (and the Python binding's): `acquire`, `held` (a held lease),
//! `session` (shared sessions), `status`, `election`, `fence`, `options`, `error`, `runtime`.

#![deny(clippy::all)]
// Under cfg(test) napi registers nothing, so the exported items look unused.
#![cfg_attr(test, allow(dead_code))]

use napi::bindgen_prelude::{Env, Object, Result};
use napi_derive::napi;

mod acquire;
mod election;
mod error;
mod fence;
mod held;
mod options;
mod runtime;
mod session;
mod status;
mod yielding;

// Everything the addon exports. `Status`, `Participant`, `Grant`, `Holder`, `Leader` and
// `Nullable` only declare shapes for index.d.ts (the values are built as JSON): exported here so
// they are part of the addon's interface, not dead code of a private module.
pub use election::{CampaignOptions, Election, Leader};
pub use held::{Grant, Lease, YieldRequested};
pub use options::{LeaseOptions, SessionOptions};
pub use session::{Session, SharedGrant};
pub use status::{Holder, Nullable, Participant, Status, WatchOptions};
pub use yielding::{AskYieldOptions, YieldRequest};

/// The library version (equal to the npm package's and every other binding's).
#[napi]
pub const VERSION: &str = lease::VERSION;

/// Once per JavaScript environment (the main thread, each worker thread): name this client in
/// lease records, and release what the environment still holds when it ends (its leases; its
/// shared sessions, closed).
#[napi(module_exports)]
pub fn init(_exports: Object, env: Env) -> Result<()> {
    lease::set_client_name("node");
    let raw = env.raw() as usize;
    env.add_env_cleanup_hook(raw, held::release_all)?;
    env.add_env_cleanup_hook(raw, session::close_all)?;
    Ok(())
}

/// This process's lease metrics (the numbers every language shares): a list of `{ name, help,
/// type, samples }`, each sample `{ labels, value }` or, for a histogram, `{ labels, buckets:
/// [[le, cumulative count], …], sum, count }`. `bucket-lease/prometheus` hands them to
/// prom-client.
#[napi(ts_return_type = "MetricFamily[]")]
pub fn metrics() -> serde_json::Value {
    lease::metrics::snapshot().to_json()
}

/// This process's lease metrics in the Prometheus (OpenMetrics) text format.
#[napi]
pub fn metrics_text() -> String {
    lease::metrics::encode_text()
}

/// Release what this JavaScript environment still holds (its leases, and its shared sessions
/// closed with their grants), now (index.js calls it from
/// `process.on('exit')`, which `process.exit()` fires but after which the environment's cleanup
/// hook does not run).
#[napi(js_name = "_releaseAll", skip_typescript)]
pub fn release_all(env: Env) {
    held::release_all(env.raw() as usize);
    session::close_all(env.raw() as usize);
}
