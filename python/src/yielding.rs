//! `lease.ask_yield`: ask the holders of a queued lock to step aside (docs/protocol.md §10,
//! "Yield on request"). What a holder is told comes to it through `on_yield` (see `held`).

use pyo3::prelude::*;

use crate::error::IntoPyResult;
use crate::options::{self, opt_text};
use crate::runtime::{self, block, Pending};
use lease::{YieldAsk, YieldRequest};

/// The ask from Python's arguments: `by` defaults to `user@host` of this process.
fn ask_of(
    to: Option<&Bound<'_, PyAny>>,
    reason: Option<&Bound<'_, PyAny>>,
    by: Option<&Bound<'_, PyAny>>,
) -> PyResult<YieldAsk> {
    let ask = YieldAsk {
        by: opt_text("by", by)?.unwrap_or_else(lease::asker_name),
        to: opt_text("to", to)?,
        reason: opt_text("reason", reason)?,
    };
    ask.check().py()?;
    Ok(ask)
}

/// `lease.YieldRequest(tokens, by, to, reason)`, or None.
fn request_obj(py: Python<'_>, r: Option<YieldRequest>) -> PyResult<Py<PyAny>> {
    let Some(r) = r else {
        return Ok(py.None());
    };
    let cls = py.import("lease._types")?.getattr("YieldRequest")?;
    Ok(cls.call1((r.tokens, r.by, r.to, r.reason))?.unbind())
}

/// ask_yield(url, to, reason, by) -> YieldRequest | None.
#[pyfunction]
#[pyo3(signature = (url, to = None, reason = None, by = None))]
pub fn _ask_yield(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    to: Option<&Bound<'_, PyAny>>,
    reason: Option<&Bound<'_, PyAny>>,
    by: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let ask = ask_of(to, reason, by)?;
    let r = block(
        py,
        async move { t.client.ask_yield(&t.key, ask).await },
        None,
    )?
    .py()?;
    request_obj(py, r)
}

#[pyfunction]
#[pyo3(signature = (url, done, to = None, reason = None, by = None))]
pub fn _ask_yield_start(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    done: Py<PyAny>,
    to: Option<&Bound<'_, PyAny>>,
    reason: Option<&Bound<'_, PyAny>>,
    by: Option<&Bound<'_, PyAny>>,
) -> PyResult<Pending> {
    crate::log::refresh_level(py, false);
    let t = options::target(url)?;
    let ask = ask_of(to, reason, by)?;
    let abort = runtime::spawn_settle(
        py,
        async move { t.client.ask_yield(&t.key, ask).await },
        done,
        request_obj,
    )?;
    Ok(Pending::abort(abort))
}
