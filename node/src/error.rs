//! The one place where the core's `ErrorKind` becomes a JavaScript error.
//!
//! Every error is a plain `Error` (as Node's own APIs throw) with a stable `code`, plus what is
//! known about the lease: `url`, `holder` (`{ id, label, host, pid, user, client }`), `epoch`,
//! and `kind` (the core's lower-case kind name) and `retryable`. A cancelled wait is Node's
//! `AbortError` (`name: 'AbortError'`, `code: 'ABORT_ERR'`), as `fetch` or `timers/promises`
//! reject when their `signal` aborts. Messages are for people and are not API.

use napi::bindgen_prelude::{JsValue, Object, Unknown};
use napi::{Env, Status};
use napi_derive::napi;

use lease::{ErrorKind, Holder, HolderJson};

/// The stable `code` of each kind. Never change one; add new kinds at the end.
pub fn code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Held => "LEASE_HELD",
        ErrorKind::Timeout => "LEASE_TIMEOUT",
        ErrorKind::Cancelled => "ABORT_ERR",
        ErrorKind::Lost => "LEASE_LOST",
        ErrorKind::Fenced => "LEASE_FENCED",
        ErrorKind::Conflict => "LEASE_CONFLICT",
        ErrorKind::Unavailable => "LEASE_UNAVAILABLE",
        ErrorKind::Invalid => "LEASE_INVALID",
        ErrorKind::Store => "LEASE_STORE",
        ErrorKind::Corrupt => "LEASE_CORRUPT",
        ErrorKind::Internal => "LEASE_INTERNAL",
        ErrorKind::QueueFull => "LEASE_QUEUE_FULL",
        ErrorKind::Unsupported => "LEASE_UNSUPPORTED",
        // A kind the core adds later is still a lease error.
        _ => "LEASE_ERROR",
    }
}

/// `{ id, label, host, pid, user, client }`, absent fields as `null`: the core's `HolderJson`.
pub fn holder_value<'e>(env: &'e Env, h: &Holder) -> napi::Result<Unknown<'e>> {
    env.to_js_value(&HolderJson::from(h))
}

/// The JavaScript error object for a core error.
pub fn to_js<'e>(env: &'e Env, e: &lease::Error) -> napi::Result<Object<'e>> {
    let kind = e.kind();
    let mut err = env.create_error(napi::Error::new(Status::GenericFailure, e.to_string()))?;
    if kind == ErrorKind::Cancelled {
        err.set("name", "AbortError")?;
    }
    err.set("code", code(kind))?;
    err.set("kind", kind.as_str())?;
    err.set("retryable", kind.is_retryable())?;
    err.set("url", e.lease())?;
    match e.holder() {
        Some(h) => err.set("holder", holder_value(env, h)?)?,
        None => err.set("holder", napi::bindgen_prelude::Null)?,
    }
    err.set("epoch", e.epoch().map(|n| n as f64))?;
    Ok(err)
}

/// The core error as a `napi::Error` that throws (or rejects with) exactly `to_js`'s object.
pub fn to_napi(env: &Env, e: &lease::Error) -> napi::Error {
    match to_js(env, e) {
        Ok(obj) => napi::Error::from(obj.to_unknown()),
        Err(err) => err,
    }
}

/// `LEASE_INVALID` for a bad value (of the right type).
pub fn invalid(env: &Env, message: impl Into<String>) -> napi::Error {
    to_napi(env, &lease::Error::invalid(message))
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
) -> napi::Result<Object<'e>> {
    let Some(kind) = lease::ErrorKind::from_name(&kind) else {
        return Err(invalid(env, format!("unknown error kind {kind:?}")));
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
    to_js(env, &e)
}
