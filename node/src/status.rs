//! Reading leases: `status()` and `watch()`, and the shapes they resolve to.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{Env, External, Result, Unknown};
use napi_derive::napi;

use crate::acquire::{client, next_or_cancelled, token, Cancel};
use crate::{error, options, runtime};

/// Turn `ttl_ms`-style keys into `ttlMs`.
pub(crate) fn camel(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let mut out = String::with_capacity(k.len());
                    let mut up = false;
                    for c in k.chars() {
                        if c == '_' {
                            up = true;
                        } else if up {
                            out.extend(c.to_uppercase());
                            up = false;
                        } else {
                            out.push(c);
                        }
                    }
                    (out, camel(v))
                })
                .collect(),
        ),
        // Arrays too: a queued lock's `holders` and `waiting` hold objects (`ttl_ms`).
        serde_json::Value::Array(a) => serde_json::Value::Array(a.into_iter().map(camel).collect()),
        other => other,
    }
}

fn status_json(s: &lease::Status) -> serde_json::Value {
    camel(s.to_json())
}

/// The lease at `url` as the store shows it now (needs only read permission).
#[napi(ts_args_type = "url: string", ts_return_type = "Promise<Status>")]
pub fn status<'e>(env: &'e Env, url: String) -> Result<Unknown<'e>> {
    runtime::call(
        env,
        async move {
            let (client, key) = client(&url)?;
            client.status(&key).await
        },
        |_, s| Ok(status_json(&s)),
    )
}

// The shapes below are what `status()`, `watch()` and `Election.leader()` resolve to. They are
// built as JSON (absent values are `null`, as in `lease status --json`, camelCased); these
// structs only declare them for index.d.ts.

/// A lease's status, as returned by `status()` and yielded by `watch()`.
#[napi(object)]
pub struct Status {
    pub url: String,
    /// `free` (no record), `held`, `released`, `expired` (held, but by the store's clock older
    /// than its ttl + grace + the clock's resolution: a waiter may take it over now), `broken`
    /// (broken by an operator with `lease break`: nobody takes it until the broken holder's
    /// deadline has surely passed, or that holder releases) or `corrupt`.
    #[napi(ts_type = "'free' | 'held' | 'released' | 'expired' | 'broken' | 'corrupt'")]
    pub state: String,
    /// The epoch of the last holder (`null` when free).
    #[napi(ts_type = "number | null")]
    pub epoch: Nullable,
    #[napi(ts_type = "Holder | null")]
    pub holder: Nullable,
    #[napi(ts_type = "number | null")]
    pub ttl_ms: Nullable,
    /// Estimated time until a waiter may take the lease over (ttl + grace + the clock's
    /// resolution after the last write, by the store's clock); the holder itself stops
    /// relying on it sooner.
    #[napi(ts_type = "number | null")]
    pub expires_in_ms: Nullable,
    #[napi(ts_type = "string | null")]
    pub data: Nullable,
    #[napi(ts_type = "string | null")]
    pub acquired_at: Nullable,
    #[napi(ts_type = "string | null")]
    pub renewed_at: Nullable,
    /// Why the record is corrupt, when it is.
    #[napi(ts_type = "string | null")]
    pub detail: Nullable,
    /// A queued lock's permits, when it is a semaphore (`null` otherwise, and for a lease).
    #[napi(ts_type = "number | null")]
    pub permits: Nullable,
    /// A queued lock's holders, in the order granted, each with its token (`null` for a lease).
    #[napi(ts_type = "Participant[] | null")]
    pub holders: Nullable,
    /// A queued lock's waiters, in arrival order (`null` for a lease).
    #[napi(ts_type = "Participant[] | null")]
    pub waiting: Nullable,
    /// A queued lock's grants still listed whose sessions show they hold no more (expired,
    /// broken, released, gone): the waiters remove them (`null` for a lease).
    #[napi(ts_type = "Participant[] | null")]
    pub departing: Nullable,
    /// The tenures before the current one, most recent first (at most 10).
    pub history: Vec<Tenure>,
}

/// A past tenure of a lease (`Status.history`): who held it, from when to when, and how it
/// ended.
#[napi(object)]
pub struct Tenure {
    pub epoch: f64,
    pub holder: Holder,
    #[napi(ts_type = "string | null")]
    pub acquired_at: Nullable,
    #[napi(ts_type = "string | null")]
    pub ended_at: Nullable,
    /// `released`, `expired` (taken over after its deadline), `broken` (by an operator, `by`)
    /// or `deleted` (the record was deleted while held).
    pub end: String,
    #[napi(ts_type = "string | null")]
    pub by: Nullable,
}

/// A holder or a waiter of a queued lock (`Status.holders`, `Status.departing`,
/// `Status.waiting`). Who it is, `since` and `data` come from its session.
#[napi(object)]
pub struct Participant {
    pub holder: Holder,
    #[napi(ts_type = "'exclusive' | 'shared'")]
    pub mode: String,
    /// `null` for the whole lock, `{ path }` or `{ start, end }` (bytes, the end excluded).
    #[napi(ts_type = "{ path: string } | { start: number; end: number } | null")]
    pub scope: Nullable,
    /// The grant's fencing token; `null` while waiting.
    #[napi(ts_type = "number | null")]
    pub token: Nullable,
    /// The ttl of its session, in milliseconds.
    pub ttl_ms: f64,
    /// When it joined the queue.
    #[napi(ts_type = "string | null")]
    pub since: Nullable,
    #[napi(ts_type = "string | null")]
    pub data: Nullable,
    /// What its session shows.
    #[napi(ts_type = "'live' | 'expired' | 'broken' | 'released' | 'gone' | 'unknown'")]
    pub session: String,
    /// A waiter's priority among competing waiters (higher goes first); 0 for a grant.
    pub priority: i32,
    /// How many later-joined waiters went before this one; at 8 it is due and goes next.
    pub passed: u32,
}

/// Who holds (or last held) a lease.
#[napi(object)]
pub struct Holder {
    /// Random per acquisition.
    pub id: String,
    #[napi(ts_type = "string | null")]
    pub label: Nullable,
    #[napi(ts_type = "string | null")]
    pub host: Nullable,
    #[napi(ts_type = "number | null")]
    pub pid: Nullable,
    #[napi(ts_type = "string | null")]
    pub user: Nullable,
    /// The library and language that wrote the record, e.g. `lease 0.1.0 (node)`.
    #[napi(ts_type = "string | null")]
    pub client: Nullable,
}

/// Stands in for a value that may be `null` in the declarations above.
pub type Nullable = napi::bindgen_prelude::Null;

/// Options of `watch` and `Election.observe`.
#[napi(object)]
pub struct WatchOptions {
    /// How often to re-read the record, in milliseconds (default 1000). Changes made by this
    /// process are seen at once.
    pub poll_interval: Option<f64>,
    /// Ends the iteration: the loop throws an `AbortError`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<options::Signal>,
}

const DEFAULT_WATCH_POLL: Duration = Duration::from_secs(1);

pub(crate) fn watch_poll(options: &Option<WatchOptions>) -> lease::Result<Duration> {
    match options.as_ref().and_then(|o| o.poll_interval) {
        Some(p) => options::millis("pollInterval", p),
        None => Ok(DEFAULT_WATCH_POLL),
    }
}

/// Reads the changes of one lease; `watch()` iterates over it with `_watchNext`.
pub type Watcher = Arc<tokio::sync::Mutex<lease::Watcher>>;

/// The next change (the current status on the first call).
#[napi(js_name = "_watchNext", skip_typescript)]
pub fn watch_next<'e>(
    env: &'e Env,
    watcher: &External<Watcher>,
    cancel: Option<Cancel>,
) -> Result<Unknown<'e>> {
    let inner = (**watcher).clone();
    let cancel = token(cancel);
    runtime::call(
        env,
        async move {
            let mut w = inner.lock().await;
            next_or_cancelled(w.next(), cancel, "watch").await
        },
        |_, s| Ok(status_json(&s)),
    )
}

/// Watch the lease at `url`: yields its status now, then each change of holder, epoch, state or
/// data (renewals are not changes).
#[napi(
    ts_args_type = "url: string, options?: WatchOptions",
    ts_return_type = "AsyncIterableIterator<Status>"
)]
pub fn watch(env: &Env, url: String, options: Option<WatchOptions>) -> Result<External<Watcher>> {
    let rt = runtime::handle()?;
    let _entered = rt.enter();
    let w = (|| {
        let poll = watch_poll(&options)?;
        let (client, key) = client(&url)?;
        client.watch(&key, poll)
    })()
    .map_err(|e| error::to_napi(env, &e))?;
    Ok(External::new(Arc::new(tokio::sync::Mutex::new(w))))
}
