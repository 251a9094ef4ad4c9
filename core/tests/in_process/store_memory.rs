//! The conformance suite on the in-memory store.

use crate::conformance;

use std::sync::Arc;

use bytes::Bytes;
use lease::store::memory::MemoryStore;
use lease::store::{Capabilities, Cond, Delete, Get, GetOptions, Meta, Put, Store, Version};
use lease::Result;

macro_rules! suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            conformance::$name(conformance::dyn_store(MemoryStore::new()), "t").await;
        }
    )*};
}

conformance::every_case!(suite, identical_rewrites_make_new_versions);

/// Negative control of `rewrites_make_new_versions`: a store whose versions hash the bytes (as
/// on S3) but that claims every write makes a new version is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "kept an old version")]
async fn rewrites_make_new_versions_catches_a_false_claim() {
    let store = MemoryStore::new();
    store.set_content_versions(true);
    conformance::rewrites_make_new_versions(Arc::new(ClaimsUniqueVersions(store)), "t").await;
}

#[derive(Debug)]
struct ClaimsUniqueVersions(MemoryStore);

#[async_trait::async_trait]
impl Store for ClaimsUniqueVersions {
    fn url(&self) -> &str {
        self.0.url()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            versions_are_unique: true,
            ..self.0.capabilities()
        }
    }
    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        self.0.get(key, opts).await
    }
    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        self.0.put(key, bytes, cond, meta).await
    }
    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        self.0.delete(key, version).await
    }
}
