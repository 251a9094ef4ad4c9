//! `lease._lease`: the extension module behind the `lease` Python package.
//!
//! Wraps the Rust core directly. One tokio runtime per process runs every store request and
//! every renewal (see `rt`); blocking calls release the GIL and stay interruptible by Ctrl-C;
//! asyncio calls run on the runtime and settle an `asyncio.Future`. The thin Python layer in
//! `lease/` gives the public signatures, the exception classes and the dataclasses.

use pyo3::prelude::*;

mod args;
mod errors;
mod fence;
mod log;
mod observe;
mod pylease;
mod rt;

/// Called by `lease/__init__.py` from an `atexit` hook: stop calling back into Python from the
/// runtime's threads, the interpreter is going away.
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    rt::shut_down(py);
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

#[pymodule]
fn _lease(m: &Bound<'_, PyModule>) -> PyResult<()> {
    rt::init_pid();
    lease::set_client_name("python");
    log::install(m.py());
    m.add("__version__", lease::VERSION)?;
    m.add_class::<pylease::PyLease>()?;
    m.add_class::<pylease::Pending>()?;
    m.add_class::<observe::Watch>()?;
    m.add_class::<observe::ElectionCore>()?;
    m.add_class::<observe::LeaderStream>()?;
    m.add_class::<fence::GateCore>()?;
    m.add_function(wrap_pyfunction!(pylease::_acquire, m)?)?;
    m.add_function(wrap_pyfunction!(pylease::_try_acquire, m)?)?;
    m.add_function(wrap_pyfunction!(pylease::_acquire_start, m)?)?;
    m.add_function(wrap_pyfunction!(pylease::_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(observe::_status, m)?)?;
    m.add_function(wrap_pyfunction!(observe::_status_start, m)?)?;
    m.add_function(wrap_pyfunction!(fence::_fenced_get, m)?)?;
    m.add_function(wrap_pyfunction!(fence::_fenced_get_start, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_error_for_kind, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_error_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(fence::_parse_token, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(_refresh_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(_log_through_tracing, m)?)?;
    Ok(())
}
