//! The core's `tracing` events, delivered to Python's `logging` (logger `lease`).
//!
//! Events are filtered by the effective level of the `lease` logger, cached here and refreshed
//! (at most once a second) by the calls that start work, then formatted on the thread that
//! emitted them and handed to the notifier thread, which logs them with the GIL. A runtime
//! thread never waits for the GIL (see `runtime::notify`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// Python's numeric levels: DEBUG 10, INFO 20, WARNING 30, ERROR 40. Events below `MIN_LEVEL`
/// are dropped before any formatting.
static MIN_LEVEL: AtomicU8 = AtomicU8::new(30);
/// When the level was last read from Python, in ms since `start()`.
static REFRESHED_MS: AtomicU64 = AtomicU64::new(0);
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn py_level(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    }
}

fn logger(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    LOGGER
        .get_or_try_init(py, || {
            py.import("logging")?
                .call_method1("getLogger", ("lease",))
                .map(Bound::unbind)
        })
        .map(|l| l.bind(py))
}

/// Re-read the `lease` logger's effective level (cheap; at most once a second unless forced).
#[allow(clippy::disallowed_methods)] // the log filter's own refresh clock, not protocol time
pub fn refresh_level(py: Python<'_>, force: bool) {
    let start = START.get_or_init(Instant::now);
    let now_ms = start.elapsed().as_millis() as u64 + 1;
    let last = REFRESHED_MS.load(Ordering::Relaxed);
    if !force && last != 0 && now_ms.saturating_sub(last) < 1000 {
        return;
    }
    REFRESHED_MS.store(now_ms, Ordering::Relaxed);
    if let Ok(level) = logger(py).and_then(|l| l.call_method0("getEffectiveLevel")) {
        if let Ok(level) = level.extract::<i64>() {
            MIN_LEVEL.store(level.clamp(0, 255) as u8, Ordering::Relaxed);
        }
    }
}

/// Python's `logging.log(level, msg)` on the `lease` logger, now (GIL held).
pub fn log_now(py: Python<'_>, level: u8, message: &str) {
    if let Ok(l) = logger(py) {
        let _ = l.call_method1("log", (level, message));
    }
}

struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }
}

struct PythonLogging;

impl<S: Subscriber> Layer<S> for PythonLogging {
    /// Decided per event: the Python level can change at any time.
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        metadata.target().starts_with("lease")
            && py_level(metadata.level()) >= MIN_LEVEL.load(Ordering::Relaxed)
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields {
            message: String::new(),
            rest: String::new(),
        };
        event.record(&mut f);
        let level = py_level(event.metadata().level());
        let text = if f.rest.is_empty() {
            f.message
        } else {
            format!("{} [{}]", f.message, f.rest.trim_start())
        };
        crate::runtime::notify(Box::new(move |py| log_now(py, level, &text)));
    }
}

/// Install the forwarding subscriber (once per process; keeps an existing global one).
pub fn install(py: Python<'_>) {
    refresh_level(py, true);
    let _ =
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(PythonLogging));
}
