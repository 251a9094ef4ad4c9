//! A holder that can make fenced writes and reads: a [`Lease`] (a plain lease, or a queued
//! lock's grant held on its own session) or a [`SharedGrant`] (held through a shared session).
//! Their fenced operations are the same (`fence.rs` carries them out under each one's token);
//! the bindings take either through this one type instead of each matching on the two: owned
//! ([`FencedHolder`], which Python and Node keep across an await), or borrowed for one call
//! ([`FencedRef`], which the C ABI takes from its handle without a clone).

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

/// What fences an operation, borrowed: a lease or a shared grant. The one place that tells
/// the two apart; [`FencedHolder`]'s operations go through it.
#[derive(Clone, Copy)]
pub enum FencedRef<'a> {
    Lease(&'a Lease),
    Grant(&'a SharedGrant),
}

impl<'a> From<&'a Lease> for FencedRef<'a> {
    fn from(l: &'a Lease) -> Self {
        FencedRef::Lease(l)
    }
}

impl<'a> From<&'a SharedGrant> for FencedRef<'a> {
    fn from(g: &'a SharedGrant) -> Self {
        FencedRef::Grant(g)
    }
}

impl FencedRef<'_> {
    /// As [`Lease::object_key`].
    pub fn object_key(self, key: &str) -> Result<String> {
        match self {
            FencedRef::Lease(l) => l.object_key(key),
            FencedRef::Grant(g) => g.object_key(key),
        }
    }

    /// As [`Lease::object_url`].
    pub fn object_url(self, key: &str) -> Result<String> {
        match self {
            FencedRef::Lease(l) => l.object_url(key),
            FencedRef::Grant(g) => g.object_url(key),
        }
    }

    /// As [`Lease::fenced_get`].
    pub async fn fenced_get(self, key: &str) -> Result<Option<FencedObject>> {
        match self {
            FencedRef::Lease(l) => l.fenced_get(key).await,
            FencedRef::Grant(g) => g.fenced_get(key).await,
        }
    }

    /// As [`Lease::fenced_read`].
    pub async fn fenced_read(self, key: &str) -> Result<Option<FencedObject>> {
        match self {
            FencedRef::Lease(l) => l.fenced_read(key).await,
            FencedRef::Grant(g) => g.fenced_read(key).await,
        }
    }

    /// As [`Lease::fenced_put`].
    pub async fn fenced_put(self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        match self {
            FencedRef::Lease(l) => l.fenced_put(key, bytes).await,
            FencedRef::Grant(g) => g.fenced_put(key, bytes).await,
        }
    }

    /// As [`Lease::fenced_put_if`].
    pub async fn fenced_put_if(
        self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: Option<&Version>,
    ) -> Result<Version> {
        match self {
            FencedRef::Lease(l) => l.fenced_put_if(key, bytes, expected).await,
            FencedRef::Grant(g) => g.fenced_put_if(key, bytes, expected).await,
        }
    }

    /// As [`Lease::fenced_delete`].
    pub async fn fenced_delete(self, key: &str) -> Result<bool> {
        match self {
            FencedRef::Lease(l) => l.fenced_delete(key).await,
            FencedRef::Grant(g) => g.fenced_delete(key).await,
        }
    }
}

impl FencedHolder {
    /// This holder, borrowed.
    pub fn borrowed(&self) -> FencedRef<'_> {
        match self {
            FencedHolder::Lease(l) => FencedRef::Lease(l),
            FencedHolder::Grant(g) => FencedRef::Grant(g),
        }
    }

    /// As [`Lease::object_key`].
    pub fn object_key(&self, key: &str) -> Result<String> {
        self.borrowed().object_key(key)
    }

    /// As [`Lease::object_url`].
    pub fn object_url(&self, key: &str) -> Result<String> {
        self.borrowed().object_url(key)
    }

    /// As [`Lease::fenced_get`].
    pub async fn fenced_get(&self, key: &str) -> Result<Option<FencedObject>> {
        self.borrowed().fenced_get(key).await
    }

    /// As [`Lease::fenced_read`].
    pub async fn fenced_read(&self, key: &str) -> Result<Option<FencedObject>> {
        self.borrowed().fenced_read(key).await
    }

    /// As [`Lease::fenced_put`].
    pub async fn fenced_put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<Version> {
        self.borrowed().fenced_put(key, bytes).await
    }

    /// As [`Lease::fenced_put_if`].
    pub async fn fenced_put_if(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: Option<&Version>,
    ) -> Result<Version> {
        self.borrowed().fenced_put_if(key, bytes, expected).await
    }

    /// As [`Lease::fenced_delete`].
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        self.borrowed().fenced_delete(key).await
    }
}
