//! The one place where the core's `ErrorKind` becomes a Python exception class.
//!
//! The classes are defined in `lease/_errors.py` (so they can also derive from `TimeoutError`
//! and `ValueError`); each is built with the message, the lease URL, the holder (as a dict,
//! turned into a `lease.Holder` there), the epoch and the kind's stable name.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::json;
use lease::{ErrorKind, Holder, HolderJson};

/// The Python exception class for a core error kind.
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Held => "LeaseHeld",
        ErrorKind::Timeout => "LeaseTimeout",
        ErrorKind::Cancelled => "LeaseCancelled",
        ErrorKind::Lost => "LeaseLost",
        ErrorKind::Fenced => "Fenced",
        ErrorKind::Conflict => "Conflict",
        ErrorKind::Unavailable => "StoreUnavailable",
        ErrorKind::Invalid => "InvalidArgument",
        ErrorKind::Store => "StoreError",
        ErrorKind::Corrupt => "CorruptRecord",
        ErrorKind::Internal => "InternalError",
        ErrorKind::QueueFull => "QueueFull",
        ErrorKind::Unsupported => "UnsupportedRecord",
        // A kind added to the core later is still a LeaseError.
        _ => "LeaseError",
    }
}

/// `{ id, label, host, pid, user, client }`, absent fields as `None`: the core's `HolderJson`.
pub fn holder_dict<'py>(py: Python<'py>, h: &Holder) -> PyResult<Bound<'py, PyDict>> {
    let d = json::to_py(py, &HolderJson::from(h).to_json())?;
    Ok(d.cast_into::<PyDict>()?)
}

fn build(py: Python<'_>, e: &lease::Error) -> PyResult<PyErr> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("lease._errors").map(Bound::unbind))?;
    let cls = module.bind(py).getattr(class_name(e.kind()))?;
    let cls = cls.cast_into::<PyType>().map_err(PyErr::from)?;
    let holder = e.holder().map(|h| holder_dict(py, h)).transpose()?;
    let obj = cls.call1((
        e.to_string(),
        e.lease(),
        holder,
        e.epoch(),
        e.kind().as_str(),
    ))?;
    Ok(PyErr::from_value(obj))
}

/// The Python exception for a core error.
pub fn to_py(e: lease::Error) -> PyErr {
    Python::attach(|py| build(py, &e).unwrap_or_else(|err| err))
}

/// `InvalidArgument` with a message (bad values of the right type).
pub fn invalid(message: impl Into<String>) -> PyErr {
    to_py(lease::Error::invalid(message))
}

/// `TypeError` with a message (values of the wrong type).
pub fn type_error(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}

pub trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for lease::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Tests only: the stable names of every kind the core has (`ErrorKind::ALL`), so the tests
/// can check that each one has its own exception class.
#[pyfunction]
pub fn _error_kinds() -> Vec<&'static str> {
    ErrorKind::ALL.iter().map(|k| k.as_str()).collect()
}

/// Tests only: the exception the mapping gives for a core error of kind `kind` (by its stable
/// name), so kinds no public call can provoke yet (fenced, internal, corrupt, cancelled) are
/// still checked through the same code path.
#[pyfunction]
#[pyo3(signature = (kind, message, url=None, epoch=None, holder_id=None))]
pub fn _error_for_kind(
    kind: &str,
    message: &str,
    url: Option<&str>,
    epoch: Option<u64>,
    holder_id: Option<&str>,
) -> PyResult<PyErr> {
    let kind = ErrorKind::from_name(kind)
        .ok_or_else(|| invalid(format!("unknown error kind {kind:?}")))?;
    let mut e = lease::Error::new(kind, message);
    if let Some(url) = url {
        e = e.with_lease(url);
    }
    if let Some(epoch) = epoch {
        e = e.with_epoch(epoch);
    }
    if let Some(id) = holder_id {
        e = e.with_holder(Holder {
            id: id.to_string(),
            ..Holder::default()
        });
    }
    Ok(to_py(e))
}
