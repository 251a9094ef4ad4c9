//! The calls that acquire a lease: blocking, try, and started for asyncio. Each takes the
//! lease URL and one `Options` object (`options.rs`), built by the Python layer from its
//! keyword arguments.

use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::error::IntoPyResult;
use crate::held::PyLease;
use crate::options::{self, Options, Target};
use crate::runtime::{self, block, Pending};
use lease::Lease;

async fn acquire_future(
    t: Target,
    opts: lease::LeaseOptions,
    cancel: CancellationToken,
) -> lease::Result<Lease> {
    t.client.acquire_with_cancel(&t.key, &opts, &cancel).await
}

/// acquire(url, options) -> Lease: blocks (GIL released) until held.
#[pyfunction]
pub fn _acquire(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    options: &Bound<'_, Options>,
) -> PyResult<PyLease> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let o = options.get();
    // This thread asks: acquiring what it holds fails at once instead of waiting for itself.
    let opts = o.core.clone().owned_by_this_thread();
    let cancel = CancellationToken::new();
    let lease = block(py, acquire_future(t, opts, cancel.clone()), Some(&cancel))?.py()?;
    PyLease::wrap(py, lease, &o.notices)
}

/// try_acquire(url, options) -> Lease | None: one try (`options.wait` is not used).
#[pyfunction]
pub fn _try_acquire(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    options: &Bound<'_, Options>,
) -> PyResult<Option<PyLease>> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let o = options.get();
    let opts = o.core.clone().owned_by_this_thread();
    let got = block(
        py,
        async move { t.client.try_acquire(&t.key, &opts).await },
        None,
    )?
    .py()?;
    got.map(|l| PyLease::wrap(py, l, &o.notices)).transpose()
}

/// Start an acquire for asyncio; `done(ok, value)` receives the Lease or the exception.
/// `owner` names the asyncio task that awaits it.
#[pyfunction]
pub fn _acquire_start(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    options: &Bound<'_, Options>,
    done: Py<PyAny>,
    owner: String,
) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let o = options.get();
    let opts = o.core.clone().owner(owner);
    let notices = o.notices.clone_ref(py);
    let cancel = CancellationToken::new();
    runtime::spawn_settle(
        py,
        acquire_future(t, opts, cancel.clone()),
        done,
        move |py, lease| {
            let l = PyLease::wrap(py, lease, &notices)?;
            Ok(Bound::new(py, l)?.into_any().unbind())
        },
    )?;
    Ok(Pending::token(cancel))
}
