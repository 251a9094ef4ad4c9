//! Python arguments to core values: durations in seconds, lease URLs, options.
//! Values of the wrong type raise `TypeError`; values of the right type that make no sense
//! (negative, NaN, too large, a bad URL) raise `lease.InvalidArgument`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDelta, PyDeltaAccess, PyDict, PyFloat, PyInt, PyList, PyString,
    PyTuple,
};

use crate::error::{invalid, type_error, IntoPyResult};
use lease::{Client, LeaseOptions, LeaseUrl, Scope, StoreUrl};

/// The longest duration accepted anywhere (longer ones are certainly mistakes).
const MAX_SECONDS: f64 = 100.0 * 365.0 * 24.0 * 3600.0;

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A duration given as seconds (`int` or `float`), a `datetime.timedelta`, or a `str` with its
/// unit (`"30s"`, `"500ms"`).
pub fn seconds(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let secs: f64 = if obj.is_instance_of::<PyBool>() {
        return Err(type_error(format!(
            "{name} must be a number of seconds (int or float), not bool"
        )));
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(i) => i as f64,
            Err(_) => return Err(invalid(format!("{name}={obj} seconds is out of range"))),
        }
    } else if obj.is_instance_of::<PyFloat>() {
        obj.extract::<f64>()?
    } else if let Ok(delta) = obj.cast::<PyDelta>() {
        delta.get_days() as f64 * 86400.0
            + delta.get_seconds() as f64
            + delta.get_microseconds() as f64 / 1e6
    } else if let Ok(text) = obj.cast::<PyString>() {
        // A duration with its unit ("30s", "500ms", "5m"), as the CLI takes it; a number in a
        // string ("30") is refused with the fix in the message.
        let text = text.to_cow()?;
        return lease::parse_duration(&text)
            .map_err(|e| invalid(format!("{name}: {}", e.message())));
    } else {
        return Err(type_error(format!(
            "{name} must be a number of seconds (int or float), a timedelta or a str with a \
             unit (\"30s\"), not {}",
            type_name(obj)
        )));
    };
    if secs.is_nan() || secs.is_infinite() {
        return Err(invalid(format!(
            "{name}={secs} is not a finite number of seconds"
        )));
    }
    if secs < 0.0 {
        return Err(invalid(format!("{name}={secs} seconds is negative")));
    }
    if secs > MAX_SECONDS {
        return Err(invalid(format!(
            "{name}={secs} seconds is longer than 100 years"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn opt_seconds(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => seconds(name, o).map(Some),
    }
}

/// An optional text argument (`label`, `data`).
pub fn opt_text(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => match o.cast::<PyString>() {
            Ok(s) => Ok(Some(s.to_cow()?.into_owned())),
            Err(_) => Err(type_error(format!(
                "{name} must be a str or None, not {}",
                type_name(o)
            ))),
        },
    }
}

/// The lease URL as text: a `str`, or an `os.PathLike` naming a file.
pub fn url_text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.cast::<PyString>() {
        return s.to_cow().map(|c| c.into_owned()).map_err(|_| {
            invalid("the lease URL is not valid UTF-8 (it contains a lone surrogate)")
        });
    }
    if obj.hasattr("__fspath__")? {
        let path = obj.call_method0("__fspath__")?;
        if let Ok(s) = path.cast::<PyString>() {
            let s = s
                .to_cow()
                .map_err(|_| invalid("the lease path is not valid UTF-8"))?;
            if !s.starts_with('/') {
                let abs = std::env::current_dir()
                    .map_err(|e| invalid(format!("cannot resolve {s:?}: {e}")))?
                    .join(s.as_ref());
                return Ok(abs.to_string_lossy().into_owned());
            }
            return Ok(s.to_string());
        }
        return Err(type_error("a lease path must be a str path, not bytes"));
    }
    Err(type_error(format!(
        "the lease URL must be a str (s3://…, file:///…, memory://…, a path or a name), not {}",
        type_name(obj)
    )))
}

/// A parsed lease: the shared client of its store, its key, and its URL for messages.
#[derive(Clone)]
pub struct Target {
    pub client: Client,
    pub key: String,
    pub url: String,
}

/// Targets by lease URL text, for this process (clients come from the core's registry, which
/// is fork-aware too). A forked child starts afresh: nothing the parent's runtime threads might
/// have been touching is reused.
struct Cache {
    pid: u32,
    targets: HashMap<String, Target>,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// The cache of this process (a fresh one in a forked child).
fn cache_of(slot: &mut Option<Cache>) -> &mut Cache {
    let me = crate::runtime::pid();
    if slot.as_ref().is_none_or(|c| c.pid != me) {
        // In a forked child the parent's clients may hold connections whose tasks lived on
        // the parent's runtime: leak them instead of dropping them.
        std::mem::forget(slot.take());
        *slot = Some(Cache {
            pid: me,
            targets: HashMap::new(),
        });
    }
    slot.as_mut().expect("set above")
}

/// The shared client of `store` in this process (`text` names it in errors).
/// The shared client of a store given by its URL (`text`, for messages).
pub fn client_of(store: &StoreUrl, text: &str) -> PyResult<Client> {
    Client::for_store(store)
        .map_err(|e| e.with_lease(text))
        .py()
}

pub fn target(obj: &Bound<'_, PyAny>) -> PyResult<Target> {
    let text = url_text(obj)?;
    let mut slot = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let cache = cache_of(&mut slot);
    if let Some(t) = cache.targets.get(&text) {
        return Ok(t.clone());
    }
    if text.contains('\0') {
        return Err(invalid("the lease URL contains a NUL character"));
    }
    let parsed = LeaseUrl::parse(&text).py()?;
    let client = client_of(&parsed.store, &text)?;
    let url = client.lease_url(&parsed.key);
    let t = Target {
        client,
        key: parsed.key,
        url,
    };
    if cache.targets.len() > 10_000 {
        cache.targets.clear();
    }
    cache.targets.insert(text, t.clone());
    Ok(t)
}

/// A key of an object in a store (`data/report.csv`): a `str`. Checked by the core.
pub fn key_text(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_cow().map(|c| c.into_owned()).map_err(|_| {
            invalid(format!(
                "{name} is not valid UTF-8 (it contains a lone surrogate)"
            ))
        }),
        Err(_) => Err(type_error(format!(
            "{name} must be a str (an object key such as \"data/report.csv\"), not {}",
            type_name(obj)
        ))),
    }
}

/// The contents of an object: `bytes`, `bytearray`, or a `str` (written as UTF-8).
pub fn data_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_cow()
            .map(|c| c.into_owned().into_bytes())
            .map_err(|_| {
                invalid("data is not valid UTF-8 (a str with a lone surrogate); pass bytes")
            });
    }
    Err(type_error(format!(
        "data must be bytes, bytearray or str, not {}",
        type_name(obj)
    )))
}

/// Refuse a callback argument that cannot be called (`TypeError`). Callers that accept `None`
/// check for it first.
pub fn check_callable(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    if obj.is_callable() {
        return Ok(());
    }
    Err(type_error(format!(
        "{name} must be callable (it is called with a lease.LeaseLost), not {}",
        type_name(obj)
    )))
}

/// The options of an acquisition as one object, checked here once: what `lease.acquire`,
/// `acquire_async`, `try_acquire` and `Election` build from their keyword arguments and hand to
/// the core (Node's `LeaseOptions` object and C's `lease_options` are its counterparts). Types
/// are checked here (`TypeError`), and values as far as Python's forms go (`InvalidArgument`);
/// the core checks the ranges when it acquires.
#[pyclass(module = "lease._lease", name = "Options", frozen)]
pub struct Options {
    pub core: LeaseOptions,
    /// The callbacks the lease is given when held.
    pub notices: Notices,
}

/// The callbacks an acquisition hands to the lease it gets: `on_lost` (called once with a
/// `lease.LeaseLost` when the lease is lost) and `on_yield` (called once per yield request
/// that names the lease's grant, with a `lease.YieldRequested`).
#[derive(Default)]
pub struct Notices {
    pub on_lost: Option<Py<PyAny>>,
    pub on_yield: Option<Py<PyAny>>,
}

impl Notices {
    pub fn clone_ref(&self, py: Python<'_>) -> Notices {
        Notices {
            on_lost: self.on_lost.as_ref().map(|f| f.clone_ref(py)),
            on_yield: self.on_yield.as_ref().map(|f| f.clone_ref(py)),
        }
    }
}

#[pymethods]
impl Options {
    /// Keyword arguments only, each checked once; an unknown one is a `TypeError` naming it.
    /// They come as one mapping (the names are listed once, in `KEYWORDS`), so no function
    /// takes a dozen positional arguments.
    #[new]
    #[pyo3(
        signature = (**kwargs),
        text_signature = "(*, ttl, wait=None, label=None, data=None, on_lost=None, on_yield=None, \
                          unavailable_timeout=None, shared=None, permits=None, scope=None, \
                          range=None, queue=None, poll=None, wake_hints=None, priority=None, \
                          ask_yield=None, yield_reason=None, preempt=None)"
    )]
    fn new(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let kw = Keywords::of(kwargs)?;
        // `ttl=None` is given, and told what a ttl is; only a missing one is missing.
        let ttl = kw
            .given("ttl")
            .ok_or_else(|| type_error("Options() missing required keyword argument: 'ttl'"))?;
        let (wait, label, data, on_lost) = (
            kw.get("wait"),
            kw.get("label"),
            kw.get("data"),
            kw.get("on_lost"),
        );
        let on_yield = kw.get("on_yield").filter(|f| !f.is_none());
        if let Some(f) = on_yield {
            check_callable("on_yield", f)?;
        }
        let unavailable_timeout = kw.get("unavailable_timeout");
        let (shared, permits, scope, range) = (
            kw.get("shared"),
            kw.get("permits"),
            kw.get("scope"),
            kw.get("range"),
        );
        let (queue, poll) = (kw.get("queue"), kw.get("poll"));
        let (wake_hints, priority) = (kw.get("wake_hints"), kw.get("priority"));
        let (ask_yield, yield_reason, preempt) = (
            kw.get("ask_yield"),
            kw.get("yield_reason"),
            kw.get("preempt"),
        );
        let mut core = LeaseOptions::new(ttl_seconds(ttl)?);
        core.wait = opt_seconds("wait", wait)?;
        core.label = opt_text("label", label)?;
        core.data = opt_text("data", data)?;
        core.unavailable_timeout = opt_seconds("unavailable_timeout", unavailable_timeout)?;
        let on_lost = on_lost.filter(|f| !f.is_none());
        if let Some(f) = on_lost {
            check_callable("on_lost", f)?;
        }
        let none = |o: Option<&Bound<'_, PyAny>>| o.is_none_or(|o| o.is_none());
        if flag("shared", shared)? {
            core = core.shared();
        }
        if !none(permits) {
            let n = whole_number("permits", permits.expect("not none"))?;
            let n =
                u32::try_from(n).map_err(|_| invalid(format!("permits={n} is out of range")))?;
            core = core.permits(n);
        }
        let scope = match scope.filter(|s| !s.is_none()) {
            None => None,
            Some(s) => match s.cast::<PyString>() {
                Ok(text) => {
                    let text = text.to_cow().map_err(|_| {
                        invalid("scope is not valid UTF-8 (it contains a lone surrogate)")
                    })?;
                    Some(Scope::path(&text).py()?)
                }
                Err(_) => {
                    return Err(type_error(format!(
                        "scope must be a str (a path such as \"tables/users\") or None, not {}",
                        type_name(s)
                    )))
                }
            },
        };
        let range = match range.filter(|r| !r.is_none()) {
            None => None,
            Some(r) => Some(byte_range(r)?),
        };
        match (scope, range) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give a scope (a path) or a range (bytes), not both: one request covers one \
                     scope",
                ))
            }
            (Some(s), None) | (None, Some(s)) => core = core.scope(s),
            (None, None) => {}
        }
        if flag("queue", queue)? {
            core = core.queue();
        }
        if let Some(p) = priority.filter(|p| !p.is_none()) {
            core = core.priority(priority_number(p)?);
        }
        // The core checks its range (1 ms ..= 1 h) with the other timings.
        if let Some(poll) = opt_seconds("poll", poll)? {
            core = core.poll_interval(poll);
        }
        if let Some(hints) = wake_hints {
            core = core.wake_hints(wake_hints_of(hints)?);
        }
        // The core checks the reason's length, and a reason without `ask_yield`.
        core.ask_yield = flag("ask_yield", ask_yield)?;
        core.yield_reason = opt_text("yield_reason", yield_reason)?;
        if let Some(p) = preempt {
            core = core.preempt(preempt_of(p)?);
        }
        core.check_queue().py()?;
        Ok(Options {
            core,
            notices: Notices {
                on_lost: on_lost.map(|f| f.clone().unbind()),
                on_yield: on_yield.map(|f| f.clone().unbind()),
            },
        })
    }
}

/// The keyword arguments `Options` takes.
const KEYWORDS: [&str; 18] = [
    "ttl",
    "wait",
    "label",
    "data",
    "on_lost",
    "on_yield",
    "unavailable_timeout",
    "shared",
    "permits",
    "scope",
    "range",
    "queue",
    "poll",
    "wake_hints",
    "priority",
    "ask_yield",
    "yield_reason",
    "preempt",
];

/// `Options`' keyword arguments by their place in `KEYWORDS`, as given (`None` included).
struct Keywords<'py>([Option<Bound<'py, PyAny>>; KEYWORDS.len()]);

impl<'py> Keywords<'py> {
    fn of(kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Self> {
        let mut values: [Option<Bound<'py, PyAny>>; KEYWORDS.len()] = Default::default();
        for (key, value) in kwargs.into_iter().flatten() {
            let name = key.extract::<String>()?;
            let Some(i) = KEYWORDS.iter().position(|k| *k == name) else {
                return Err(type_error(format!(
                    "Options() got an unexpected keyword argument '{name}'"
                )));
            };
            values[i] = Some(value);
        }
        Ok(Keywords(values))
    }

    /// The argument `name` as given, `None` included.
    fn given(&self, name: &str) -> Option<&Bound<'py, PyAny>> {
        let i = KEYWORDS
            .iter()
            .position(|k| *k == name)
            .expect("a known keyword");
        self.0[i].as_ref()
    }

    /// The argument `name`; `None` when absent or given as `None`.
    fn get(&self, name: &str) -> Option<&Bound<'py, PyAny>> {
        self.given(name).filter(|v| !v.is_none())
    }
}

/// The longest ttl taken as a bare number of seconds. A larger number was most likely meant
/// as milliseconds (`ttl=30000`, the unit of Node and of many libraries, would be 8h20m here:
/// others would wait that long after a crash); a long ttl is still one string away (`"2h"`).
/// The counterpart of Node's refusal of a ttl under 100 ms given as a number.
pub const MAX_TTL_NUMBER: Duration = Duration::from_secs(3600);

/// The ttl: a duration as [`seconds`] takes it, but a bare number above [`MAX_TTL_NUMBER`] is
/// refused as a likely unit mix-up, with the two ways to say what was meant.
pub fn ttl_seconds(obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let ttl = seconds("ttl", obj)?;
    let bare_number = !obj.is_instance_of::<PyBool>()
        && (obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>());
    if bare_number && ttl > MAX_TTL_NUMBER {
        let (secs, long) = (ttl.as_secs_f64(), lease::format_duration(ttl));
        return Err(invalid(format!(
            "ttl={obj} is {long}: numbers are seconds in Python, and a bare number above {} is \
             refused as a likely milliseconds mix-up (ttl={} for {obj} ms); if a ttl this long \
             is meant, pass it with its unit: ttl=\"{long}\" (or a timedelta)",
            MAX_TTL_NUMBER.as_secs(),
            secs / 1000.0,
        )));
    }
    Ok(ttl)
}

/// `wake_hints=`: `"off"`, `"loopback"`, `"route"` or an interface's IP address, as a `str` or an
/// `ipaddress.IPv4Address` / `IPv6Address`; the core parses it (`InvalidArgument` otherwise).
fn wake_hints_of(obj: &Bound<'_, PyAny>) -> PyResult<lease::WakeHints> {
    let is_ip_address = obj
        .get_type()
        .module()
        .is_ok_and(|m| m.to_cow().is_ok_and(|m| m == "ipaddress"));
    let text = if is_ip_address {
        obj.str()?.to_cow()?.into_owned()
    } else if let Ok(s) = obj.cast::<PyString>() {
        s.to_cow()
            .map_err(|_| invalid("wake_hints is not valid UTF-8 (it contains a lone surrogate)"))?
            .into_owned()
    } else {
        return Err(type_error(format!(
            "wake_hints must be a str (\"off\", \"loopback\", \"route\" or an interface's IP \
             address such as \"10.0.0.5\"), not {}",
            type_name(obj)
        )));
    };
    text.parse().py()
}

/// `preempt=`: the str `"every-effect-fenced"` (or `"never"`, the default); the core parses it
/// and its error says what preemption risks (`InvalidArgument`). No bool: what turns it on names
/// the condition the caller asserts, so `preempt=True` is a `TypeError` that says so.
fn preempt_of(obj: &Bound<'_, PyAny>) -> PyResult<lease::Preempt> {
    let Ok(s) = obj.cast::<PyString>() else {
        return Err(type_error(format!(
            "preempt must be the str \"every-effect-fenced\" (or \"never\", the default), not {}: \
             the one value that preempts names what it asserts, that every effect of every holder \
             of this lease goes through fenced writes or a fencing gate. The preempted holder \
             goes on believing it holds until its next renewal, so any unfenced effect may \
             overlap the new holder's",
            type_name(obj)
        )));
    };
    let text = s
        .to_cow()
        .map_err(|_| invalid("preempt is not valid UTF-8 (it contains a lone surrogate)"))?;
    text.parse().py()
}

/// A bool argument; `None` (or absent) is false.
fn flag(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(false);
    };
    if obj.is_instance_of::<PyBool>() {
        return obj.extract::<bool>();
    }
    Err(type_error(format!(
        "{name} must be a bool, not {}",
        type_name(obj)
    )))
}

/// A non-negative int (not a bool); out of range for `u64` is `InvalidArgument`.
fn whole_number(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(type_error(format!(
            "{name} must be an int, not {}",
            type_name(obj)
        )));
    }
    match obj.extract::<i128>() {
        Ok(i) if i < 0 => Err(invalid(format!("{name}={i} is negative"))),
        Ok(i) => u64::try_from(i).map_err(|_| invalid(format!("{name}={i} is out of range"))),
        Err(_) => Err(invalid(format!("{name}={obj} is out of range"))),
    }
}

/// `priority=N`: an int (negative too) within the core's range, which names it.
fn priority_number(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(type_error(format!(
            "priority must be an int, not {}",
            type_name(obj)
        )));
    }
    // Out of i32: the core's message names the range.
    let n = obj.extract::<i128>().unwrap_or(i128::MAX);
    Ok(i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX }))
}

/// `range=(start, end)`: a tuple or list of two ints, bytes `[start, end)`.
fn byte_range(obj: &Bound<'_, PyAny>) -> PyResult<Scope> {
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else {
        return Err(type_error(format!(
            "range must be a (start, end) tuple of ints (bytes, the end excluded), not {}",
            type_name(obj)
        )));
    };
    if items.len() != 2 {
        return Err(type_error(format!(
            "range must be a (start, end) pair of ints, not a sequence of {}",
            items.len()
        )));
    }
    let start = whole_number("range start", &items[0])?;
    let end = whole_number("range end", &items[1])?;
    Scope::range(start, end).py()
}

/// Check a duration argument the way every call does (used by the Python layer for `poll`).
#[pyfunction]
pub fn _seconds(name: &str, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    seconds(name, value).map(|d| d.as_secs_f64())
}
