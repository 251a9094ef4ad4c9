//! Reading leases: `status` and `watch`.
//!
//! Status values cross into Python as dicts of exactly the shape of the core's
//! `Status::to_json()` (the shape `lease status --json` prints); `lease._types.Status` adds
//! seconds-valued accessors on top. Holders and leaders come from the same serde shapes
//! (`HolderJson`, `Leader`). They become Python objects through `json::to_py`.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::error::IntoPyResult;
use crate::json;
use crate::options::{self, Target};
use crate::runtime::{self, block, Pending};
use lease::{Status, Watcher};

fn status_dict(py: Python<'_>, s: &Status) -> PyResult<Py<PyAny>> {
    Ok(json::to_py(py, &s.to_json())?.unbind())
}

/// status(url) -> dict (the JSON shape of `lease status --json`).
#[pyfunction]
pub fn _status(py: Python<'_>, url: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let s = block(py, async move { t.client.status(&t.key).await }, None)?.py()?;
    status_dict(py, &s)
}

#[pyfunction]
pub fn _status_start(py: Python<'_>, url: &Bound<'_, PyAny>, done: Py<PyAny>) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let abort = runtime::spawn_settle(
        py,
        async move { t.client.status(&t.key).await },
        done,
        |py, s| status_dict(py, &s),
    )?;
    Ok(Pending::abort(abort))
}

pub(crate) fn poll_of(poll: Option<&Bound<'_, PyAny>>) -> PyResult<Duration> {
    Ok(options::opt_seconds("poll", poll)?.unwrap_or(Duration::from_secs(1)))
}

/// A stream of changes of one lease; each `next()` returns a status dict.
#[pyclass(module = "lease._lease", frozen)]
pub struct Watch {
    inner: Arc<tokio::sync::Mutex<Watcher>>,
    pid: u32,
}

pub(crate) fn forked_error(what: &str) -> PyErr {
    crate::error::to_py(lease::Error::new(
        lease::ErrorKind::Invalid,
        format!("this {what} was created before os.fork(); create a new one in the child"),
    ))
}

#[pymethods]
impl Watch {
    #[new]
    #[pyo3(signature = (url, poll=None))]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        poll: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        crate::log::refresh_level(py, false);
        let t: Target = options::target(url)?;
        let poll = poll_of(poll)?;
        let w = t.client.watch(&t.key, poll).py()?;
        Ok(Watch {
            inner: Arc::new(tokio::sync::Mutex::new(w)),
            pid: runtime::pid(),
        })
    }

    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.pid != runtime::pid() {
            return Err(forked_error("watch"));
        }
        let w = self.inner.clone();
        let s = block(py, async move { w.lock().await.next().await }, None)?.py()?;
        status_dict(py, &s)
    }

    fn _next_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        if self.pid != runtime::pid() {
            return Err(forked_error("watch"));
        }
        let w = self.inner.clone();
        let abort = runtime::spawn_settle(
            py,
            async move { w.lock().await.next().await },
            done,
            |py, s| status_dict(py, &s),
        )?;
        Ok(Pending::abort(abort))
    }
}
