//! A holder that can make fenced writes and reads: a [`Lease`] (a plain lease, or a queued
//! lock's grant held on its own session) or a [`SharedGrant`] (held through a shared session).
//! Their fenced operations are the same (`fence.rs` carries them out under each one's token);
//! the bindings take either through this one type instead of each matching on the two.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::Result;
use crate::fence::FencedObject;
use crate::lease::Lease;
use crate::shared_session::SharedGrant;
use crate::store::Version;

/// What fences an operation: a lease or a shared grant.
#[derive(Clone)]
pub enum FencedHolder {
    Lease(Lease),
    Grant(Arc<SharedGrant>),
}

impl FencedHolder {
    /// As [`Lease::object_key`].
    pub fn object_key(&self, key: &str) -> Result<String> {
        match self {
            FencedHolder::Lease(l) => l.object_key(key),
            FencedHolder::Grant(g) => g.object_key(key),
        }
    }

    /// As [`Lease::object_url`].
    pub fn object_url(&self, key: &str) -> Result<String> {
        match self {
            FencedHolder::Lease(l) => l.object_url(key),
            FencedHolder::Grant(g) => g.object_url(key),
        }
    }

    /// As [`Lease::fenced_get`].
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        match self {
            FencedHolder::Lease(l) => l.fenced_get(key).await,
            FencedHolder::Grant(g) => g.fenced_get(key).await,
        }
    }

    /// As [`Lease::fenced_read`].
    pub async fn fenced_read(&self, key: &str) -> Result<Option<FencedObject>> {
        match self {
            FencedHolder::Lease(l) => l.fenced_read(key).await,
            FencedHolder::Grant(g) => g.fenced_read(key).await,
        }
    }

    /// As [`Lease::fenced_put`].
    pub async fn fenced_put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        match self {
            FencedHolder::Lease(l) => l.fenced_put(key, bytes).await,
            FencedHolder::Grant(g) => g.fenced_put(key, bytes).await,
        }
    }

    /// As [`Lease::fenced_put_if`].
    pub async fn fenced_put_if(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: Option<&Version>,
    ) -> Result<Version> {
        match self {
            FencedHolder::Lease(l) => l.fenced_put_if(key, bytes, expected).await,
            FencedHolder::Grant(g) => g.fenced_put_if(key, bytes, expected).await,
        }
    }

    /// As [`Lease::fenced_delete`].
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        match self {
            FencedHolder::Lease(l) => l.fenced_delete(key).await,
            FencedHolder::Grant(g) => g.fenced_delete(key).await,
        }
    }
}
