//! The calls that acquire a lease: blocking, try, and started for asyncio.

use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::error::IntoPyResult;
use crate::held::PyLease;
use crate::options::{self, Target};
use crate::runtime::{self, block, Pending};
use lease::Lease;

async fn acquire_future(
    t: Target,
    opts: lease::LeaseOptions,
    cancel: CancellationToken,
) -> lease::Result<Lease> {
    t.client.acquire_with_cancel(&t.key, &opts, &cancel).await
}

/// acquire(url, ttl, wait, label, data, on_lost, unavailable_timeout, shared, permits, scope,
/// range, queue, poll) -> Lease: blocks (GIL released) until held.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn _acquire(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    wait: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    on_lost: &Bound<'_, PyAny>,
    unavailable_timeout: &Bound<'_, PyAny>,
    shared: &Bound<'_, PyAny>,
    permits: &Bound<'_, PyAny>,
    scope: &Bound<'_, PyAny>,
    range: &Bound<'_, PyAny>,
    queue: &Bound<'_, PyAny>,
    poll: &Bound<'_, PyAny>,
) -> PyResult<PyLease> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let mut opts = options::options(
        ttl,
        Some(wait),
        Some(label),
        Some(data),
        Some(unavailable_timeout),
    )?;
    options::queue_options(
        &mut opts,
        &options::QueueArgs {
            shared,
            permits,
            scope,
            range,
            queue,
            poll,
        },
    )?;
    let cancel = CancellationToken::new();
    let lease = block(py, acquire_future(t, opts, cancel.clone()), Some(&cancel))?.py()?;
    PyLease::wrap(py, lease, Some(on_lost))
}

/// try_acquire(url, ttl, label, data, on_lost, shared, permits, scope, range, queue, poll) ->
/// Lease | None.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn _try_acquire(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    on_lost: &Bound<'_, PyAny>,
    shared: &Bound<'_, PyAny>,
    permits: &Bound<'_, PyAny>,
    scope: &Bound<'_, PyAny>,
    range: &Bound<'_, PyAny>,
    queue: &Bound<'_, PyAny>,
    poll: &Bound<'_, PyAny>,
) -> PyResult<Option<PyLease>> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let mut opts = options::options(ttl, None, Some(label), Some(data), None)?;
    options::queue_options(
        &mut opts,
        &options::QueueArgs {
            shared,
            permits,
            scope,
            range,
            queue,
            poll,
        },
    )?;
    let got = block(
        py,
        async move { t.client.try_acquire(&t.key, &opts).await },
        None,
    )?
    .py()?;
    got.map(|l| PyLease::wrap(py, l, Some(on_lost))).transpose()
}

/// Start an acquire for asyncio; `done(ok, value)` receives the Lease or the exception.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn _acquire_start(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    ttl: &Bound<'_, PyAny>,
    wait: &Bound<'_, PyAny>,
    label: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    on_lost: &Bound<'_, PyAny>,
    unavailable_timeout: &Bound<'_, PyAny>,
    shared: &Bound<'_, PyAny>,
    permits: &Bound<'_, PyAny>,
    scope: &Bound<'_, PyAny>,
    range: &Bound<'_, PyAny>,
    queue: &Bound<'_, PyAny>,
    poll: &Bound<'_, PyAny>,
    done: Py<PyAny>,
) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let mut opts = options::options(
        ttl,
        Some(wait),
        Some(label),
        Some(data),
        Some(unavailable_timeout),
    )?;
    options::queue_options(
        &mut opts,
        &options::QueueArgs {
            shared,
            permits,
            scope,
            range,
            queue,
            poll,
        },
    )?;
    let on_lost = on_lost.clone().unbind();
    if !on_lost.is_none(py) {
        options::check_callable("on_lost", on_lost.bind(py))?;
    }
    let cancel = CancellationToken::new();
    runtime::spawn_settle(
        py,
        acquire_future(t, opts, cancel.clone()),
        done,
        move |py, lease| {
            let l = PyLease::wrap(py, lease, Some(on_lost.bind(py)))?;
            Ok(Bound::new(py, l)?.into_any().unbind())
        },
    )?;
    Ok(Pending::token(cancel))
}
