//! Store-enforced fencing: `fenced_put` / `fenced_delete` / `fenced_read` of a `Lease` and of a
//! shared grant (their bodies, called from the `Lease` methods in `held` and the `GrantCore`
//! methods in `session`, given what fences: `Fences`), `lease.fenced_get`, `lease.parse_token`, and
//! `lease.FencingGate` (over `GateCore`). `Lease.fenced_update` is Python (`lease/_update.py`),
//! over `Lease._fenced_get` and the conditional `fenced_put` here, so the caller's function runs
//! on the caller's thread, never on a runtime thread.
//!
//! Blocking calls release the GIL and stay interruptible (`runtime::block`); the `_start` variants
//! run on the runtime and settle an asyncio future. Errors go through the one mapping
//! (`error::to_py`): a refused write is `lease.Fenced` carrying the newer epoch, a write whose
//! expected version is gone is `lease.Conflict`.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyString};

use crate::error::{invalid, to_py, type_error, IntoPyResult};
use crate::options::{self, data_bytes, key_text};
use crate::runtime::Pending;
use crate::runtime::{self, block};
use lease::store::Version;
pub use lease::FencedHolder as Fences;
use lease::{Client, Error, FencedObject, FencingGate, FencingToken};

/// What a fenced write expects the object to be: `if_version=` / `if_absent=` of `fenced_put`.
pub enum Expected {
    /// Whatever it is (a plain fenced write).
    Any,
    /// Absent (`if_absent=True`).
    Absent,
    /// Still at this version (`if_version=obj.version`).
    Version(Version),
}

impl Expected {
    /// From the keyword arguments: `if_version` a str or None, `if_absent` a bool; not both.
    pub fn from_args(
        if_version: Option<&Bound<'_, PyAny>>,
        if_absent: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Expected> {
        let if_version = if_version.filter(|v| !v.is_none());
        let absent = match if_absent {
            None => false,
            Some(a) => a.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
                type_error(format!(
                    "if_absent must be a bool, not {}",
                    options::type_name(a)
                ))
            })?,
        };
        let version = match if_version {
            None => None,
            Some(v) => {
                let etag = v
                    .cast::<PyString>()
                    .map_err(|_| {
                        type_error(format!(
                            "if_version must be a str (the version of a FencedObject, or what \
                             fenced_put returned) or None, not {}",
                            options::type_name(v)
                        ))
                    })?
                    .to_cow()
                    .map(|c| c.into_owned())
                    .map_err(|_| invalid("if_version is not valid UTF-8"))?;
                if etag.is_empty() {
                    return Err(invalid(
                        "if_version is empty: pass the version of a FencedObject, or \
                         if_absent=True for an object that must not exist yet",
                    ));
                }
                Some(Version::etag(etag))
            }
        };
        match (version, absent) {
            (Some(_), true) => Err(type_error(
                "fenced_put takes if_version or if_absent, not both: an object cannot be at a \
                 version and absent",
            )),
            (Some(v), false) => Ok(Expected::Version(v)),
            (None, true) => Ok(Expected::Absent),
            (None, false) => Ok(Expected::Any),
        }
    }
}

/// The core's fenced write for `expected`: plain, or conditional on a version or absence.
async fn write(
    lease: Fences,
    key: String,
    data: Vec<u8>,
    expected: Expected,
) -> lease::Result<Version> {
    match expected {
        Expected::Any => lease.fenced_put(&key, data).await,
        Expected::Absent => lease.fenced_put_if(&key, data, None).await,
        Expected::Version(v) => lease.fenced_put_if(&key, data, Some(&v)).await,
    }
}

/// `fenced_put` of a `Lease` or a `SharedGrant`: write `data` at `key` in its store; the new
/// version.
pub fn put(
    py: Python<'_>,
    lease: Fences,
    key: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    expected: Expected,
) -> PyResult<String> {
    let key = key_text("key", key)?;
    let data = data_bytes(data)?;
    block(py, write(lease, key, data, expected), None)?
        .map(|v| v.etag)
        .py()
}

pub fn put_start(
    py: Python<'_>,
    lease: Fences,
    key: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    expected: Expected,
    done: Py<PyAny>,
) -> PyResult<Pending> {
    let key = key_text("key", key)?;
    let data = data_bytes(data)?;
    let abort = runtime::spawn_settle(py, write(lease, key, data, expected), done, |py, v| {
        Ok(v.etag.into_pyobject(py)?.into_any().unbind())
    })?;
    Ok(Pending::abort(abort))
}

/// How a lease reads an object: plainly (`Lease._fenced_get`, what `fenced_update` reads), or
/// fencing it with the lease's token (`Lease.fenced_read`).
#[derive(Clone, Copy)]
pub enum Read {
    Plain,
    Fenced,
}

async fn read(lease: Fences, key: String, how: Read) -> lease::Result<Option<FencedObject>> {
    match how {
        Read::Plain => lease.fenced_get(&key).await,
        Read::Fenced => lease.fenced_read(&key).await,
    }
}

/// Read the object `key` names for the lease (beside it, as `fenced_put` places it): a dict
/// for `lease.FencedObject`, or None.
pub fn get_in(
    py: Python<'_>,
    lease: Fences,
    key: &Bound<'_, PyAny>,
    how: Read,
) -> PyResult<Py<PyAny>> {
    let key = key_text("key", key)?;
    let object_url = lease.object_url(&key).py()?;
    let obj = block(py, read(lease, key, how), None)?.py()?;
    object_dict(py, &object_url, obj)
}

/// `fenced_read` of a `Lease` or a `SharedGrant`: a `lease.FencedObject`, or None.
pub fn read_object<'py>(
    py: Python<'py>,
    lease: Fences,
    key: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    static OBJECT: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let d = get_in(py, lease, key, Read::Fenced)?;
    OBJECT
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("lease._types")?.getattr("FencedObject")?.unbind())
        })?
        .bind(py)
        .getattr("_from_dict")?
        .call1((d,))
}

pub fn get_in_start(
    py: Python<'_>,
    lease: Fences,
    key: &Bound<'_, PyAny>,
    how: Read,
    done: Py<PyAny>,
) -> PyResult<Pending> {
    let key = key_text("key", key)?;
    let object_url = lease.object_url(&key).py()?;
    let abort = runtime::spawn_settle(py, read(lease, key, how), done, move |py, obj| {
        object_dict(py, &object_url, obj)
    })?;
    Ok(Pending::abort(abort))
}

/// A parsed token as `lease.parse_token` builds its `Token` from it: `(lease, epoch, holder,
/// shared, scope, range)`.
type TokenParts = (
    String,
    u64,
    Option<String>,
    bool,
    Option<String>,
    Option<(u64, u64)>,
);

/// `lease.parse_token(text)`; `InvalidArgument` if it is not one.
#[pyfunction]
pub fn _parse_token(token: &Bound<'_, PyAny>) -> PyResult<TokenParts> {
    let text = token_text(token)?;
    let t: FencingToken = text.parse().py()?;
    let (scope, range) = match t.scope() {
        lease::Scope::Whole => (None, None),
        lease::Scope::Path(p) => (Some(p.clone()), None),
        lease::Scope::Range { start, end } => (None, Some((*start, *end))),
    };
    Ok((
        t.lease().to_string(),
        t.epoch(),
        t.holder().map(str::to_string),
        t.mode() == lease::Mode::Shared,
        scope,
        range,
    ))
}

/// `fenced_delete` of a `Lease` or a `SharedGrant`: true if deleted, false if there was
/// nothing to delete.
pub fn delete(py: Python<'_>, lease: Fences, key: &Bound<'_, PyAny>) -> PyResult<bool> {
    let key = key_text("key", key)?;
    block(py, async move { lease.fenced_delete(&key).await }, None)?.py()
}

pub fn delete_start(
    py: Python<'_>,
    lease: Fences,
    key: &Bound<'_, PyAny>,
    done: Py<PyAny>,
) -> PyResult<Pending> {
    let key = key_text("key", key)?;
    let abort = runtime::spawn_settle(
        py,
        async move { lease.fenced_delete(&key).await },
        done,
        |py, deleted| {
            Ok(pyo3::types::PyBool::new(py, deleted)
                .to_owned()
                .into_any()
                .unbind())
        },
    )?;
    Ok(Pending::abort(abort))
}

/// The client and key `fenced_get(url, key)` reads: the object at `url`, or with `key`, the
/// object `key` names for the lease at `url` (placed as `fenced_put` places it: beside the
/// lease, `lease::object_key`).
fn get_target(
    url: &Bound<'_, PyAny>,
    key: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Client, String, String)> {
    let t = options::target(url)?;
    let key = match key.filter(|k| !k.is_none()) {
        Some(k) => lease::object_key(&t.key, &key_text("key", k)?)
            .map_err(|e| e.with_lease(&t.url))
            .py()?,
        None => t.key,
    };
    let object_url = t.client.lease_url(&key);
    Ok((t.client, key, object_url))
}

/// What crosses into Python: a dict that `lease._types.FencedObject` is built from.
fn object_dict(py: Python<'_>, url: &str, obj: Option<FencedObject>) -> PyResult<Py<PyAny>> {
    let Some(obj) = obj else {
        return Ok(py.None());
    };
    let d = PyDict::new(py);
    d.set_item("url", url)?;
    d.set_item("data", PyBytes::new(py, &obj.bytes))?;
    d.set_item("epoch", obj.epoch)?;
    d.set_item("lease", obj.lease)?;
    d.set_item("holder", obj.holder)?;
    d.set_item("version", obj.version.etag)?;
    Ok(d.into_any().unbind())
}

/// fenced_get(url, key=None) -> dict | None.
#[pyfunction]
#[pyo3(signature = (url, key=None))]
pub fn _fenced_get(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    key: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    crate::log::refresh_level(py, false);
    let (client, key, object_url) = get_target(url, key)?;
    let obj = block(py, async move { client.fenced_get(&key).await }, None)?.py()?;
    object_dict(py, &object_url, obj)
}

#[pyfunction]
#[pyo3(signature = (url, key, done))]
pub fn _fenced_get_start(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    key: Option<&Bound<'_, PyAny>>,
    done: Py<PyAny>,
) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let (client, key, object_url) = get_target(url, key)?;
    let abort = runtime::spawn_settle(
        py,
        async move { client.fenced_get(&key).await },
        done,
        move |py, obj| object_dict(py, &object_url, obj),
    )?;
    Ok(Pending::abort(abort))
}

/// Where a gate keeps what it admitted.
enum Backend {
    Memory,
    /// A store object per resource under `prefix`; `url` is the store, for rebuilding the gate
    /// in a forked child (the state is in the store, so the child's gate is the same gate).
    Store {
        url: Py<PyAny>,
        prefix: String,
    },
}

/// The core of `lease.FencingGate`: admit a token for a resource, or raise `Fenced`.
#[pyclass(module = "lease._lease", frozen)]
pub struct GateCore {
    backend: Backend,
    /// The gate and the process that built it.
    gate: Mutex<(u32, Arc<FencingGate>)>,
    description: String,
}

/// The gate kept in the store at `url`, its objects under `prefix` below the URL's path
/// (s3://bucket/locks: `locks/PREFIX`), and that prefix in the store.
fn store_gate(
    url: &Bound<'_, PyAny>,
    prefix: &str,
) -> PyResult<(Client, Arc<FencingGate>, String)> {
    let prefix_error = |e: Error| {
        to_py(Error::new(
            e.kind(),
            format!("FencingGate prefix {prefix:?}: {}", e.message()),
        ))
    };
    let text = options::url_text(url)?;
    if text.contains('\0') {
        return Err(crate::error::invalid(
            "the store URL contains a NUL character",
        ));
    }
    let (store, placed) = FencingGate::store_and_prefix(&text, prefix).map_err(prefix_error)?;
    let client = options::client_of(&store, &text)?;
    let gate = FencingGate::in_store(client.store().clone(), &placed).map_err(prefix_error)?;
    Ok((client, Arc::new(gate), placed))
}

fn resource_text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let resource = key_text("resource", obj)?;
    // The same rule for both kinds of gate, so moving a gate into a store changes nothing.
    lease::store::validate_key(&resource).map_err(|e| {
        invalid(format!(
            "FencingGate resource {resource:?} is not a valid object key: {}",
            e.message()
        ))
    })?;
    Ok(resource)
}

/// The text of a token argument: a str, else `TypeError`.
fn token_text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    key_text("token", obj).map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyTypeError>(obj.py()) {
            type_error(format!(
                "token must be a str (a lease's token, \"URL#EPOCH@HOLDER\") or a lease.Lease, \
                 not {}",
                options::type_name(obj)
            ))
        } else {
            e
        }
    })
}

fn token_of(obj: &Bound<'_, PyAny>) -> PyResult<FencingToken> {
    token_text(obj)?.parse::<FencingToken>().py()
}

impl GateCore {
    fn gate(&self, py: Python<'_>) -> PyResult<Arc<FencingGate>> {
        let me = runtime::pid();
        let mut slot = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        if slot.0 == me {
            return Ok(slot.1.clone());
        }
        match &self.backend {
            Backend::Memory => Err(invalid(
                "this FencingGate in memory was created before os.fork(): it guards one \
                 process; create a gate in the child, or keep the gate in a store",
            )),
            Backend::Store { url, prefix } => {
                // The parent's gate holds a client of the parent's runtime: leak it.
                let (_, fresh, _) = store_gate(url.bind(py), prefix)?;
                let old = std::mem::replace(&mut *slot, (me, fresh.clone()));
                std::mem::forget(old);
                Ok(fresh)
            }
        }
    }
}

#[pymethods]
impl GateCore {
    #[new]
    #[pyo3(signature = (store=None, prefix=None))]
    fn new(store: Option<&Bound<'_, PyAny>>, prefix: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let store = store.filter(|s| !s.is_none());
        let prefix = prefix.filter(|p| !p.is_none());
        let (backend, gate, description) = match (store, prefix) {
            (None, None) => (
                Backend::Memory,
                Arc::new(FencingGate::in_memory()),
                "in memory".to_string(),
            ),
            (None, Some(_)) => {
                return Err(crate::error::type_error(
                    "prefix is only for a FencingGate kept in a store: pass the store URL too",
                ))
            }
            (Some(url), prefix) => {
                let prefix = match prefix {
                    Some(p) => key_text("prefix", p)?,
                    None => "fencing".to_string(),
                };
                let (client, gate, placed) = store_gate(url, &prefix)?;
                let description = format!("in {} under {placed}/", client.store().url());
                (
                    Backend::Store {
                        url: url.clone().unbind(),
                        prefix,
                    },
                    gate,
                    description,
                )
            }
        };
        Ok(GateCore {
            backend,
            gate: Mutex::new((runtime::pid(), gate)),
            description,
        })
    }

    /// Admit `token` for `resource` (blocking, GIL released), or raise `Fenced`.
    fn admit(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let resource = resource_text(resource)?;
        let token = token_of(token)?;
        let gate = self.gate(py)?;
        block(py, async move { gate.admit(&resource, &token).await }, None)?.py()
    }

    fn _admit_start(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let resource = resource_text(resource)?;
        let token = token_of(token)?;
        let gate = self.gate(py)?;
        let abort = runtime::spawn_settle(
            py,
            async move { gate.admit(&resource, &token).await },
            done,
            |py, ()| Ok(py.None()),
        )?;
        Ok(Pending::abort(abort))
    }

    /// "in memory", or "in STORE under PREFIX/".
    #[getter]
    fn description(&self) -> &str {
        &self.description
    }
}
