//! Store-enforced fencing: the fenced operations of a `Lease` and of a `SharedGrant` (their
//! methods in `held.rs` and `session.rs` call the one body here, given what fences: `Fences`),
//! `fencedGet`, `parseToken`, and the `FencingGate` core. `fencedUpdate` is JavaScript
//! (index.js), over `_fencedGet` and the conditional `fencedPut`, so the caller's function runs
//! on the JavaScript thread.
//!
//! A refused write rejects with a `LEASE_FENCED` error whose `epoch` is the newer writer's; a
//! conditional write whose expected version is gone rejects with `LEASE_CONFLICT`.

use std::sync::Arc;

use napi::bindgen_prelude::{Buffer, Either, Null, Unknown};
use napi::{Env, Result};
use napi_derive::napi;

use crate::error;
use crate::runtime;
use lease::store::Version;
use lease::{Client, FencingGate as CoreGate, FencingToken};

pub use lease::FencedHolder as Fences;

/// How `read` reads: plainly (what `fencedUpdate` reads), or fencing the object.
#[derive(Clone, Copy)]
pub enum Read {
    Plain,
    Fenced,
}

/// Read `key` as `how` says.
async fn read(fences: &Fences, key: &str, how: Read) -> lease::Result<Option<lease::FencedObject>> {
    match how {
        Read::Plain => fences.fenced_get(key).await,
        Read::Fenced => fences.fenced_read(key).await,
    }
}

/// Options of `fencedPut` (a `Lease`'s or a `SharedGrant`'s): write only if the object is as the caller read it.
#[napi(object)]
#[derive(Default)]
pub struct FencedPutOptions {
    /// Write only if the object is still at this version (the `version` of a `fencedGet`
    /// result, or what `fencedPut` resolved to); else reject with `LEASE_CONFLICT`.
    pub if_version: Option<String>,
    /// Write only if the object does not exist yet; else reject with `LEASE_CONFLICT`.
    pub if_absent: Option<bool>,
}

/// `fencedPut(key, data, options)` of a `Lease` or a `SharedGrant`: the new version.
pub fn put<'e>(
    env: &'e Env,
    fences: Fences,
    key: String,
    data: Buffer,
    options: Option<FencedPutOptions>,
) -> Result<Unknown<'e>> {
    let bytes = data.to_vec();
    let options = options.unwrap_or_default();
    runtime::call(
        env,
        async move {
            match (options.if_version, options.if_absent.unwrap_or(false)) {
                (Some(_), true) => Err(lease::Error::invalid(
                    "fencedPut takes ifVersion or ifAbsent, not both",
                )),
                (Some(etag), false) if etag.is_empty() => Err(lease::Error::invalid(
                    "ifVersion is empty: pass the version of a fencedGet result, or \
                     ifAbsent: true for an object that must not exist yet",
                )),
                (Some(etag), false) => {
                    let expected = Version::etag(etag);
                    fences.fenced_put_if(&key, bytes, Some(&expected)).await
                }
                (None, true) => fences.fenced_put_if(&key, bytes, None).await,
                (None, false) => fences.fenced_put(&key, bytes).await,
            }
        },
        |_, v| Ok(v.etag),
    )
}

/// `_fencedGet(key)` (plain) and `fencedRead(key)` (fenced) of a `Lease` or a `SharedGrant`:
/// the object `key` names, placed as `fencedPut` places it, or `null`.
pub fn get<'e>(env: &'e Env, fences: Fences, key: String, how: Read) -> Result<Unknown<'e>> {
    runtime::call(
        env,
        async move {
            let url = fences.object_url(&key)?;
            Ok((url, read(&fences, &key, how).await?))
        },
        |_, (url, obj)| Ok(obj.map(|o| object_of(url, o))),
    )
}

/// `fencedDelete(key)` of a `Lease` or a `SharedGrant`: false if there was nothing to delete.
pub fn delete<'e>(env: &'e Env, fences: Fences, key: String) -> Result<Unknown<'e>> {
    runtime::call(
        env,
        async move { fences.fenced_delete(&key).await },
        |_, deleted| Ok(deleted),
    )
}

/// An object read by `fencedGet`, with the epoch, lease and holder of the fenced write that
/// wrote it (`null` for those when something other than a fenced write wrote it).
#[napi(object)]
pub struct FencedObject {
    /// The object's URL.
    pub url: String,
    /// Its contents.
    pub data: Buffer,
    /// The writer's epoch (its fencing token).
    #[napi(ts_type = "number | null")]
    pub epoch: Either<f64, Null>,
    /// The URL of the lease the writer held.
    #[napi(ts_type = "string | null")]
    pub lease: Either<String, Null>,
    /// The object's version (ETag on S3, a content hash on the file store): what `fencedPut`
    /// resolved to for the write that produced it, and what `fencedPut(key, data,
    /// { ifVersion })` takes to write only if nobody wrote since.
    pub version: String,
    /// The holder id of the writer (`Lease.holder.id`).
    #[napi(ts_type = "string | null")]
    pub holder: Either<String, Null>,
}

/// The JavaScript shape of a fenced object read at `url`.
pub fn object_of(url: String, o: lease::FencedObject) -> FencedObject {
    FencedObject {
        url,
        data: Buffer::from(o.bytes.to_vec()),
        epoch: or_null(o.epoch.map(|e| e as f64)),
        lease: or_null(o.lease),
        version: o.version.etag,
        holder: or_null(o.holder),
    }
}

fn or_null<T>(v: Option<T>) -> Either<T, Null> {
    v.map_or(Either::B(Null), Either::A)
}

/// Read an object written by `Lease.fencedPut`, with its writer's epoch: `url` is the object's
/// URL, or with `options.key`, the URL of the lease that wrote it and `key` as given to
/// `fencedPut` (placed the same way: beside the lease). Resolves to `null` when it does not exist.
/// Needs no lease.
#[napi(
    ts_args_type = "url: string, options?: { key?: string }",
    ts_return_type = "Promise<FencedObject | null>"
)]
pub fn fenced_get<'e>(env: &'e Env, url: String, key: Option<String>) -> Result<Unknown<'e>> {
    runtime::call(
        env,
        async move {
            let (client, own) = Client::for_url(&url)?;
            let key = match key {
                Some(key) => lease::object_key(&own, &key).map_err(|e| e.with_lease(&url))?,
                None => own,
            };
            let object_url = client.lease_url(&key);
            Ok((object_url, client.fenced_get(&key).await?))
        },
        |_, (url, obj)| Ok(obj.map(|o| object_of(url, o))),
    )
}

/// A fencing token taken apart.
#[napi(object)]
pub struct ParsedToken {
    /// The lease's URL.
    pub lease: String,
    /// The holder's epoch.
    pub epoch: f64,
    /// The holder id (`Lease.holder.id`); `null` for a token without one (`URL#EPOCH`).
    #[napi(ts_type = "string | null")]
    pub holder: Either<String, Null>,
    /// A shared grant's token (a reader's, or a permit's): `;shared`.
    pub shared: bool,
    /// The path the grant holds (`;path=P`), or `null` (the whole lock, or a byte range).
    #[napi(ts_type = "string | null")]
    pub scope: Either<String, Null>,
    /// The bytes `[start, end]` the grant holds (`;range=A..B`, the end excluded), or `null`.
    #[napi(ts_type = "[number, number] | null")]
    pub range: Either<Vec<f64>, Null>,
}

/// Parse a fencing token (`URL#EPOCH@HOLDER`, as `Lease.token` prints it and `lease run`
/// exports in `LEASE_TOKEN`, or `URL#EPOCH`; a queued lock's shared or scoped grant adds
/// `;shared`, `;path=P`, `;range=A..B`); throws `LEASE_INVALID` if it is not one.
#[napi]
pub fn parse_token(env: Env, token: String) -> Result<ParsedToken> {
    let t: FencingToken = token.parse().map_err(|e| error::to_napi(&env, &e))?;
    let (scope, range) = match t.scope() {
        lease::Scope::Whole => (None, None),
        lease::Scope::Path(p) => (Some(p.clone()), None),
        lease::Scope::Range { start, end } => (None, Some(vec![*start as f64, *end as f64])),
    };
    Ok(ParsedToken {
        lease: t.lease().to_string(),
        epoch: t.epoch() as f64,
        holder: or_null(t.holder().map(str::to_string)),
        shared: t.mode() == lease::Mode::Shared,
        scope: or_null(scope),
        range: or_null(range),
    })
}

/// Options of `new FencingGate(store, options)`.
#[napi(object)]
pub struct GateOptions {
    /// Where in the store the gate keeps its objects (default `fencing`).
    pub prefix: Option<String>,
}

/// Admit or refuse fencing tokens for resources outside the store (a database row, an HTTP
/// API): call `admit(resource, token)` before acting on a request that carries a token. A
/// token is admitted when its epoch is above the highest admitted so far for the resource, or
/// equal to it and of the same holder; a lower epoch, the same epoch of another holder, or a
/// token of another lease rejects with `LEASE_FENCED` (its `epoch` is the highest admitted).
/// `new FencingGate()` remembers in this object's memory: it guards a resource served by one
/// process (share the one gate object there); other processes, worker threads and in-memory
/// gates have their own, unshared views.
/// `new FencingGate(storeUrl, { prefix })` keeps one small object per resource under `prefix`
/// in a store, changed only by conditional writes: that is the gate a fleet of services
/// shares.
#[napi]
pub struct FencingGate {
    gate: Arc<CoreGate>,
    description: String,
}

#[napi]
impl FencingGate {
    #[napi(
        constructor,
        ts_args_type = "store?: string | null, options?: GateOptions"
    )]
    pub fn new(
        env: Env,
        store: Option<String>,
        options: Option<GateOptions>,
    ) -> Result<FencingGate> {
        let prefix = options.and_then(|o| o.prefix);
        let Some(store) = store else {
            if prefix.is_some() {
                return Err(error::invalid(
                    &env,
                    "prefix is only for a FencingGate kept in a store: pass the store URL too",
                ));
            }
            return Ok(FencingGate {
                gate: Arc::new(CoreGate::in_memory()),
                description: "in memory".to_string(),
            });
        };
        let prefix = prefix.unwrap_or_else(|| "fencing".to_string());
        // Opening an S3 store builds its HTTP client, which wants a runtime context.
        let rt = runtime::handle()?;
        let _entered = rt.enter();
        let made = (|| {
            // The prefix goes under the URL's path (s3://bucket/locks: locks/PREFIX).
            let (parsed, placed) = CoreGate::store_and_prefix(&store, &prefix).map_err(|e| {
                lease::Error::new(
                    e.kind(),
                    format!("FencingGate prefix {prefix:?}: {}", e.message()),
                )
            })?;
            let opened = parsed.open().map_err(|e| e.with_lease(&store))?;
            let description = format!("in {} under {placed}/", opened.url());
            let gate = CoreGate::in_store(opened, &placed).map_err(|e| {
                lease::Error::new(
                    e.kind(),
                    format!("FencingGate prefix {prefix:?}: {}", e.message()),
                )
            })?;
            Ok::<_, lease::Error>((gate, description))
        })()
        .map_err(|e| error::to_napi(&env, &e))?;
        Ok(FencingGate {
            gate: Arc::new(made.0),
            description: made.1,
        })
    }

    /// Admit `token` (a Lease, or its `token`: `URL#EPOCH@HOLDER`) for `resource` and remember
    /// its epoch, or reject with `LEASE_FENCED`.
    #[napi(
        ts_args_type = "resource: string, token: Lease | string",
        ts_return_type = "Promise<void>"
    )]
    pub fn admit<'e>(&self, env: &'e Env, resource: String, token: String) -> Result<Unknown<'e>> {
        let gate = self.gate.clone();
        runtime::call(
            env,
            async move {
                // The same rule for both kinds of gate, so moving a gate into a store changes
                // nothing.
                lease::store::validate_key(&resource).map_err(|e| {
                    lease::Error::invalid(format!(
                        "FencingGate resource {resource:?} is not a valid object key: {}",
                        e.message()
                    ))
                })?;
                let token: FencingToken = token.parse()?;
                gate.admit(&resource, &token).await
            },
            |_, ()| Ok(()),
        )
    }

    /// `in memory`, or `in STORE under PREFIX/`.
    #[napi(getter)]
    pub fn description(&self) -> String {
        self.description.clone()
    }
}
