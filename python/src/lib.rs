//! `lease._lease`: the extension module behind the `lease` Python package.
//!
//! Wraps the Rust core directly. One tokio runtime per process runs every store request and
//! every renewal (see `runtime`); blocking calls release the GIL and stay interruptible by Ctrl-C;
//! asyncio calls run on the runtime and settle an `asyncio.Future`. The thin Python layer in
//! `lease/` gives the public signatures, the exception classes and the dataclasses.

use pyo3::prelude::*;

mod acquire;
mod election;
mod error;
mod fence;
mod held;
mod json;
mod log;
mod options;
mod runtime;
mod session;
mod status;
mod yielding;

/// Called by `lease/__init__.py` from an `atexit` hook: stop calling back into Python from the
/// runtime's threads, the interpreter is going away.
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    runtime::shut_down(py);
}

/// Re-read the `lease` logger's level now (it is otherwise re-read at most once a second).
#[pyfunction]
fn _refresh_log_level(py: Python<'_>) {
    log::refresh_level(py, true);
}

/// Tests only: log a message through the core's tracing path (target `lease`).
#[pyfunction]
fn _log_through_tracing(level: &str, message: &str) {
    match level {
        "debug" => tracing::debug!(target: "lease", "{message}"),
        "info" => tracing::info!(target: "lease", "{message}"),
        "warning" => tracing::warn!(target: "lease", "{message}"),
        _ => tracing::error!(target: "lease", "{message}"),
    }
}

/// This process's metrics: a list of {name, help, type, samples} (the core's
/// `metrics::Snapshot::to_json`).
#[pyfunction]
fn _metrics(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(json::to_py(py, &lease::metrics::snapshot().to_json())?.unbind())
}

/// This process's metrics in the Prometheus text format.
#[pyfunction]
fn _metrics_text() -> String {
    lease::metrics::encode_text()
}

#[pymodule]
fn _lease(m: &Bound<'_, PyModule>) -> PyResult<()> {
    runtime::init_pid();
    lease::set_client_name("python");
    log::install(m.py());
    m.add("__version__", lease::VERSION)?;
    m.add_class::<held::PyLease>()?;
    m.add_class::<runtime::Pending>()?;
    m.add_class::<status::Watch>()?;
    m.add_class::<election::ElectionCore>()?;
    m.add_class::<election::LeaderStream>()?;
    m.add_class::<fence::GateCore>()?;
    m.add_class::<options::Options>()?;
    m.add_class::<session::SessionCore>()?;
    m.add_class::<session::GrantCore>()?;
    m.add_function(wrap_pyfunction!(session::_open_session, m)?)?;
    m.add_function(wrap_pyfunction!(session::_open_session_start, m)?)?;
    m.add_function(wrap_pyfunction!(session::_acquire_on_process_session, m)?)?;
    m.add_function(wrap_pyfunction!(
        session::_acquire_on_process_session_start,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(acquire::_acquire, m)?)?;
    m.add_function(wrap_pyfunction!(acquire::_try_acquire, m)?)?;
    m.add_function(wrap_pyfunction!(acquire::_acquire_start, m)?)?;
    m.add_function(wrap_pyfunction!(options::_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(status::_status, m)?)?;
    m.add_function(wrap_pyfunction!(status::_status_start, m)?)?;
    m.add_function(wrap_pyfunction!(yielding::_ask_yield, m)?)?;
    m.add_function(wrap_pyfunction!(yielding::_ask_yield_start, m)?)?;
    m.add_function(wrap_pyfunction!(fence::_fenced_get, m)?)?;
    m.add_function(wrap_pyfunction!(fence::_fenced_get_start, m)?)?;
    m.add_function(wrap_pyfunction!(error::_error_for_kind, m)?)?;
    m.add_function(wrap_pyfunction!(error::_error_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(fence::_parse_token, m)?)?;
    m.add_function(wrap_pyfunction!(_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(_metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(_refresh_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(_log_through_tracing, m)?)?;
    Ok(())
}
