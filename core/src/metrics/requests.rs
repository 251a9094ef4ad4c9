//! The store metrics' cells: one atomic counter per store kind, request kind and status, fixed
//! at compile time.
//!
//! Every store request is counted (a renewal makes one or two), so this is the metrics' hot
//! path. Kept in the registry's hashed maps, it took the registry's lock and made five hashed
//! updates per request; its labels all come from fixed lists, so each value has a fixed place
//! here and a request costs a few relaxed atomic adds, no lock and no hashing (issue 25:
//! docs/benchmarks.md, "Store metrics in fixed cells"). The estimated cost is not kept: it is a
//! function of the counts (each answered request at its list price), computed at a snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::{family, number, prices, Family, Kind, Sample, Value, REQUEST_BUCKETS};

/// A store's kind (the `store` label), from its URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    S3,
    Gs,
    Az,
    File,
    Memory,
    Other,
}

impl StoreKind {
    const ALL: [StoreKind; 6] = [
        StoreKind::S3,
        StoreKind::Gs,
        StoreKind::Az,
        StoreKind::File,
        StoreKind::Memory,
        StoreKind::Other,
    ];

    pub(crate) fn of_url(url: &str) -> StoreKind {
        match url.split_once("://").map_or("", |(s, _)| s) {
            "s3" => StoreKind::S3,
            "gs" => StoreKind::Gs,
            "az" | "azure" => StoreKind::Az,
            "file" => StoreKind::File,
            "memory" => StoreKind::Memory,
            _ => StoreKind::Other,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoreKind::S3 => "s3",
            StoreKind::Gs => "gs",
            StoreKind::Az => "az",
            StoreKind::File => "file",
            StoreKind::Memory => "memory",
            StoreKind::Other => "other",
        }
    }
}

/// A request's kind (the `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Get,
    Create,
    Update,
    Delete,
}

impl Op {
    const ALL: [Op; 4] = [Op::Get, Op::Create, Op::Update, Op::Delete];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// What the store answered (the `status` label); `Error`: no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    NotModified,
    NotFound,
    PreconditionFailed,
    TooMany,
    ServerError,
    ClientError,
    Error,
}

impl Status {
    const ALL: [Status; 8] = [
        Status::Ok,
        Status::NotModified,
        Status::NotFound,
        Status::PreconditionFailed,
        Status::TooMany,
        Status::ServerError,
        Status::ClientError,
        Status::Error,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "200",
            Status::NotModified => "304",
            Status::NotFound => "404",
            Status::PreconditionFailed => "412",
            Status::TooMany => "429",
            Status::ServerError => "5xx",
            Status::ClientError => "4xx",
            Status::Error => "error",
        }
    }
}

const STORES: usize = StoreKind::ALL.len();
const OPS: usize = Op::ALL.len();
const STATUSES: usize = Status::ALL.len();
/// One bucket per bound, and one for latencies above the last.
const BUCKETS: usize = REQUEST_BUCKETS.len() + 1;

/// A latency histogram in atomics. Its count is the sum of its buckets (not a counter of its
/// own), so a snapshot taken during an observation never shows a bucket above the count.
struct Latency {
    buckets: [AtomicU64; BUCKETS],
    sum_nanos: AtomicU64,
}

impl Latency {
    const fn new() -> Latency {
        Latency {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let i = REQUEST_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(REQUEST_BUCKETS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    /// The histogram's value, if anything was observed.
    fn value(&self) -> Option<Value> {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return None;
        }
        let mut total = 0;
        let buckets = REQUEST_BUCKETS
            .iter()
            .zip(&counts)
            .map(|(b, c)| {
                total += c;
                (*b, total)
            })
            .collect();
        Some(Value::Histogram {
            buckets,
            sum: self.sum_nanos.load(Relaxed) as f64 / 1e9,
            count,
        })
    }

    fn clear(&self) {
        self.buckets.iter().for_each(|b| b.store(0, Relaxed));
        self.sum_nanos.store(0, Relaxed);
    }
}

/// The cells of one store kind.
struct PerStore {
    requests: [[AtomicU64; STATUSES]; OPS],
    latency: [Latency; OPS],
    sent: AtomicU64,
    received: AtomicU64,
}

impl PerStore {
    const fn new() -> PerStore {
        PerStore {
            requests: [const { [const { AtomicU64::new(0) }; STATUSES] }; OPS],
            latency: [const { Latency::new() }; OPS],
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
        }
    }

    fn count(&self, op: Op, status: Status) -> u64 {
        self.requests[op as usize][status as usize].load(Relaxed)
    }

    /// Requests of `op` the store answered (every status but [`Status::Error`]).
    fn answered(&self, op: Op) -> u64 {
        Status::ALL
            .iter()
            .filter(|st| **st != Status::Error)
            .map(|st| self.count(op, *st))
            .sum()
    }

    fn made_requests(&self) -> bool {
        Op::ALL
            .iter()
            .any(|op| self.answered(*op) + self.count(*op, Status::Error) > 0)
    }
}

static CELLS: [PerStore; STORES] = [const { PerStore::new() }; STORES];

/// A store request answered with `status` (or not: [`Status::Error`]) after `took`, with
/// `sent` and `received` body bytes.
pub(crate) fn record(
    store: StoreKind,
    op: Op,
    status: Status,
    took: Duration,
    sent: u64,
    received: u64,
) {
    let cells = &CELLS[store as usize];
    cells.requests[op as usize][status as usize].fetch_add(1, Relaxed);
    cells.latency[op as usize].observe(took);
    cells.sent.fetch_add(sent, Relaxed);
    cells.received.fetch_add(received, Relaxed);
}

/// Forget every count (tests).
pub(super) fn clear() {
    for cells in &CELLS {
        cells
            .requests
            .iter()
            .flatten()
            .for_each(|c| c.store(0, Relaxed));
        cells.latency.iter().for_each(Latency::clear);
        cells.sent.store(0, Relaxed);
        cells.received.store(0, Relaxed);
    }
}

/// The store families of a snapshot. A sample appears once something was counted under its
/// labels (bytes and cost: once the store kind made a request, or had one answered).
pub(super) fn families() -> Vec<Family> {
    let (mut requests, mut latency, mut sent, mut received, mut cost) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for store in StoreKind::ALL {
        let cells = &CELLS[store as usize];
        let s = store.as_str();
        for op in Op::ALL {
            for status in Status::ALL {
                let n = cells.count(op, status);
                if n > 0 {
                    let labels = vec![
                        ("store", s.to_string()),
                        ("kind", op.as_str().to_string()),
                        ("status", status.as_str().to_string()),
                    ];
                    requests.push(number(labels, n as f64));
                }
            }
            if let Some(value) = cells.latency[op as usize].value() {
                let labels = vec![("store", s.to_string()), ("kind", op.as_str().to_string())];
                latency.push(Sample { labels, value });
            }
        }
        if cells.made_requests() {
            let store_label = || vec![("store", s.to_string())];
            sent.push(number(store_label(), cells.sent.load(Relaxed) as f64));
            received.push(number(store_label(), cells.received.load(Relaxed) as f64));
        }
        // Every answered request is billed, 304s, 404s and 412s too (prices.rs).
        if Op::ALL.iter().any(|op| cells.answered(*op) > 0) {
            let dollars: f64 = Op::ALL
                .iter()
                .map(|op| cells.answered(*op) as f64 * prices::price(s, op.as_str()))
                .sum();
            cost.push(number(vec![("store", s.to_string())], dollars));
        }
    }
    vec![
        family(
            "lease_store_requests_total",
            "Store requests, by store, kind (get, create, update, delete) and status (200, 304, 404, 412, 429, 5xx, 4xx, error: no answer).",
            Kind::Counter,
            requests,
        ),
        family(
            "lease_store_request_seconds",
            "Latency of store requests, by store and kind.",
            Kind::Histogram,
            latency,
        ),
        family(
            "lease_store_sent_bytes_total",
            "Bytes of request bodies sent to the store.",
            Kind::Counter,
            sent,
        ),
        family(
            "lease_store_received_bytes_total",
            "Bytes of response bodies received from the store.",
            Kind::Counter,
            received,
        ),
        family(
            "lease_store_cost_dollars_total",
            "Estimated request charges in US dollars, from the list prices in core/src/metrics/prices.rs.",
            Kind::Counter,
            cost,
        ),
    ]
}
