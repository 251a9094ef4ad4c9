//! Elections: `ElectionCore` (wrapped by `lease.Election`) and the stream of leaders.

use std::sync::Arc;

use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::error::IntoPyResult;
use crate::held::PyLease;
use crate::json;
use crate::options::{self, Notices, Options, Target};
use crate::runtime::{self, block, Pending};
use crate::status::{forked_error, poll_of};
use lease::{Election, LeaderWatch};

/// `{ holder, epoch, data }` (the core's `Leader` JSON), or `None` when nobody leads.
fn leader_dict(py: Python<'_>, l: Option<lease::Leader>) -> PyResult<Py<PyAny>> {
    match l {
        None => Ok(py.None()),
        Some(l) => Ok(json::to_py(py, &l.to_json())?.unbind()),
    }
}

/// One participant of an election (the Python class `lease.Election` wraps it).
#[pyclass(module = "lease._lease", frozen)]
pub struct ElectionCore {
    inner: std::mem::ManuallyDrop<Arc<Election>>,
    target: Target,
    notices: Notices,
    pid: u32,
}

impl Drop for ElectionCore {
    fn drop(&mut self) {
        // A lease it holds belongs to the runtime of the process that acquired it; in a
        // forked child that runtime has no threads, so leak rather than touch it.
        if self.pid == runtime::pid() {
            // SAFETY: dropped exactly once, here.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) };
        }
    }
}

impl ElectionCore {
    fn check(&self) -> PyResult<()> {
        if self.pid != runtime::pid() {
            return Err(forked_error("election"));
        }
        Ok(())
    }
}

#[pymethods]
impl ElectionCore {
    #[new]
    fn new(py: Python<'_>, url: &Bound<'_, PyAny>, options: &Bound<'_, Options>) -> PyResult<Self> {
        crate::log::refresh_level(py, false);
        let t = options::target(url)?;
        let o = options.get();
        // Check the options now rather than at the first campaign.
        o.core.timing(&t.client.store().capabilities()).py()?;
        Ok(ElectionCore {
            inner: std::mem::ManuallyDrop::new(Arc::new(Election::new(
                t.client.clone(),
                t.key.clone(),
                o.core.clone(),
            ))),
            target: t,
            notices: o.notices.clone_ref(py),
            pid: runtime::pid(),
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
        PyLease::wrap(py, lease, &self.notices)
    }

    fn _campaign_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        self.check()?;
        let e = Arc::clone(&self.inner);
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let notices = self.notices.clone_ref(py);
        runtime::spawn_settle(
            py,
            async move { e.campaign_with_cancel(&c).await },
            done,
            move |py, lease| {
                let l = PyLease::wrap(py, lease, &notices)?;
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
        runtime::spawn_settle(py, async move { e.resign().await }, done, |py, ()| {
            Ok(py.None())
        })?;
        Ok(Pending::detached())
    }

    /// The lease while this participant leads, else None.
    fn lease(&self, py: Python<'_>) -> PyResult<Option<PyLease>> {
        self.check()?;
        self.inner
            .lease()
            .map(|l| PyLease::wrap(py, l, &Notices::default()))
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
        let abort = runtime::spawn_settle(py, async move { e.leader().await }, done, leader_dict)?;
        Ok(Pending::abort(abort))
    }

    #[pyo3(signature = (poll=None))]
    fn observe(&self, poll: Option<&Bound<'_, PyAny>>) -> PyResult<LeaderStream> {
        self.check()?;
        let w = self.inner.observe(poll_of(poll)?).py()?;
        Ok(LeaderStream {
            inner: Arc::new(tokio::sync::Mutex::new(w)),
            pid: runtime::pid(),
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
        if self.pid != runtime::pid() {
            return Err(forked_error("observer"));
        }
        let w = self.inner.clone();
        let l = block(py, async move { w.lock().await.next().await }, None)?.py()?;
        leader_dict(py, l)
    }

    fn _next_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        if self.pid != runtime::pid() {
            return Err(forked_error("observer"));
        }
        let w = self.inner.clone();
        let abort = runtime::spawn_settle(
            py,
            async move { w.lock().await.next().await },
            done,
            leader_dict,
        )?;
        Ok(Pending::abort(abort))
    }
}
