//! Node.js bindings of lease: a napi-rs addon over the core crate.
//!
//! The JavaScript layer (`node/index.js`) checks argument types, turns `AbortSignal`s into
//! `CancelToken`s, and adds what only JavaScript can (`Symbol.asyncDispose`, `AbortSignal`s,
//! async iterators). Everything else is here: each call starts a core future on the addon's own
//! runtime (`rt.rs`) and returns a promise; errors are mapped once (`errors.rs`).

#![deny(clippy::all)]
// Under cfg(test) napi registers nothing, so the exported items look unused.
#![cfg_attr(test, allow(dead_code))]

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{Env, External, ExternalRef, Object, Result, Unknown};
use napi_derive::napi;
use tokio_util::sync::CancellationToken;

mod errors;
mod fence;
mod held;
mod options;
mod rt;

pub use held::Lease;
pub use options::LeaseOptions;

/// The library version (equal to the npm package's and every other binding's).
#[napi]
pub const VERSION: &str = lease::VERSION;

/// Once per JavaScript environment (the main thread, each worker thread): name this client in
/// lease records, and release what the environment still holds when it ends.
#[napi(module_exports)]
pub fn init(_exports: Object, env: Env) -> Result<()> {
    lease::set_client_name("node");
    let raw = env.raw() as usize;
    env.add_env_cleanup_hook(raw, held::release_all)?;
    Ok(())
}

/// Release what this JavaScript environment still holds, now (index.js calls it from
/// `process.on('exit')`, which `process.exit()` fires but after which the environment's cleanup
/// hook does not run).
#[napi(js_name = "_releaseAll", skip_typescript)]
pub fn release_all(env: Env) {
    held::release_all(env.raw() as usize);
}

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

fn token(cancel: Option<Cancel>) -> CancellationToken {
    cancel.map_or_else(CancellationToken::new, |c| (*c).clone())
}

/// The shared client of the lease URL's store, and the lease's key.
fn client(url: &str) -> lease::Result<(lease::Client, String)> {
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
    rt::call(
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
    rt::call(
        env,
        async move {
            let opts = opts?;
            let (client, key) = client(&url)?;
            client.try_acquire(&key, &opts).await
        },
        |env, l| Ok(l.map(|l| Lease::register(env, l))),
    )
}

/// Turn `ttl_ms`-style keys into `ttlMs`.
fn camel(v: serde_json::Value) -> serde_json::Value {
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
        other => other,
    }
}

fn status_json(s: &lease::Status) -> serde_json::Value {
    camel(s.to_json())
}

/// The lease at `url` as the store shows it now (needs only read permission).
#[napi(ts_args_type = "url: string", ts_return_type = "Promise<Status>")]
pub fn status<'e>(env: &'e Env, url: String) -> Result<Unknown<'e>> {
    rt::call(
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

/// The leader of an election.
#[napi(object)]
pub struct Leader {
    pub holder: Holder,
    /// The leader's fencing token.
    pub epoch: f64,
    /// What the leader published (`options.data`).
    #[napi(ts_type = "string | null")]
    pub data: Nullable,
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

fn watch_poll(options: &Option<WatchOptions>) -> lease::Result<Duration> {
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
    rt::call(
        env,
        async move {
            let mut w = inner.lock().await;
            tokio::select! {
                s = w.next() => s,
                _ = cancel.cancelled() => Err(lease::Error::new(lease::ErrorKind::Cancelled, "watch was cancelled")),
            }
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
    let rt = rt::handle()?;
    let _entered = rt.enter();
    let w = (|| {
        let poll = watch_poll(&options)?;
        let (client, key) = client(&url)?;
        client.watch(&key, poll)
    })()
    .map_err(|e| errors::to_napi(env, &e))?;
    Ok(External::new(Arc::new(tokio::sync::Mutex::new(w))))
}

/// `{ id, label, host, pid, user, client }`, absent fields as `null` (as in `status()`).
fn holder_json(h: &lease::Holder) -> serde_json::Value {
    serde_json::json!({
        "id": h.id,
        "label": h.label,
        "host": h.host,
        "pid": h.pid,
        "user": h.user,
        "client": h.client,
    })
}

/// `{ holder, epoch, data }`, or `null` when nobody leads.
fn leader_json(l: Option<lease::Leader>) -> serde_json::Value {
    match l {
        Some(l) => serde_json::json!({
            "holder": holder_json(&l.holder),
            "epoch": l.epoch,
            "data": l.data,
        }),
        None => serde_json::Value::Null,
    }
}

/// Options of `Election.campaign`.
#[napi(object)]
pub struct CampaignOptions {
    /// Cancels the campaign: the promise rejects with an `AbortError`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<options::Signal>,
}

/// One participant in a leader election on one lease: `campaign()` resolves once it leads
/// (holding the lease), `resign()` releases it, `leader()` and `observe()` tell everyone who
/// leads and at which epoch.
#[napi]
pub struct Election {
    inner: Arc<lease::Election>,
}

#[napi]
impl Election {
    /// `options.wait` bounds how long `campaign` waits (default: as long as it takes);
    /// `options.data` is published while this participant leads. (A campaign's own
    /// `signal` goes to `campaign()`.)
    #[napi(
        constructor,
        ts_args_type = "url: string, options?: Omit<LeaseOptions, 'signal'>"
    )]
    pub fn new(env: Env, url: String, options: Option<LeaseOptions>) -> Result<Election> {
        // Opening an S3 store builds its HTTP client, which wants a runtime context.
        let rt = rt::handle()?;
        let _entered = rt.enter();
        let e = (|| {
            let opts = options.unwrap_or_default().to_core()?;
            let (client, key) = client(&url)?;
            // Bad options fail here, not at the first campaign.
            opts.timing(&client.store().capabilities())?;
            Ok(lease::Election::new(client, key, opts))
        })()
        .map_err(|e: lease::Error| errors::to_napi(&env, &e))?;
        Ok(Election { inner: Arc::new(e) })
    }

    /// Resolve once this participant leads, with its lease (the current one if it already
    /// leads).
    #[napi(
        ts_args_type = "options?: CampaignOptions",
        ts_return_type = "Promise<Lease>"
    )]
    pub fn campaign<'e>(&self, env: &'e Env, cancel: Option<Cancel>) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        let cancel = token(cancel);
        rt::call(
            env,
            async move { inner.campaign_with_cancel(&cancel).await },
            |env, l| Ok(Lease::register(env, l)),
        )
    }

    /// Stop leading (release the lease); does nothing when not leading.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn resign<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        rt::call(env, async move { inner.resign().await }, |_, ()| Ok(()))
    }

    /// Who leads now (`null`: nobody).
    #[napi(ts_return_type = "Promise<Leader | null>")]
    pub fn leader<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        rt::call(env, async move { inner.leader().await }, |_, l| {
            Ok(leader_json(l))
        })
    }

    /// Whether this participant leads now.
    #[napi(getter)]
    pub fn is_leader(&self) -> bool {
        self.inner.lease().is_some()
    }

    /// Leadership changes: yields the leader now, then each change of leader or epoch
    /// (`null`: nobody leads).
    #[napi(
        ts_args_type = "options?: WatchOptions",
        ts_return_type = "AsyncIterableIterator<Leader | null>"
    )]
    pub fn observe(
        &self,
        env: Env,
        options: Option<WatchOptions>,
    ) -> Result<External<LeaderWatch>> {
        let w = watch_poll(&options)
            .and_then(|poll| self.inner.observe(poll))
            .map_err(|e| errors::to_napi(&env, &e))?;
        Ok(External::new(Arc::new(tokio::sync::Mutex::new(w))))
    }
}

/// Reads leadership changes; `Election.observe()` iterates over it with `_leaderNext`.
pub type LeaderWatch = Arc<tokio::sync::Mutex<lease::LeaderWatch>>;

#[napi(js_name = "_leaderNext", skip_typescript)]
pub fn leader_next<'e>(
    env: &'e Env,
    watcher: &External<LeaderWatch>,
    cancel: Option<Cancel>,
) -> Result<Unknown<'e>> {
    let inner = (**watcher).clone();
    let cancel = token(cancel);
    rt::call(
        env,
        async move {
            let mut w = inner.lock().await;
            tokio::select! {
                l = w.next() => l,
                _ = cancel.cancelled() => Err(lease::Error::new(lease::ErrorKind::Cancelled, "observe was cancelled")),
            }
        },
        |_, l| Ok(leader_json(l)),
    )
}

/// Tests only: the stable names of every kind the core has (`ErrorKind::ALL`), so the tests can
/// check that each one has its own code.
#[napi(js_name = "_errorKinds", skip_typescript)]
pub fn error_kinds() -> Vec<&'static str> {
    lease::ErrorKind::ALL.iter().map(|k| k.as_str()).collect()
}

/// Tests only: the error object the mapping gives for a core error of kind `kind` (its stable
/// lower-case name), so kinds no public call can provoke on demand are checked through the same
/// code path as the rest.
#[napi(js_name = "_errorForKind", skip_typescript)]
pub fn error_for_kind<'e>(
    env: &'e Env,
    kind: String,
    message: String,
    url: Option<String>,
    epoch: Option<f64>,
    holder_id: Option<String>,
) -> Result<Object<'e>> {
    let Some(kind) = lease::ErrorKind::from_name(&kind) else {
        return Err(errors::invalid(env, format!("unknown error kind {kind:?}")));
    };
    let mut e = lease::Error::new(kind, message);
    if let Some(url) = url {
        e = e.with_lease(url);
    }
    if let Some(epoch) = epoch {
        e = e.with_epoch(epoch as u64);
    }
    if let Some(id) = holder_id {
        e = e.with_holder(lease::Holder {
            id,
            ..lease::Holder::default()
        });
    }
    errors::to_js(env, &e)
}
