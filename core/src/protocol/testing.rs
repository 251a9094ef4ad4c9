//! What the protocol's unit tests share: instants on a fixed origin, deterministic entropy,
//! records, versions and the store's answers, built in one line each so that every test says
//! only what its case is about.

#![allow(clippy::disallowed_methods)] // one origin for the tests' instants

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use super::Entropy;
use crate::clock::Instant;
use crate::options::{LeaseOptions, Timing};
use crate::record::{Displaced, Holder, Record, RecordState, FORMAT};
use crate::store::{Capabilities, Get, Object, Version};

/// Nonces `n1`, `n2`, … in order; no jitter (every wait is exactly what was asked).
#[derive(Default)]
pub(crate) struct Counter(Cell<u32>);

impl Entropy for Counter {
    fn nonce(&self) -> String {
        let n = self.0.get() + 1;
        self.0.set(n);
        format!("n{n}")
    }

    fn jitter(&self, d: Duration, _spread: f64) -> Duration {
        d
    }
}

pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// The instant `s` seconds after a fixed origin.
pub(crate) fn at(s: f64) -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now) + secs(s)
}

/// A wall-clock time `s` seconds after 2026-01-01T00:00:00Z.
pub(crate) fn wall(s: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600) + secs(s)
}

/// The memory store's capabilities: a clock with 1 ms resolution, both takeover rules.
pub(crate) fn caps() -> Capabilities {
    Capabilities {
        conditional_delete: true,
        clock_resolution: Duration::from_millis(1),
        store_clock_rule: true,
        wall_clock: true,
        versions_are_unique: true,
    }
}

/// The timing of `options` on the memory store.
pub(crate) fn timing_of(options: LeaseOptions) -> Timing {
    options.timing(&caps()).unwrap()
}

/// A 10 s ttl: renewals every 10/3 s, requests time out after 5/3 s, polls every second, a 1 s
/// grace, a 10 s unavailable timeout.
pub(crate) fn timing() -> Timing {
    timing_of(LeaseOptions::new(secs(10.0)))
}

pub(crate) fn holder(id: &str) -> Holder {
    Holder {
        id: id.into(),
        ..Holder::default()
    }
}

/// A record of `id` at `epoch`, rev 1, with a 10 s ttl and the write nonce `w-{id}-{epoch}`.
pub(crate) fn record(id: &str, epoch: u64, state: RecordState) -> Record {
    Record {
        format: FORMAT,
        epoch,
        rev: 1,
        state,
        ttl_ms: 10_000,
        holder: holder(id),
        acquired_at: None,
        renewed_at: None,
        data: None,
        prev: vec![],
        write: Some(format!("w-{id}-{epoch}")),
        broken: None,
        preempted: None,
        history: Default::default(),
        attached: None,
    }
}

/// A record of `by` at `epoch` that broke the lease of `id` at `broken_epoch`.
pub(crate) fn breaking(by: &str, epoch: u64, id: &str, broken_epoch: u64) -> Record {
    Record {
        broken: Some(Displaced {
            id: id.into(),
            epoch: broken_epoch,
        }),
        ..record(by, epoch, RecordState::Held)
    }
}

/// A record of `by` at `epoch` that preempted the lease of `id` at `preempted_epoch`.
pub(crate) fn preempting(by: &str, epoch: u64, id: &str, preempted_epoch: u64) -> Record {
    Record {
        preempted: Some(crate::record::Displaced {
            id: id.into(),
            epoch: preempted_epoch,
        }),
        ..record(by, epoch, RecordState::Held)
    }
}

/// The version of generation `g`.
pub(crate) fn version(g: u64) -> Version {
    Version {
        etag: format!("e{g}"),
        generation: Some(g),
    }
}

/// An object of `bytes` at generation `g`, without the store's times.
pub(crate) fn object(bytes: &[u8], g: u64) -> Object {
    Object {
        bytes: Some(bytes::Bytes::copy_from_slice(bytes)),
        size: bytes.len() as u64,
        version: version(g),
        last_modified: None,
        server_now: None,
        meta: Default::default(),
    }
}

/// A read that found `record` at generation `g`.
pub(crate) fn found(record: &Record, g: u64) -> Get {
    Get::Found(object(&record.to_bytes(), g))
}

/// A read that found something that is not a lease record, at generation `g`.
pub(crate) fn found_corrupt(g: u64) -> Get {
    Get::Found(object(b"not a lease record", g))
}

pub(crate) fn not_found() -> Get {
    Get::NotFound { server_now: None }
}
