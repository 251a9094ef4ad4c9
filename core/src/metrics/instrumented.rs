//! The store boundary: every request a client makes goes through [`Instrumented`], which
//! counts it (kind, status, bytes, latency, estimated cost) and wraps it in a tracing span.

use std::time::{Duration, Instant as StdInstant};

use async_trait::async_trait;
use bytes::Bytes;
use tracing::Instrument;

use super::{Op, Status, StoreKind};
use crate::error::{ErrorKind, Result};
use crate::store::{
    Capabilities, Cond, Delete, DynStore, Get, GetOptions, Meta, Put, Store, Version, Watch,
};

/// A store whose requests are counted and traced.
#[derive(Debug)]
pub(crate) struct Instrumented {
    inner: DynStore,
    kind: StoreKind,
}

impl Instrumented {
    /// `inner`, counted: wrapped, unless it is counted already.
    pub(crate) fn wrap(inner: DynStore) -> DynStore {
        if inner.counted() {
            return inner;
        }
        let kind = StoreKind::of_url(inner.url());
        std::sync::Arc::new(Instrumented { inner, kind })
    }
}

/// The status label of a failed request: what the store answered, if it answered.
fn error_status(e: &crate::Error) -> Status {
    match e.http_status() {
        Some(429) => Status::TooMany,
        Some(s) if s >= 500 => Status::ServerError,
        Some(404) => Status::NotFound,
        Some(412) => Status::PreconditionFailed,
        Some(_) => Status::ClientError,
        // The file store's answers are its own: a refused write (permissions) is a 4xx.
        None if e.kind() == ErrorKind::Store || e.kind() == ErrorKind::Invalid => {
            Status::ClientError
        }
        None => Status::Error,
    }
}

/// Time a request on the real clock: latency is what the caller waited, also in simulated
/// tests (where it is ~0).
fn started() -> StdInstant {
    #[allow(clippy::disallowed_methods)] // a measurement, never a decision
    StdInstant::now()
}

/// Run one store request `op` on `key` in its tracing span, and count it: its status (what
/// `status_of` reads from the answer, or the error's), latency and bytes.
async fn counted<T>(
    store: StoreKind,
    op: Op,
    key: &str,
    sent: u64,
    request: impl std::future::Future<Output = Result<T>>,
    status_of: impl Fn(&T) -> (Status, u64),
) -> Result<T> {
    let span = tracing::debug_span!(
        "store",
        store = store.as_str(),
        op = op.as_str(),
        key,
        status = tracing::field::Empty
    );
    async {
        let start = started();
        let result = request.await;
        let took: Duration = start.elapsed();
        let (status, received) = match &result {
            Ok(v) => status_of(v),
            Err(e) => (error_status(e), 0),
        };
        tracing::Span::current().record("status", status.as_str());
        super::request(store, op, status, took, sent, received);
        result
    }
    .instrument(span)
    .await
}

#[async_trait]
impl Store for Instrumented {
    fn url(&self) -> &str {
        self.inner.url()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    // Every method the `Store` trait gives a default must be forwarded here: a default left
    // in place would change what the store says of itself (tests:
    // the_counted_store_says_what_the_store_says_of_itself).
    fn min_write_interval(&self) -> Duration {
        self.inner.min_write_interval()
    }

    fn dead_holder_rule(&self) -> bool {
        self.inner.dead_holder_rule()
    }

    fn answers_carry_store_clock(&self) -> bool {
        self.inner.answers_carry_store_clock()
    }

    fn in_process(&self) -> bool {
        self.inner.in_process()
    }

    fn counted(&self) -> bool {
        true
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        counted(
            self.kind,
            Op::Get,
            key,
            0,
            self.inner.get(key, opts),
            |g| match g {
                Get::Found(o) => (Status::Ok, o.bytes.as_ref().map_or(0, |b| b.len() as u64)),
                Get::NotModified { .. } => (Status::NotModified, 0),
                Get::NotFound { .. } => (Status::NotFound, 0),
            },
        )
        .await
    }

    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        let op = match cond {
            Cond::Create => Op::Create,
            Cond::Match(_) => Op::Update,
        };
        let sent = bytes.len() as u64;
        counted(
            self.kind,
            op,
            key,
            sent,
            self.inner.put(key, bytes, cond, meta),
            |p| match p {
                Put::Written { .. } => (Status::Ok, 0),
                Put::ConditionFailed => (Status::PreconditionFailed, 0),
            },
        )
        .await
    }

    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        counted(
            self.kind,
            Op::Delete,
            key,
            0,
            self.inner.delete(key, version),
            |d| match d {
                Delete::Deleted => (Status::Ok, 0),
                Delete::ConditionFailed => (Status::PreconditionFailed, 0),
            },
        )
        .await
    }

    fn watch(&self, key: &str) -> Option<Box<dyn Watch>> {
        self.inner.watch(key)
    }
}
