//! Metrics: counters, gauges and histograms defined once here, for every language.
//!
//! Every number is kept in this process (one registry, shared by every client), read with
//! [`snapshot`] (what the bindings hand to their own ecosystem's collectors: Python's
//! `prometheus_client`, Node's `prom-client`, Go's `client_golang`) or encoded in the Prometheus
//! text format with [`encode_text`] (what `lease run --metrics ADDR` serves). Names follow the
//! Prometheus conventions: base units (`_seconds`, `_bytes`, `_dollars`), `_total` for counters.
//!
//! **Bounded labels.** The lease's name (its key, never the URL: a URL may carry a SAS token) is
//! a label of the lease metrics. The first [`DEFAULT_LEASE_LABELS`] distinct names (or as many as
//! [`set_lease_label_limit`], or `LEASE_METRICS_LEASES` in the environment, say) get their own
//! label value; every later name is counted under `lease="_other"`. A process that takes 10,000
//! locks thus exports at most 101 values per metric; `0` puts every lease under `_other`.
//! Store metrics are labelled by the store's kind (`s3`, `gs`, `az`, `file`, `memory`), the
//! request's kind and its status, all from fixed lists.

mod instrumented;
pub mod prices;
mod requests;
mod text;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub(crate) use instrumented::Instrumented;
pub(crate) use requests::{Op, Status, StoreKind};
pub use text::{encode_text, CONTENT_TYPE};

use crate::protocol::hold::{Health, LostReason};

/// How many distinct lease names get a label of their own by default.
pub const DEFAULT_LEASE_LABELS: usize = 100;

/// The label value every lease name past the limit is counted under.
pub const OTHER_LEASE: &str = "_other";

/// Buckets of the lease-level durations (wait, hold, hand-over, renewal slack), in seconds: from
/// 5 ms (an in-process hand-over) to a day (a long hold).
pub const LEASE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0, 14400.0, 86400.0,
];

/// Buckets of store request latencies, in seconds.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family of a [`Snapshot`]: its name (counters end in `_total`), help, kind and
/// samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

/// One labelled value of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

/// A counter's or gauge's value, or a histogram's buckets (upper bound, cumulative count; the
/// `+Inf` bucket is `count`), sum and count.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Number(f64),
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// Every metric of this process at one instant.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    pub families: Vec<Family>,
}

impl Snapshot {
    /// The family named `name`.
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The value of the counter or gauge `name` with exactly these labels (0 if never counted).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sample(name, labels).map_or(0.0, |s| match &s.value {
            Value::Number(v) => *v,
            Value::Histogram { count, .. } => *count as f64,
        })
    }

    /// The sample of `name` with exactly these labels.
    pub fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        self.family(name)?.samples.iter().find(|s| {
            s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
    }

    /// The snapshot as JSON (what Python's and Node's `metrics()` return): a list of
    /// `{name, help, type, samples: [{labels: {…}, value} | {labels, buckets: [[le, count]…],
    /// sum, count}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let families = self.families.iter().map(|f| {
            let samples = f.samples.iter().map(|s| {
                let labels: serde_json::Map<String, serde_json::Value> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), serde_json::Value::from(v.as_str())))
                    .collect();
                match &s.value {
                    Value::Number(v) => serde_json::json!({"labels": labels, "value": v}),
                    Value::Histogram {
                        buckets,
                        sum,
                        count,
                    } => serde_json::json!({
                        "labels": labels, "buckets": buckets, "sum": sum, "count": count,
                    }),
                }
            });
            serde_json::json!({
                "name": f.name, "help": f.help, "type": f.kind.as_str(),
                "samples": samples.collect::<Vec<_>>(),
            })
        });
        serde_json::Value::Array(families.collect())
    }
}

/// A histogram: counts per bucket (not cumulative), sum and count.
#[derive(Debug, Clone)]
struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Hist {
    fn new(bounds: &'static [f64]) -> Hist {
        Hist {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    fn value(&self) -> Value {
        let mut total = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| {
                total += c;
                (*b, total)
            })
            .collect();
        Value::Histogram {
            buckets,
            sum: self.sum,
            count: self.count,
        }
    }
}

/// Label values of the lease metrics: the lease's name, and one more (outcome, reason, state).
type LeaseKey = (Arc<str>, &'static str);

/// The registry's maps: hashed with foldhash, not the standard SipHash. A renewal records into
/// about eight of them; with SipHash that was most of the metrics' cost on a fast store
/// (issue 25). Their keys are fixed strings and at most [`DEFAULT_LEASE_LABELS`] (or the set
/// limit) lease names from this process's own code: nothing to flood.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Default)]
struct Registry {
    lease_names: Map<String, Arc<str>>,
    acquisitions: Map<LeaseKey, u64>,
    /// Each lease name's renewal counts and slack, shared with the leases that record them
    /// ([`RenewalMetrics`]).
    renewals: Map<Arc<str>, Arc<Mutex<Renewals>>>,
    losses: Map<LeaseKey, u64>,
    wait: Map<Arc<str>, Hist>,
    hold: Map<Arc<str>, Hist>,
    handover: Map<Arc<str>, Hist>,
}

/// One lease name's renewal metrics: `lease_renewals_total{outcome}` and
/// `lease_renewal_slack_seconds`. A sample appears once counted (a count above zero), as the
/// registry's map entries did.
struct Renewals {
    landed: u64,
    failed: u64,
    slack: Hist,
}

impl Default for Renewals {
    fn default() -> Self {
        Renewals {
            landed: 0,
            failed: 0,
            slack: Hist::new(LEASE_BUCKETS),
        }
    }
}

/// Bumped by [`reset`]: cells resolved before it are the old registry's.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A lease's handle to its name's renewal cells, resolved at its first renewal: a renewal then
/// records under one uncontended lock of its own instead of the registry's lock, a lookup of
/// the name's label and two more hashed lookups (issue 25: most of what metrics cost a renewal
/// on a fast store). The label is the one the name had when resolved (names keep their label
/// once admitted; one that came past the cap stays `_other` for that lease's life).
#[derive(Default)]
pub(crate) struct RenewalMetrics {
    resolved: OnceLock<(u64, Box<str>, Arc<Mutex<Renewals>>)>,
}

impl RenewalMetrics {
    /// A renewal of `key` landed with `slack` left before the deadline it extended.
    pub(crate) fn landed(&self, key: &str, slack: Duration) {
        self.record(key, |c| {
            c.landed += 1;
            c.slack.observe(slack.as_secs_f64());
        });
    }

    /// An attempt to renew `key` failed.
    pub(crate) fn failed(&self, key: &str) {
        self.record(key, |c| c.failed += 1);
    }

    fn record(&self, key: &str, f: impl FnOnce(&mut Renewals)) {
        if !enabled() {
            return;
        }
        let resolved = self.resolved.get_or_init(|| {
            let (generation, cells) = renewal_cells(key);
            (generation, key.into(), cells)
        });
        // Another key (a grant's, set after the first renewal) or a reset registry (tests):
        // look the cells up again, as every recording did before handles.
        let fresh;
        let cells = if resolved.0 == GENERATION.load(Ordering::Relaxed) && *resolved.1 == *key {
            &resolved.2
        } else {
            fresh = renewal_cells(key).1;
            &fresh
        };
        f(&mut cells.lock().unwrap());
    }
}

/// The renewal cells of `key`'s label, and the registry's generation they belong to.
fn renewal_cells(key: &str) -> (u64, Arc<Mutex<Renewals>>) {
    let mut r = registry().lock().unwrap();
    let name = r.lease(key);
    let cells = r.renewals.entry(name).or_default().clone();
    (GENERATION.load(Ordering::Relaxed), cells)
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

static DISABLED: AtomicBool = AtomicBool::new(false);

fn label_limit() -> &'static AtomicUsize {
    static LIMIT: OnceLock<AtomicUsize> = OnceLock::new();
    LIMIT.get_or_init(|| {
        let from_env = std::env::var("LEASE_METRICS_LEASES")
            .ok()
            .and_then(|v| v.trim().parse().ok());
        AtomicUsize::new(from_env.unwrap_or(DEFAULT_LEASE_LABELS))
    })
}

/// Turn metrics off (or on again) for this process: every recording then costs one atomic
/// load. On by default; for the benchmarks' "off" runs, or a process that wants none.
pub fn set_enabled(on: bool) {
    DISABLED.store(!on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    !DISABLED.load(Ordering::Relaxed)
}

/// How many distinct lease names get a label of their own (default
/// [`DEFAULT_LEASE_LABELS`], or `LEASE_METRICS_LEASES`); later names count as `_other`. Names
/// already admitted keep their label.
pub fn set_lease_label_limit(n: usize) {
    label_limit().store(n, Ordering::Relaxed);
}

/// Forget every number (tests).
pub fn reset() {
    let mut r = registry().lock().unwrap();
    *r = Registry::default();
    requests::clear();
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn record(f: impl FnOnce(&mut Registry)) {
    if enabled() {
        f(&mut registry().lock().unwrap());
    }
}

impl Registry {
    fn lease(&mut self, key: &str) -> Arc<str> {
        if let Some(name) = self.lease_names.get(key) {
            return name.clone();
        }
        if self.lease_names.len() >= label_limit().load(Ordering::Relaxed) {
            return Arc::from(OTHER_LEASE);
        }
        let name: Arc<str> = Arc::from(key);
        self.lease_names.insert(key.to_string(), name.clone());
        name
    }
}

fn observe(map: &mut Map<Arc<str>, Hist>, name: Arc<str>, bounds: &'static [f64], v: Duration) {
    map.entry(name)
        .or_insert_with(|| Hist::new(bounds))
        .observe(v.as_secs_f64());
}

/// How an acquisition ended, for `lease_acquisitions_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    /// Held by someone else (a try, or `wait(0)`).
    Held,
    Timeout,
    Unavailable,
    Cancelled,
    Failed,
}

impl Outcome {
    pub(crate) fn of(result: &crate::Result<impl Sized>) -> Outcome {
        use crate::ErrorKind as K;
        match result {
            Ok(_) => Outcome::Acquired,
            Err(e) => match e.kind() {
                K::Held => Outcome::Held,
                K::Timeout => Outcome::Timeout,
                K::Unavailable => Outcome::Unavailable,
                K::Cancelled => Outcome::Cancelled,
                _ => Outcome::Failed,
            },
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Held => "held",
            Outcome::Timeout => "timeout",
            Outcome::Unavailable => "unavailable",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "failed",
        }
    }
}

/// An acquisition of `key` ended after `waited`; a successful one that replaced another
/// holder's tenure also says how long the lease had been free (`handover`).
pub(crate) fn acquisition(
    key: &str,
    outcome: Outcome,
    waited: Duration,
    handover: Option<Duration>,
) {
    record(|r| {
        let name = r.lease(key);
        *r.acquisitions
            .entry((name.clone(), outcome.as_str()))
            .or_default() += 1;
        if outcome == Outcome::Acquired {
            observe(&mut r.wait, name.clone(), LEASE_BUCKETS, waited);
            if let Some(h) = handover {
                observe(&mut r.handover, name, LEASE_BUCKETS, h);
            }
        }
    });
}

/// A renewal of `key` landed with `slack` left before the deadline it extended (a lease
/// records through its [`RenewalMetrics`]; this looks the cells up each time).
#[cfg(test)]
pub(crate) fn renewal_landed(key: &str, slack: Duration) {
    RenewalMetrics::default().landed(key, slack);
}

/// An attempt to renew `key` failed (it is retried until the deadline).
#[cfg(test)]
pub(crate) fn renewal_failed(key: &str) {
    RenewalMetrics::default().failed(key);
}

/// A tenure of `key` ended (released, or lost for `reason`) after `held`.
pub(crate) fn tenure_ended(key: &str, held: Duration, lost: Option<&LostReason>) {
    record(|r| {
        let name = r.lease(key);
        observe(&mut r.hold, name.clone(), LEASE_BUCKETS, held);
        if let Some(reason) = lost {
            *r.losses.entry((name, reason.kind())).or_default() += 1;
        }
    });
}

/// The health of each lease this process holds, read when a snapshot is taken.
type HealthSource = Box<dyn Fn() -> Option<(String, Health)> + Send + Sync>;

fn live_leases() -> &'static Mutex<Vec<HealthSource>> {
    static LIVE: OnceLock<Mutex<Vec<HealthSource>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// Report a held lease's health in every snapshot until `source` returns `None` (the lease
/// was released, lost or dropped).
pub(crate) fn watch_health(source: HealthSource) {
    if !enabled() {
        return;
    }
    let mut live = live_leases().lock().unwrap();
    // A process nobody scrapes must not keep one entry per lease it ever held: past a bound,
    // forget the ended ones (amortized: the bound doubles with what is still held).
    static BOUND: AtomicUsize = AtomicUsize::new(1024);
    if live.len() >= BOUND.load(Ordering::Relaxed) {
        live.retain(|s| s().is_some());
        BOUND.store((live.len() * 2).max(1024), Ordering::Relaxed);
    }
    live.push(source);
}

/// A store request answered with `status` (or not: [`Status::Error`]) after `took`, with
/// `sent` and `received` body bytes: counted in fixed cells, without the registry's lock
/// (`requests.rs`).
pub(crate) fn request(
    store: StoreKind,
    op: Op,
    status: Status,
    took: Duration,
    sent: u64,
    received: u64,
) {
    if enabled() {
        requests::record(store, op, status, took, sent, received);
    }
}

/// Every metric now.
pub fn snapshot() -> Snapshot {
    // Health first, outside the registry's lock: a source locks its lease's state.
    let mut health: HashMap<(String, &'static str), u64> = HashMap::new();
    if enabled() {
        live_leases()
            .lock()
            .unwrap()
            .retain(|source| match source() {
                Some((key, h)) => {
                    *health.entry((key, h.as_str())).or_default() += 1;
                    true
                }
                None => false,
            });
    }
    let mut r = registry().lock().unwrap();
    let mut health_samples = Vec::new();
    for ((key, state), n) in health {
        let name = r.lease(&key);
        health_samples.push(number(
            vec![("lease", name.to_string()), ("state", state.to_string())],
            n as f64,
        ));
    }
    let lease2 = |m: &Map<LeaseKey, u64>, second: &'static str| {
        m.iter()
            .map(|((name, v), n)| {
                number(
                    vec![("lease", name.to_string()), (second, v.to_string())],
                    *n as f64,
                )
            })
            .collect::<Vec<_>>()
    };
    let hists = |m: &Map<Arc<str>, Hist>| {
        m.iter()
            .map(|(name, h)| Sample {
                labels: vec![("lease", name.to_string())],
                value: h.value(),
            })
            .collect::<Vec<_>>()
    };
    let (mut renewals, mut slack) = (Vec::new(), Vec::new());
    for (name, cells) in &r.renewals {
        let c = cells.lock().unwrap();
        for (outcome, n) in [("landed", c.landed), ("failed", c.failed)] {
            if n > 0 {
                renewals.push(number(
                    vec![
                        ("lease", name.to_string()),
                        ("outcome", outcome.to_string()),
                    ],
                    n as f64,
                ));
            }
        }
        if c.slack.count > 0 {
            slack.push(Sample {
                labels: vec![("lease", name.to_string())],
                value: c.slack.value(),
            });
        }
    }
    let mut families = vec![
        family(
            "lease_acquisitions_total",
            "Acquisitions ended, by outcome (acquired, held, timeout, unavailable, cancelled, failed).",
            Kind::Counter,
            lease2(&r.acquisitions, "outcome"),
        ),
        family(
            "lease_acquire_wait_seconds",
            "Time from the start of an acquisition to holding the lease.",
            Kind::Histogram,
            hists(&r.wait),
        ),
        family(
            "lease_handover_seconds",
            "How long the lease was free before this holder took it: since the release, or since the deadline of the holder it took over (by the store's clock).",
            Kind::Histogram,
            hists(&r.handover),
        ),
        family(
            "lease_hold_seconds",
            "Length of each tenure of this process, from acquisition to release or loss.",
            Kind::Histogram,
            hists(&r.hold),
        ),
        family(
            "lease_renewals_total",
            "Renewal attempts, by outcome (landed, failed: retried until the deadline).",
            Kind::Counter,
            renewals,
        ),
        family(
            "lease_renewal_slack_seconds",
            "Time left before the deadline when a renewal landed.",
            Kind::Histogram,
            slack,
        ),
        family(
            "lease_losses_total",
            "Leases lost, by reason (expired, taken_over, broken, vanished, overwritten).",
            Kind::Counter,
            lease2(&r.losses, "reason"),
        ),
        family(
            "lease_health",
            "Leases held by this process, by health (healthy, late, unknown).",
            Kind::Gauge,
            health_samples,
        ),
    ];
    drop(r);
    families.extend(requests::families());
    let mut snapshot = Snapshot { families };
    for f in &mut snapshot.families {
        f.samples.sort_by(|a, b| a.labels.cmp(&b.labels));
    }
    snapshot
}

fn number(labels: Vec<(&'static str, String)>, v: f64) -> Sample {
    Sample {
        labels,
        value: Value::Number(v),
    }
}

fn family(name: &'static str, help: &'static str, kind: Kind, samples: Vec<Sample>) -> Family {
    Family {
        name,
        help,
        kind,
        samples,
    }
}

#[cfg(test)]
mod tests;
