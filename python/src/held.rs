//! `lease.Lease`: a held lease, its renewals seen from Python, release, fenced writes through
//! it, and the `on_lost` notices.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::error::{holder_dict, to_py, IntoPyResult};
use crate::options::{self, Notices};
use crate::runtime::{self, block, Pending};
use lease::{Error, ErrorKind, Lease};

/// What is waiting to hear that a lease was lost: the `lost` event (created when first asked
/// for) and the `on_lost` callbacks (each called once).
#[derive(Default)]
struct Notice {
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    event: Option<Py<PyAny>>,
    callbacks: Vec<Py<PyAny>>,
}

impl Notice {
    fn wanted(&self) -> bool {
        let s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        s.event.is_some() || !s.callbacks.is_empty()
    }

    /// Set the event and run the callbacks (GIL held, no lock held while calling Python).
    fn fire(&self, py: Python<'_>, err: &Bound<'_, PyAny>) {
        let (event, callbacks) = {
            let mut s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            (
                s.event.as_ref().map(|e| e.clone_ref(py)),
                std::mem::take(&mut s.callbacks),
            )
        };
        if let Some(ev) = event {
            let _ = ev.call_method0(py, "set");
        }
        for cb in callbacks {
            run_callback(py, cb.bind(py), err);
        }
    }
}

/// Call a user's `on_lost` callback; an exception it raises is logged (logger `lease`, with
/// its traceback), never lost silently and never propagated into the library.
fn run_callback(py: Python<'_>, cb: &Bound<'_, PyAny>, err: &Bound<'_, PyAny>) {
    run_user_callback(py, "on_lost", cb, err)
}

/// Call a user's callback `name` with `arg`, as [`run_callback`] does.
fn run_user_callback(py: Python<'_>, name: &str, cb: &Bound<'_, PyAny>, arg: &Bound<'_, PyAny>) {
    if let Err(e) = cb.call1((arg,)) {
        let logged = (|| -> PyResult<()> {
            let logger = py
                .import("logging")?
                .call_method1("getLogger", ("lease",))?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("exc_info", e.value(py))?;
            logger.call_method(
                "error",
                (format!("{name} callback %r raised an exception"), cb),
                Some(&kwargs),
            )?;
            Ok(())
        })();
        if logged.is_err() {
            e.write_unraisable(py, Some(cb));
        }
    }
}

fn import_attr<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || py.import(module)?.getattr(name).map(Bound::unbind))
        .map(|o| o.bind(py))
}

/// `lease.YieldRequested(by, to, reason)`: what a holder is told of a yield request.
pub fn yield_requested_obj<'py>(
    py: Python<'py>,
    y: &lease::YieldRequested,
) -> PyResult<Bound<'py, PyAny>> {
    static CLS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let cls = import_attr(py, &CLS, "lease._types", "YieldRequested")?;
    cls.call1((y.by.as_str(), y.to.as_deref(), y.reason.as_deref()))
}

/// Call `on_yield` on the notifier thread (as `on_lost`) once per yield request that names
/// `lease`'s grant ([`Lease::on_yield`] says when).
fn forward_yields(lease: &Lease, on_yield: Py<PyAny>) {
    let on_yield = Arc::new(on_yield);
    lease.on_yield(move |y| {
        let (cb, y) = (on_yield.clone(), y.clone());
        runtime::notify(Box::new(move |py| match yield_requested_obj(py, &y) {
            Ok(obj) => run_user_callback(py, "on_yield", cb.bind(py), &obj),
            Err(e) => e.write_unraisable(py, Some(cb.bind(py))),
        }));
    });
}

/// `lease.Holder(**fields)`.
pub fn holder_obj<'py>(py: Python<'py>, h: &lease::Holder) -> PyResult<Bound<'py, PyAny>> {
    static HOLDER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let cls = import_attr(py, &HOLDER, "lease._types", "Holder")?;
    cls.call((), Some(&holder_dict(py, h)?))
}

/// A held lease. Use it as a context manager (`with` / `async with`) or call `release()`.
#[pyclass(module = "lease", name = "Lease", frozen, weakref)]
pub struct PyLease {
    inner: ManuallyDrop<Lease>,
    /// The process that acquired it. A forked child does not hold its parent's leases.
    pid: u32,
    notice: Arc<Notice>,
}

impl Drop for PyLease {
    fn drop(&mut self) {
        if self.pid == runtime::pid() {
            // Released in the background if still held (the core's release-on-drop).
            // SAFETY: dropped exactly once, here.
            unsafe { ManuallyDrop::drop(&mut self.inner) };
        }
        // In a forked child the core lease belongs to the parent's runtime, which has no
        // threads here: leak it rather than touch it.
    }
}

impl PyLease {
    pub fn wrap(py: Python<'_>, lease: Lease, notices: &Notices) -> PyResult<Self> {
        let notice = Arc::new(Notice::default());
        if let Some(cb) = &notices.on_lost {
            notice
                .slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .callbacks
                .push(cb.clone_ref(py));
        }
        if let Some(cb) = &notices.on_yield {
            forward_yields(&lease, cb.clone_ref(py));
        }
        let n = notice.clone();
        let url = lease.url().to_string();
        let epoch = lease.epoch();
        lease.on_lost(move |reason| {
            if !n.wanted() {
                return;
            }
            let err = reason.error(&url, epoch);
            runtime::notify(Box::new(move |py| {
                let exc = to_py(err).into_value(py).into_any();
                n.fire(py, exc.bind(py));
            }));
        });
        Ok(PyLease {
            inner: ManuallyDrop::new(lease),
            pid: runtime::pid(),
            notice,
        })
    }

    fn forked(&self) -> bool {
        self.pid != runtime::pid()
    }

    fn inherited_error(&self) -> PyErr {
        to_py(
            Error::new(
                ErrorKind::Lost,
                format!(
                    "{} (epoch {}) was acquired by process {} before os.fork(): a forked child \
                     does not hold its parent's leases (acquire it in the child instead)",
                    self.inner.url(),
                    self.inner.epoch(),
                    self.pid
                ),
            )
            .with_lease(self.inner.url())
            .with_epoch(self.inner.epoch()),
        )
    }

    fn owned(&self) -> PyResult<&Lease> {
        if self.forked() {
            return Err(self.inherited_error());
        }
        Ok(&self.inner)
    }

    /// What fences this lease's fenced operations (not in a forked child).
    fn fences(&self) -> PyResult<crate::fence::Fences> {
        Ok(crate::fence::Fences::Lease(self.owned()?.clone()))
    }

    /// What leaving a `with` block does once the release has run: see `Lease.__exit__`.
    fn exit_outcome(
        &self,
        py: Python<'_>,
        exc_value: Option<&Bound<'_, PyAny>>,
        released: PyResult<()>,
    ) -> PyResult<bool> {
        let err = match released {
            Ok(()) => return Ok(false),
            Err(e) => e,
        };
        let lost = err.is_instance_of_lost(py);
        match exc_value.filter(|v| !v.is_none()) {
            None if lost => Err(err),
            None => {
                crate::log::log_now(
                    py,
                    30,
                    &format!(
                        "could not release {} on leaving the block: {}; it expires by itself \
                         after its ttl",
                        self.inner.url(),
                        err.value(py)
                    ),
                );
                Ok(false)
            }
            Some(in_flight) => {
                // Never mask the block's own exception; say what happened beside it.
                let what = if lost {
                    format!(
                        "lease: {} was lost while this block ran; it may have overlapped with \
                         another holder ({})",
                        self.inner.url(),
                        err.value(py)
                    )
                } else {
                    format!(
                        "lease: could not release {}: {}",
                        self.inner.url(),
                        err.value(py)
                    )
                };
                crate::log::log_now(py, 30, &what);
                if in_flight.hasattr("add_note")? {
                    let _ = in_flight.call_method1("add_note", (what,));
                }
                Ok(false)
            }
        }
    }
}

trait LostCheck {
    fn is_instance_of_lost(&self, py: Python<'_>) -> bool;
}

impl LostCheck for PyErr {
    fn is_instance_of_lost(&self, py: Python<'_>) -> bool {
        static LOST: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        match import_attr(py, &LOST, "lease._errors", "LeaseLost") {
            Ok(cls) => cls
                .cast::<PyType>()
                .map(|t| self.is_instance(py, t))
                .unwrap_or(false),
            Err(_) => false,
        }
    }
}

#[pymethods]
impl PyLease {
    /// The fencing token: strictly increasing per lease, unchanged by renewals and release.
    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    /// The lease's URL.
    #[getter]
    fn url(&self) -> &str {
        self.inner.url()
    }

    /// `URL#EPOCH@HOLDER`: the token to hand to resources that check it.
    #[getter]
    fn token(&self) -> String {
        self.inner.token().to_string()
    }

    /// The grant of a queued lock (`lease._types.Grant`: mode, scope, range, token, permits),
    /// or None for a lease.
    #[getter]
    fn grant<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.grant().map(|g| grant_obj(py, g)).transpose()
    }

    /// This holder, as written in the record.
    #[getter]
    fn holder<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        holder_obj(py, self.inner.holder())
    }

    /// The ttl in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64()
    }

    /// Seconds this holder may still rely on the lease (0.0 once lost or released).
    fn remaining(&self) -> f64 {
        if self.forked() {
            return 0.0;
        }
        self.inner.remaining().as_secs_f64()
    }

    /// True while the lease is held (remaining() > 0).
    #[getter]
    fn held(&self) -> bool {
        !self.forked() && self.inner.is_held()
    }

    /// Return the seconds left if at least `min_remaining` are; else raise `LeaseLost`.
    #[pyo3(signature = (min_remaining = None))]
    fn ensure_held(&self, min_remaining: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let min = options::opt_seconds("min_remaining", min_remaining)?.unwrap_or(Duration::ZERO);
        let lease = self.owned()?;
        lease.ensure_held(min).map(|d| d.as_secs_f64()).py()
    }

    /// A `threading.Event` set when the lease is lost (not when it is released).
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        static EVENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if self.forked() {
            // Not held here. (The parent's runtime threads may have held this lease's locks at
            // the fork; a child never takes them.)
            let ev = import_attr(py, &EVENT, "threading", "Event")?.call0()?;
            ev.call_method0("set")?;
            return Ok(ev.unbind());
        }
        if let Some(ev) = &self
            .notice
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .event
        {
            return Ok(ev.clone_ref(py));
        }
        // Created outside the lock: Python code may switch threads.
        let fresh = import_attr(py, &EVENT, "threading", "Event")?
            .call0()?
            .unbind();
        let ev = {
            let mut s = self.notice.slots.lock().unwrap_or_else(|p| p.into_inner());
            s.event.get_or_insert(fresh).clone_ref(py)
        };
        if self.forked() || self.inner.lost_token().is_cancelled() {
            ev.call_method0(py, "set")?;
        }
        Ok(ev)
    }

    /// The latest yield request that named this lease's grant (a `lease.YieldRequested`), or
    /// None: a waiter or an operator asked it to step aside (docs/protocol.md §10). Not a loss:
    /// the lease stays held until released.
    #[getter]
    fn yield_requested<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.forked() {
            return Ok(None);
        }
        self.inner
            .yield_requested()
            .map(|y| yield_requested_obj(py, &y))
            .transpose()
    }

    /// Why the lease was lost, or None while it is not.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        if self.forked() {
            return Some(format!("acquired by process {} before os.fork()", self.pid));
        }
        self.inner.lost_reason().map(|r| r.to_string())
    }

    /// Call `callback(err: LeaseLost)` once when the lease is lost, from the library's
    /// notifier thread (at once, from there, if it already is lost).
    fn on_lost(&self, py: Python<'_>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        options::check_callable("on_lost", callback)?;
        let _ = py;
        if self.forked() {
            // Not held in this process: there is nothing to lose here.
            return Ok(());
        }
        self.notice
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .callbacks
            .push(callback.clone().unbind());
        if let Some(reason) = self.inner.lost_reason() {
            let err = reason.error(self.inner.url(), self.inner.epoch());
            let n = self.notice.clone();
            runtime::notify(Box::new(move |py| {
                let exc = to_py(err).into_value(py).into_any();
                n.fire(py, exc.bind(py));
            }));
        }
        Ok(())
    }

    /// The lease's health now: "healthy", "late", "unknown" or "lost" (docs/protocol.md §4).
    #[getter]
    fn health(&self) -> &'static str {
        if self.forked() {
            return "lost";
        }
        self.inner.health().as_str()
    }

    /// Call `callback(event: HealthEvent)` with the current health, then at each change, from
    /// the library's notifier thread, in order: `event.health` is "healthy", "late",
    /// "unknown" or "lost", `event.remaining` the seconds left, `event.reason` why it was
    /// lost ("expired", "taken_over", "broken", "preempted", "vanished", "overwritten"; a
    /// queued lock's grant: "session_deleted", "removed", "lock_replaced") or None. A release
    /// ends the calls without one. An exception the callback raises is reported, not raised.
    fn on_health(&self, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        options::check_callable("on_health", callback)?;
        if self.forked() {
            return Ok(());
        }
        let cb = Arc::new(callback.clone().unbind());
        self.inner.on_health(move |e: &lease::HealthEvent| {
            let (cb, health) = (cb.clone(), e.health.as_str());
            let remaining = e.remaining.as_secs_f64();
            let reason = e.reason.as_ref().map(|r| r.kind());
            runtime::notify(Box::new(move |py| {
                static EVENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
                let called = import_attr(py, &EVENT, "lease._types", "HealthEvent")
                    .and_then(|cls| cls.call1((health, remaining, reason)))
                    .and_then(|event| cb.call1(py, (event,)));
                if let Err(err) = called {
                    err.write_unraisable(py, Some(cb.bind(py)));
                }
            }));
        });
        Ok(())
    }

    /// Renew now (before a long step, say); return the seconds left. Raises `LeaseLost`.
    fn renew(&self, py: Python<'_>) -> PyResult<f64> {
        let lease = self.owned()?.clone();
        block(py, async move { lease.renew().await }, None)?
            .map(|d| d.as_secs_f64())
            .py()
    }

    /// Change the lease's ttl (seconds, a timedelta or a str with a unit, as `acquire`'s
    /// `ttl=`): a renewal made at once writes it, and the renewals after it follow it. Returns
    /// the seconds left. Raises `InvalidArgument` (out of range, a queued lock's grant) or
    /// `LeaseLost`.
    fn set_ttl(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<f64> {
        let ttl = options::ttl_seconds(ttl)?;
        let lease = self.owned()?.clone();
        block(py, async move { lease.set_ttl(ttl).await }, None)?
            .map(|d| d.as_secs_f64())
            .py()
    }

    /// Change the data stored in the lease's record (`None` removes it): a renewal made at
    /// once writes it. Returns the seconds left. Raises `InvalidArgument` or `LeaseLost`.
    fn set_data(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<f64> {
        let data = options::opt_text("data", Some(data))?;
        let lease = self.owned()?.clone();
        block(
            py,
            async move { lease.set_data(data.as_deref()).await },
            None,
        )?
        .map(|d| d.as_secs_f64())
        .py()
    }

    /// `set_ttl` for asyncio: `await l.set_ttl_async("5m")` (the loop goes on meanwhile).
    fn set_ttl_async<'py>(
        slf: Bound<'py, Self>,
        ttl: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static SET_TTL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &SET_TTL, "lease._aio", "set_ttl_async")?.call1((slf, ttl))
    }

    /// `set_data` for asyncio: `await l.set_data_async("10.0.0.2:80")`.
    fn set_data_async<'py>(
        slf: Bound<'py, Self>,
        data: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static SET_DATA: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &SET_DATA, "lease._aio", "set_data_async")?.call1((slf, data))
    }

    /// Start `set_ttl`; `done(ok, seconds_left)` is called when finished (arguments checked
    /// here, at once).
    fn _set_ttl_start(
        &self,
        py: Python<'_>,
        ttl: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let ttl = options::ttl_seconds(ttl)?;
        let lease = self.owned()?.clone();
        runtime::spawn_settle(py, async move { lease.set_ttl(ttl).await }, done, seconds)?;
        Ok(Pending::detached())
    }

    /// Start `set_data`; `done(ok, seconds_left)` is called when finished.
    fn _set_data_start(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let data = options::opt_text("data", Some(data))?;
        let lease = self.owned()?.clone();
        runtime::spawn_settle(
            py,
            async move { lease.set_data(data.as_deref()).await },
            done,
            seconds,
        )?;
        Ok(Pending::detached())
    }

    /// Write `data` (bytes, bytearray or str) at `key` in this lease's store, stamped with
    /// this lease, epoch and holder, unless a newer holder (or another lease) wrote it: then
    /// raise `Fenced` (its `epoch` is the newer one). With `if_version` (a version read with
    /// `fenced_get`), only if the object is still at that version; with `if_absent=True`, only
    /// if it does not exist; otherwise `Conflict`. Returns the object's new version.
    #[pyo3(signature = (key, data, *, if_version = None, if_absent = None))]
    fn fenced_put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        if_version: Option<&Bound<'_, PyAny>>,
        if_absent: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let expected = crate::fence::Expected::from_args(if_version, if_absent)?;
        crate::fence::put(py, self.fences()?, key, data, expected)
    }

    /// Read-modify-write `key` without losing updates: `fn(old)` gets the object now (a
    /// `FencedObject`, or None) and returns the new contents, written only if nobody wrote in
    /// between; on `Conflict` it reads and calls `fn` again (bounded). Returns the new
    /// version. (Python, in `lease/_update.py`: `fn` runs on the calling thread.)
    fn fenced_update<'py>(
        slf: Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        f: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static UPDATE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &UPDATE, "lease._update", "fenced_update")?.call1((slf, key, f))
    }

    /// `fenced_update()` for asyncio (`f` may be a plain or an async function).
    fn fenced_update_async<'py>(
        slf: Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        f: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static UPDATE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &UPDATE, "lease._update", "fenced_update_async")?.call1((slf, key, f))
    }

    /// Read `key` in this lease's store (a dict for `lease.FencedObject`, or None).
    fn _fenced_get(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        crate::fence::get_in(py, self.fences()?, key, crate::fence::Read::Plain)
    }

    fn _fenced_get_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        crate::fence::get_in_start(py, self.fences()?, key, crate::fence::Read::Plain, done)
    }

    /// Read `key` and fence it with this lease's token (a `lease.FencedObject`, or None): from
    /// then on no holder whose grant ended before this one began (for a reader: no stale
    /// writer) can change it. The first read of an object under a grant writes it back
    /// unchanged with this token (1 GET + 1 PUT); later ones only read.
    fn fenced_read<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::fence::read_object(py, self.fences()?, key)
    }

    /// `fenced_read()` for asyncio.
    fn fenced_read_async<'py>(
        slf: Bound<'py, Self>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static READ: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &READ, "lease._aio", "fenced_read_async")?.call1((slf, key))
    }

    fn _fenced_read_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        crate::fence::get_in_start(py, self.fences()?, key, crate::fence::Read::Fenced, done)
    }

    /// Delete `key` unless a newer holder wrote it (`Fenced`); false if it did not exist.
    fn fenced_delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        crate::fence::delete(py, self.fences()?, key)
    }

    /// `fenced_put()` for asyncio.
    #[pyo3(signature = (key, data, *, if_version = None, if_absent = None))]
    fn fenced_put_async<'py>(
        slf: Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        data: Bound<'py, PyAny>,
        if_version: Option<Bound<'py, PyAny>>,
        if_absent: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static PUT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        // Bad arguments raise here, at the call, not when the coroutine is awaited.
        crate::fence::Expected::from_args(if_version.as_ref(), if_absent.as_ref())?;
        import_attr(py, &PUT, "lease._aio", "fenced_put_async")?
            .call1((slf, key, data, if_version, if_absent))
    }

    /// `fenced_delete()` for asyncio.
    fn fenced_delete_async<'py>(
        slf: Bound<'py, Self>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static DELETE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &DELETE, "lease._aio", "fenced_delete_async")?.call1((slf, key))
    }

    #[pyo3(signature = (key, data, done, if_version = None, if_absent = None))]
    fn _fenced_put_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        done: Py<PyAny>,
        if_version: Option<&Bound<'_, PyAny>>,
        if_absent: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let expected = crate::fence::Expected::from_args(if_version, if_absent)?;
        crate::fence::put_start(py, self.fences()?, key, data, expected, done)
    }

    fn _fenced_delete_start(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        crate::fence::delete_start(py, self.fences()?, key, done)
    }

    /// Release the lease (idempotent). Raises `LeaseLost` if it was lost before: whatever was
    /// done under it may have overlapped with another holder.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let lease = self.owned()?.clone();
        block(py, async move { lease.release().await }, None)?.py()
    }

    /// `release()` for asyncio (the event loop does not block).
    fn release_async<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        static RELEASE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &RELEASE, "lease._aio", "release_async")?.call1((slf,))
    }

    /// Start releasing; `done(ok, value)` is called (see `runtime::spawn_settle`) when finished.
    fn _release_start(&self, py: Python<'_>, done: Py<PyAny>) -> PyResult<Pending> {
        let lease = self.owned()?.clone();
        runtime::spawn_settle(py, async move { lease.release().await }, done, |py, ()| {
            Ok(py.None())
        })?;
        Ok(Pending::detached())
    }

    /// Release in the background, without waiting (used when nobody is left to wait).
    fn _release_background(&self) -> PyResult<()> {
        if self.forked() {
            return Ok(());
        }
        let lease = (*self.inner).clone();
        runtime::handle()?.spawn(async move {
            let _ = lease.release().await;
        });
        Ok(())
    }

    /// What leaving a block does after the release (shared by `__exit__` and `__aexit__`).
    fn _exit_outcome(
        &self,
        py: Python<'_>,
        exc_value: Option<&Bound<'_, PyAny>>,
        release_error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let released = match release_error.filter(|e| !e.is_none()) {
            None => Ok(()),
            Some(e) => Err(PyErr::from_value(e.clone())),
        };
        self.exit_outcome(py, exc_value, released)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Release the lease on leaving the block, also when it raised.
    ///
    /// If the lease was lost while the block ran: when the block raised, its exception goes on
    /// unchanged (a note and a warning say the lease was lost); when it did not, `LeaseLost` is
    /// raised here, because the work may have overlapped with another holder. Other release
    /// failures (store unreachable) are logged: the lease then expires after its ttl.
    #[pyo3(signature = (exc_type, exc_value, traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc_value: Option<&Bound<'_, PyAny>>,
        traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _ = (exc_type, traceback);
        if self.forked() {
            return match exc_value.filter(|v| !v.is_none()) {
                None => Err(self.inherited_error()),
                Some(_) => Ok(false),
            };
        }
        let lease = (*self.inner).clone();
        let released = match block(py, async move { lease.release().await }, None) {
            Ok(r) => r.map_err(to_py),
            // Interrupted (Ctrl-C) while releasing: the release goes on in the background.
            Err(interrupt) => return Err(interrupt),
        };
        self.exit_outcome(py, exc_value, released)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        static READY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        import_attr(py, &READY, "lease._aio", "ready")?.call1((slf,))
    }

    #[pyo3(signature = (exc_type, exc_value, traceback))]
    fn __aexit__<'py>(
        slf: Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        exc_value: Option<Bound<'py, PyAny>>,
        traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static AEXIT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        let _ = (exc_type, traceback);
        import_attr(py, &AEXIT, "lease._aio", "lease_aexit")?.call1((slf, exc_value))
    }

    fn __repr__(&self) -> String {
        let state = if self.forked() {
            "inherited across fork".to_string()
        } else if let Some(r) = self.inner.lost_reason() {
            format!("lost: {r}")
        } else if self.inner.is_held() {
            format!("held, {:.1}s left", self.inner.remaining().as_secs_f64())
        } else {
            "released".to_string()
        };
        format!(
            "<lease.Lease {} epoch={} {}>",
            self.inner.url(),
            self.inner.epoch(),
            state
        )
    }
}

/// Seconds left, as a Python float (what `set_ttl` and `set_data` return).
fn seconds(py: Python<'_>, left: Duration) -> PyResult<Py<PyAny>> {
    Ok(left.as_secs_f64().into_pyobject(py)?.into_any().unbind())
}

/// A queued lock's grant as `lease._types.Grant` (mode, token, scope, range, permits): what
/// `Lease.grant` and `SharedGrant.grant` give.
pub(crate) fn grant_obj<'py>(py: Python<'py>, g: &lease::Grant) -> PyResult<Bound<'py, PyAny>> {
    static GRANT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let (scope, range) = match &g.scope {
        lease::Scope::Whole => (None, None),
        lease::Scope::Path(p) => (Some(p.clone()), None),
        lease::Scope::Range { start, end } => (None, Some((*start, *end))),
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("mode", g.mode.as_str())?;
    kwargs.set_item("token", g.token)?;
    kwargs.set_item("scope", scope)?;
    kwargs.set_item("range", range)?;
    kwargs.set_item("permits", g.permits)?;
    let cls = import_attr(py, &GRANT, "lease._types", "Grant")?;
    cls.call((), Some(&kwargs))
}
