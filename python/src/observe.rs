//! Reading leases (`status`, `watch`) and elections.
//!
//! Status values cross into Python as dicts of exactly the shape of the core's
//! `Status::to_json()` (the shape `lease status --json` prints); `lease._types.Status` adds
//! seconds-valued accessors on top.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::args::{self, Target};
use crate::errors::IntoPyResult;
use crate::pylease::{Pending, PyLease};
use crate::rt::{self, block};
use lease::{Election, LeaderWatch, LeaseOptions, Status, Watcher};

pub fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(json_to_py(py, x)?)?;
            }
            l.into_any()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, json_to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

fn status_dict(py: Python<'_>, s: &Status) -> PyResult<Py<PyAny>> {
    Ok(json_to_py(py, &s.to_json())?.unbind())
}

/// status(url) -> dict (the JSON shape of `lease status --json`).
#[pyfunction]
pub fn _status(py: Python<'_>, url: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    crate::log::refresh_level(py, false);
    let t = args::target(url)?;
    let s = block(py, async move { t.client.status(&t.key).await }, None)?.py()?;
    status_dict(py, &s)
}

#[pyfunction]
pub fn _status_start(py: Python<'_>, url: &Bound<'_, PyAny>, done: Py<PyAny>) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let t = args::target(url)?;
    let abort = rt::spawn_settle(
        py,
        async move { t.client.status(&t.key).await },
        done,
        |py, s| status_dict(py, &s),
    )?;
    Ok(Pending::abort(abort))
}

fn poll_of(poll: Option<&Bound<'_, PyAny>>) -> PyResult<Duration> {
    Ok(args::opt_seconds("poll", poll)?.unwrap_or(Duration::from_secs(1)))
}

/// A stream of changes of one lease; each `next()` returns a status dict.
#[pyclass(module = "lease._lease", frozen)]
pub struct Watch {
    inner: Arc<tokio::sync::Mutex<Watcher>>,
    pid: u32,
}

fn forked_error(what: &str) -> PyErr {
    crate::errors::to_py(lease::Error::new(
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
        let t: Target = args::target(url)?;
        let poll = poll_of(poll)?;
        let w = t.client.watch(&t.key, poll).py()?;
        Ok(Watch {
            inner: Arc::new(tokio::sync::Mutex::new(w)),
            pid: rt::pid(),
        })
    }

    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.pid != rt::pid() {
            return Err(forked_error("watch"));
        }
        let w = self.inner.clone();
        let s = block(py, async move { w.lock().await.next().await }, None)?.py()?;
        status_dict(py, &s)
    }

    fn _next_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        if self.pid != rt::pid() {
            return Err(forked_error("watch"));
        }
        let w = self.inner.clone();
        let abort = rt::spawn_settle(
            py,
            async move { w.lock().await.next().await },
            done,
            |py, s| status_dict(py, &s),
        )?;
        Ok(Pending::abort(abort))
    }
}

fn leader_dict(py: Python<'_>, l: Option<lease::Leader>) -> PyResult<Py<PyAny>> {
    match l {
        None => Ok(py.None()),
        Some(l) => {
            let d = PyDict::new(py);
            d.set_item("holder", crate::errors::holder_dict(py, &l.holder)?)?;
            d.set_item("epoch", l.epoch)?;
            d.set_item("data", l.data)?;
            Ok(d.into_any().unbind())
        }
    }
}

/// One participant of an election (the Python class `lease.Election` wraps it).
#[pyclass(module = "lease._lease", frozen)]
pub struct ElectionCore {
    inner: std::mem::ManuallyDrop<Arc<Election>>,
    target: Target,
    on_lost: Option<Py<PyAny>>,
    pid: u32,
}

impl Drop for ElectionCore {
    fn drop(&mut self) {
        // A lease it holds belongs to the runtime of the process that acquired it; in a
        // forked child that runtime has no threads, so leak rather than touch it.
        if self.pid == rt::pid() {
            // SAFETY: dropped exactly once, here.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) };
        }
    }
}

impl ElectionCore {
    fn check(&self) -> PyResult<()> {
        if self.pid != rt::pid() {
            return Err(forked_error("election"));
        }
        Ok(())
    }
}

#[pymethods]
impl ElectionCore {
    #[new]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        wait: &Bound<'_, PyAny>,
        label: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        on_lost: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        crate::log::refresh_level(py, false);
        let t = args::target(url)?;
        let opts: LeaseOptions = args::options(ttl, Some(wait), Some(label), Some(data))?;
        // Check the options now rather than at the first campaign.
        opts.timing(&t.client.store().capabilities()).py()?;
        if !on_lost.is_none() && !on_lost.is_callable() {
            return Err(crate::errors::type_error("on_lost must be callable"));
        }
        Ok(ElectionCore {
            inner: std::mem::ManuallyDrop::new(Arc::new(Election::new(
                t.client.clone(),
                t.key.clone(),
                opts,
            ))),
            target: t,
            on_lost: (!on_lost.is_none()).then(|| on_lost.clone().unbind()),
            pid: rt::pid(),
        })
    }

    #[getter]
    fn url(&self) -> &str {
        &self.target.url
    }

    fn campaign(&self, py: Python<'_>) -> PyResult<PyLease> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let lease = block(
            py,
            async move { e.campaign_with_cancel(&c).await },
            Some(&cancel),
        )?
        .py()?;
        PyLease::wrap(py, lease, self.on_lost.as_ref().map(|c| c.bind(py)))
    }

    fn _campaign_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let on_lost = self.on_lost.as_ref().map(|c| c.clone_ref(py));
        rt::spawn_settle(
            py,
            async move { e.campaign_with_cancel(&c).await },
            done,
            move |py, lease| {
                let l = PyLease::wrap(py, lease, on_lost.as_ref().map(|c| c.bind(py)))?;
                Ok(Bound::new(py, l)?.into_any().unbind())
            },
        )?;
        Ok(Pending::token(cancel))
    }

    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        block(py, async move { e.resign().await }, None)?.py()
    }

    fn _resign_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        rt::spawn_settle(py, async move { e.resign().await }, done, |py, ()| {
            Ok(py.None())
        })?;
        Ok(Pending::detached())
    }

    /// The lease while this participant leads, else None.
    fn lease(&self, py: Python<'_>) -> PyResult<Option<PyLease>> {
        self.check()?;
        self.inner
            .lease()
            .map(|l| PyLease::wrap(py, l, None))
            .transpose()
    }

    fn leader(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        let l = block(py, async move { e.leader().await }, None)?.py()?;
        leader_dict(py, l)
    }

    fn _leader_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        let abort = rt::spawn_settle(py, async move { e.leader().await }, done, leader_dict)?;
        Ok(Pending::abort(abort))
    }

    #[pyo3(signature = (poll=None))]
    fn observe(&self, poll: Option<&Bound<'_, PyAny>>) -> PyResult<LeaderStream> {
        self.check()?;
        let w = self.inner.observe(poll_of(poll)?).py()?;
        Ok(LeaderStream {
            inner: Arc::new(tokio::sync::Mutex::new(w)),
            pid: rt::pid(),
        })
    }
}

/// Leadership changes; each `next()` returns a leader dict or None (nobody leads).
#[pyclass(module = "lease._lease", frozen)]
pub struct LeaderStream {
    inner: Arc<tokio::sync::Mutex<LeaderWatch>>,
    pid: u32,
}

#[pymethods]
impl LeaderStream {
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.pid != rt::pid() {
            return Err(forked_error("observer"));
        }
        let w = self.inner.clone();
        let l = block(py, async move { w.lock().await.next().await }, None)?.py()?;
        leader_dict(py, l)
    }

    fn _next_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        if self.pid != rt::pid() {
            return Err(forked_error("observer"));
        }
        let w = self.inner.clone();
        let abort = rt::spawn_settle(
            py,
            async move { w.lock().await.next().await },
            done,
            leader_dict,
        )?;
        Ok(Pending::abort(abort))
    }
}
