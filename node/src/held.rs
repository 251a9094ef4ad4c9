//! The `Lease` class, and the registry that owns every held lease until it is released or lost.
//!
//! A JavaScript object's lifetime is the garbage collector's business, so it must not decide
//! when a lease ends: the registry keeps a handle of each held lease, and the lease stays held
//! (renewed in the background) until `release()`, a loss, or the end of the JavaScript
//! environment that acquired it (the main program or a worker thread): its cleanup hook releases
//! what that environment still holds, so the next holder need not wait out the ttl.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use napi::bindgen_prelude::{Buffer, Function, Unknown};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::{Env, Result};
use napi_derive::napi;

use crate::error;
use crate::options::{millis, ms, time, Time};
use crate::runtime;

struct Entry {
    /// The `napi_env` (as an address) of the environment that acquired the lease.
    env: usize,
    lease: lease::Lease,
}

static HELD: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn with_held<R>(f: impl FnOnce(&mut HashMap<u64, Entry>) -> R) -> R {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    f(held.get_or_insert_with(HashMap::new))
}

fn forget(id: u64) {
    let gone = with_held(|h| h.remove(&id));
    // Dropped outside the lock: the last handle of a lease that is still held releases it.
    drop(gone);
}

/// How long the end of an environment waits for the releases of the leases it still holds.
const RELEASE_AT_EXIT: Duration = Duration::from_secs(2);

/// Release every lease `env` still holds; called by its cleanup hook, on its own thread, when
/// the environment ends (the program finished, or a worker thread exited).
pub fn release_all(env: usize) {
    let leases: Vec<lease::Lease> = with_held(|h| {
        let ids: Vec<u64> = h
            .iter()
            .filter(|(_, e)| e.env == env)
            .map(|(id, _)| *id)
            .collect();
        ids.iter()
            .filter_map(|id| h.remove(id))
            .map(|e| e.lease)
            .collect()
    });
    if leases.is_empty() {
        return;
    }
    let Ok(rt) = runtime::handle() else { return };
    rt.block_on(async move {
        let all = futures::future::join_all(leases.iter().map(|l| l.release()));
        // Real time, bounding how long the end of the process waits: not protocol time.
        #[allow(clippy::disallowed_methods)]
        let _ = tokio::time::timeout(RELEASE_AT_EXIT, all).await;
    });
}

/// What a queued lock granted (`Lease.grant`). Built as JSON (absent values `null`); this
/// struct only declares its shape for index.d.ts.
#[napi(object)]
pub struct Grant {
    #[napi(ts_type = "'exclusive' | 'shared'")]
    pub mode: String,
    /// The fencing token (the lease's `epoch`): strictly increasing per lock across all modes.
    pub token: f64,
    /// The path held, or `null` (the whole lock, or a byte range).
    #[napi(ts_type = "string | null")]
    pub scope: napi::bindgen_prelude::Null,
    /// The bytes `[start, end)` held, or `null`.
    #[napi(ts_type = "[number, number] | null")]
    pub range: napi::bindgen_prelude::Null,
    /// The lock's permits, when it is a semaphore (`null` otherwise).
    #[napi(ts_type = "number | null")]
    pub permits: napi::bindgen_prelude::Null,
}

/// A grant as `Grant`'s JSON: `{ mode, token, scope, range, permits }` (`Lease.grant`,
/// `SharedGrant.grant`).
pub fn grant_json(g: &lease::Grant) -> serde_json::Value {
    let (scope, range) = match &g.scope {
        lease::Scope::Whole => (None, None),
        lease::Scope::Path(p) => (Some(p.as_str()), None),
        lease::Scope::Range { start, end } => (None, Some([*start, *end])),
    };
    serde_json::json!({
        "mode": g.mode.as_str(),
        "token": g.token,
        "scope": scope,
        "range": range,
        "permits": g.permits,
    })
}

/// A held lease. `epoch` is its fencing token; it renews itself in the background until
/// `release()` (or `await using` / `[Symbol.asyncDispose]`), or until it is lost, which aborts
/// `signal` and rejects `lost` with a `LEASE_LOST` error.
#[napi]
pub struct Lease {
    inner: lease::Lease,
    id: u64,
}

impl Lease {
    /// What fences this lease's fenced operations.
    fn fences(&self) -> crate::fence::Fences {
        crate::fence::Fences::Lease(self.inner.clone())
    }

    /// Wrap a freshly acquired lease and register it under the environment `env`.
    pub fn register(env: &Env, inner: lease::Lease) -> Lease {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        inner.on_lost(move |_| forget(id));
        let entry = Entry {
            env: env.raw() as usize,
            lease: inner.clone(),
        };
        let stale = with_held(|h| {
            // Leases given up some other way (an election's resign) leave the registry here.
            let stale: Vec<u64> = h
                .iter()
                .filter(|(_, e)| e.lease.remaining().is_zero())
                .map(|(id, _)| *id)
                .collect();
            let stale: Vec<Entry> = stale.iter().filter_map(|id| h.remove(id)).collect();
            h.insert(id, entry);
            stale
        });
        drop(stale);
        Lease { inner, id }
    }
}

#[napi]
impl Lease {
    /// The fencing token: strictly increasing per lease, unchanged by renewals and release.
    #[napi(getter)]
    pub fn epoch(&self) -> f64 {
        self.inner.epoch() as f64
    }

    /// The lease's URL.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.inner.url().to_string()
    }

    /// The lease's key inside its store.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.inner.key().to_string()
    }

    /// The ttl in milliseconds.
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        ms(self.inner.ttl())
    }

    /// The grant of a queued lock (`null` for a lease): its mode, token, scope, the lock's
    /// permits.
    #[napi(getter, ts_return_type = "Grant | null")]
    pub fn grant(&self) -> serde_json::Value {
        self.inner
            .grant()
            .map_or(serde_json::Value::Null, grant_json)
    }

    /// This holder as written in the record.
    #[napi(getter, ts_return_type = "Holder")]
    pub fn holder<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        error::holder_value(env, self.inner.holder())
    }

    /// `URL#EPOCH@HOLDER` (for a queued lock's shared or scoped grant followed by `;shared`,
    /// `;path=P`, `;range=A..B`): the token to hand to resources that check it (`parseToken`
    /// takes it apart).
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.inner.token().to_string()
    }

    /// Whether the lease is still held (false once released, lost, or past its deadline).
    #[napi(getter)]
    pub fn held(&self) -> bool {
        self.inner.is_held()
    }

    /// Why the lease was lost, once it was (`null` while held or after a release).
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.inner.lost_reason().map(|r| r.to_string())
    }

    /// Milliseconds this holder may still rely on the lease (0 once lost or released).
    #[napi]
    pub fn remaining(&self) -> f64 {
        ms(self.inner.remaining())
    }

    /// Return the milliseconds left if the lease is held for at least `minRemaining` ms more
    /// (default 0); otherwise throw a `LEASE_LOST` error. Call it before each step that needs
    /// the lease.
    #[napi]
    pub fn ensure_held(&self, env: &Env, min_remaining: Option<f64>) -> Result<f64> {
        let min = millis("minRemaining", min_remaining.unwrap_or(0.0))
            .map_err(|e| error::to_napi(env, &e))?;
        self.inner
            .ensure_held(min)
            .map(ms)
            .map_err(|e| error::to_napi(env, &e))
    }

    /// Renew now instead of waiting for the background renewal; resolves to the milliseconds
    /// left afterwards, rejects with `LEASE_LOST` if the lease is gone.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn renew<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        runtime::call(env, async move { inner.renew().await }, |_, d| Ok(ms(d)))
    }

    /// Change the lease's ttl (milliseconds, or a string with its unit such as `'1m'`, as
    /// `acquire`'s `ttl`): a renewal made at once writes it, and the renewals after it follow
    /// it (redis-py's `extend`, with the new ttl whole). Resolves to the milliseconds left;
    /// rejects with `LEASE_INVALID` (out of range; a queued lock's grant keeps its ttl) or
    /// `LEASE_LOST`.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn set_ttl<'e>(
        &self,
        env: &'e Env,
        #[napi(ts_arg_type = "number | string")] ttl: Time,
    ) -> Result<Unknown<'e>> {
        let ttl = time("ttl", &ttl).map_err(|e| error::to_napi(env, &e))?;
        let inner = self.inner.clone();
        runtime::call(env, async move { inner.set_ttl(ttl).await }, |_, d| {
            Ok(ms(d))
        })
    }

    /// Change the data stored in the lease's record (etcd's `Proclaim`; `null` removes it): a
    /// renewal made at once writes it. Resolves to the milliseconds left.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn set_data<'e>(&self, env: &'e Env, data: Option<String>) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        runtime::call(
            env,
            async move { inner.set_data(data.as_deref()).await },
            |_, d| Ok(ms(d)),
        )
    }

    /// Release the lease so a waiter can take it at once. Idempotent. Rejects with `LEASE_LOST`
    /// if the lease had been lost before it could be released.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn release<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        let inner = self.inner.clone();
        let id = self.id;
        runtime::call(
            env,
            async move {
                let out = inner.release().await;
                forget(id);
                out
            },
            |_, ()| Ok(()),
        )
    }

    /// Write `data` at `key` (an object in this lease's store, not the lease record; `key` is read
    /// like a relative path from the lease's directory: `x` beside the lease, `../x` one level up,
    /// `/x` from the store's root) unless a holder with a higher epoch of this lease has written it:
    /// then reject with `LEASE_FENCED`. Resolves to the new version. Strings are written as UTF-8.
    /// With `options.ifVersion` (the `version` of a `fencedGet` result), only if the object is
    /// still at that version; with `options.ifAbsent: true`, only if it does not exist;
    /// otherwise reject with `LEASE_CONFLICT` (read again and decide again). Without them the
    /// write does not look at what is there: `fencedGet` + plain `fencedPut` is not atomic
    /// (see `fencedUpdate`).
    #[napi(
        ts_args_type = "key: string, data: string | Uint8Array | ArrayBuffer, options?: FencedPutOptions",
        ts_return_type = "Promise<string>"
    )]
    pub fn fenced_put<'e>(
        &self,
        env: &'e Env,
        key: String,
        data: Buffer,
        options: Option<crate::fence::FencedPutOptions>,
    ) -> Result<Unknown<'e>> {
        crate::fence::put(env, self.fences(), key, data, options)
    }

    /// Read the object `key` names for this lease, beside it (what `fencedUpdate` reads).
    #[napi(js_name = "_fencedGet", skip_typescript)]
    pub fn fenced_get<'e>(&self, env: &'e Env, key: String) -> Result<Unknown<'e>> {
        crate::fence::get(env, self.fences(), key, crate::fence::Read::Plain)
    }

    /// Read `key` (placed as `fencedPut` places it) and fence it with this lease's token: from
    /// then on no holder whose grant ended before this one began can change it, so a reader (a
    /// shared grant) sees its data stay while it holds, whatever a stale writer does. The first
    /// read of an object under a grant writes it back unchanged with this token in its
    /// metadata (1 GET + 1 PUT); reading it again costs 1 GET. Where nothing is, it leaves an
    /// empty marker that fenced reads see as `null`. Rejects with `LEASE_FENCED` when a later
    /// conflicting grant wrote or fenced it (this grant has ended).
    #[napi(ts_return_type = "Promise<FencedObject | null>")]
    pub fn fenced_read<'e>(&self, env: &'e Env, key: String) -> Result<Unknown<'e>> {
        crate::fence::get(env, self.fences(), key, crate::fence::Read::Fenced)
    }

    /// Delete `key` unless a holder with a higher epoch has written it (then `LEASE_FENCED`).
    /// Resolves to false if there was nothing to delete. Needs a store with conditional
    /// deletes (the file store; S3 with `conditional_delete`), else rejects with `LEASE_STORE`.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn fenced_delete<'e>(&self, env: &'e Env, key: String) -> Result<Unknown<'e>> {
        crate::fence::delete(env, self.fences(), key)
    }

    /// The lease's health now: `healthy` (renewals landing), `late` (a renewal failed or is
    /// slow, the deadline still far), `unknown` (the deadline is near and no renewal landed:
    /// act only through fenced writes) or `lost` (docs/protocol.md §4).
    #[napi(getter, ts_return_type = "'healthy' | 'late' | 'unknown' | 'lost'")]
    pub fn health(&self) -> &'static str {
        self.inner.health().as_str()
    }

    /// Call `callback(event)` on the JavaScript thread with the current health, then at each
    /// change, in order (a release ends the calls without one). Does not keep the process
    /// alive.
    #[napi(ts_args_type = "callback: (event: HealthEvent) => void")]
    pub fn on_health(&self, callback: Function<'_, HealthEvent, ()>) -> Result<()> {
        let tsfn = callback
            .build_threadsafe_function::<HealthEvent>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|ctx| Ok(ctx.value))?;
        self.inner.on_health(move |e: &lease::HealthEvent| {
            let event = HealthEvent {
                health: e.health.as_str().to_string(),
                remaining_ms: e.remaining.as_millis() as f64,
                reason: e.reason.as_ref().map(|r| r.kind().to_string()),
            };
            tsfn.call(event, ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(())
    }

    /// The latest yield request that named this lease's grant, or `null`: a waiter or an
    /// operator asked it to step aside (`askYield`, docs/protocol.md §10, "Yield on request").
    /// Not a loss: the lease stays held until released.
    #[napi(getter, ts_return_type = "YieldRequested | null")]
    pub fn yield_requested(&self) -> Option<YieldRequested> {
        self.inner.yield_requested().map(YieldRequested::from)
    }

    /// Call `callback(request)` on the JavaScript thread once per yield request that names this
    /// lease's grant (at once if one already did), as the core learns them: at a renewal, or at
    /// once through a wake hint. Does not keep the process alive. Used by `yieldRequest`.
    #[napi(ts_args_type = "callback: (request: YieldRequested) => void")]
    pub fn on_yield(&self, callback: Function<'_, YieldRequested, ()>) -> Result<()> {
        let tsfn = callback
            .build_threadsafe_function::<YieldRequested>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|ctx| Ok(ctx.value))?;
        self.inner.on_yield(move |y| {
            tsfn.call(y.clone().into(), ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(())
    }

    /// Call `callback(error)` once, on the JavaScript thread, when the lease is lost. Does not
    /// keep the process alive. Used by `signal` and `lost`.
    #[napi(js_name = "_onLost", skip_typescript)]
    pub fn on_lost(&self, callback: Function<'_, napi::Error, ()>) -> Result<()> {
        let tsfn = callback
            .build_threadsafe_function::<lease::Error>()
            .weak::<true>()
            .callee_handled::<false>()
            .build_callback(|ctx| Ok(error::to_napi(&ctx.env, &ctx.value)))?;
        // The callback lives in the core's lease as long as the lease does: it must not hold
        // a handle of the lease itself (a cycle that would never be freed).
        let (url, epoch) = (self.inner.url().to_string(), self.inner.epoch());
        self.inner.on_lost(move |reason| {
            tsfn.call(
                reason.error(&url, epoch),
                ThreadsafeFunctionCallMode::NonBlocking,
            );
        });
        Ok(())
    }
}

/// What a holder of a queued lock is told when asked to step aside (`Lease.onYield`,
/// `Lease.yieldRequested`): who asks, the waiter to hand over to, and why.
#[napi(object)]
#[derive(Clone)]
pub struct YieldRequested {
    /// Who asks: a waiter's id, or an operator's label (`user@host`).
    pub by: String,
    /// The waiting participant's id that should go next, if the asker named one.
    pub to: Option<String>,
    pub reason: Option<String>,
}

impl From<lease::YieldRequested> for YieldRequested {
    fn from(y: lease::YieldRequested) -> Self {
        YieldRequested {
            by: y.by,
            to: y.to,
            reason: y.reason,
        }
    }
}

/// A change of a held lease's health (`Lease.onHealth`).
#[napi(object)]
#[derive(Clone)]
pub struct HealthEvent {
    #[napi(ts_type = "'healthy' | 'late' | 'unknown' | 'lost'")]
    pub health: String,
    /// Milliseconds the holder may still rely on the lease (0 once lost).
    pub remaining_ms: f64,
    /// Why it was lost: `expired`, `taken_over`, `broken`, `preempted`, `vanished`,
    /// `overwritten`; a queued lock's grant: `session_deleted`, `removed`, `lock_replaced`.
    pub reason: Option<String>,
}
