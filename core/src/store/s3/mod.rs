//! `s3://` — Amazon S3 and S3-compatible stores, on `aws-sdk-s3`.
//!
//! - `Create` is `PutObject` with `If-None-Match: *`, `Match` is `PutObject` with
//!   `If-Match: <etag>`, `delete` is `DeleteObject` with `If-Match: <etag>`, a polling read is
//!   `GetObject` with `If-None-Match: <etag>` (304 → [`Get::NotModified`]).
//! - The version is the ETag. Every lease record differs from the previous one (its `rev`
//!   grows), so equal ETags mean equal records: no ABA.
//! - `server_now` is the response's `Date` header, captured by an interceptor on every call;
//!   `last_modified` is `Last-Modified`. Both are whole seconds (`clock_resolution` = 1 s).
//! - Metadata is S3 user metadata (`x-amz-meta-*`), written with the object, so it changes
//!   atomically with it.
//! - A read with `max_len` looks at `Content-Length` before reading the body: an object larger
//!   than the limit is reported by size and its body is never read.
//!
//! Errors are classified once, here (protocol §2):
//!
//! | S3 says                                                    | The store answers            |
//! |------------------------------------------------------------|------------------------------|
//! | 412, or 404 to a write or delete with `If-Match`           | `ConditionFailed`            |
//! | 409 (`ConditionalRequestConflict`), 408, 429, 5xx, `SlowDown`, throttling, timeouts, connection resets, a reply cut short | [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable): the outcome is unknown, the client reads back |
//! | 403, 400, 301, `NoSuchBucket`, 501, missing credentials, DNS failure | [`ErrorKind::Store`](crate::ErrorKind::Store), naming bucket, key, endpoint and what to check |
//!
//! Options (the URL's query, `s3://bucket/key?region=eu-west-1&endpoint=…`) are listed in
//! [`OPTIONS`] and in docs/stores.md; names follow the `object_store` crate, whose aliases are
//! accepted where they mean the same thing. Credentials are never taken from the URL (URLs are
//! shown in messages, `lease status` and `LEASE_URL`): the SDK's standard chain finds them.

mod classify;
mod client;
mod date;
mod settings;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use bytes::{Bytes, BytesMut};

use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Op,
    Put, Store, Version,
};
use crate::error::{Error, Result};

use classify::Failure;
pub use date::parse_http_date;
use date::DateCapture;
pub use settings::OPTIONS;
use settings::{env_nonempty, Settings};

/// The SDK this store is built on, for callers that need a raw client (benchmarks, tests).
pub use aws_sdk_s3 as sdk;

/// An S3 bucket (or a bucket on an S3-compatible server). Cheap to clone.
///
/// The SDK client is built on first use: loading the configuration is asynchronous (profiles,
/// SSO, IMDS), while opening a store from a URL is not.
#[derive(Clone)]
pub struct S3Store {
    inner: Arc<Inner>,
}

struct Inner {
    bucket: String,
    url: String,
    settings: Settings,
    /// Resolved at open: the URL's option, else true only for AWS S3 itself.
    conditional_delete: bool,
    client: tokio::sync::OnceCell<Loaded>,
}

#[derive(Clone)]
struct Loaded {
    client: aws_sdk_s3::Client,
    /// Where requests go, for messages.
    endpoint: String,
    /// Where the credentials come from, for messages.
    credentials_hint: String,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("url", &self.inner.url)
            .finish()
    }
}

/// The permission a call needs, for messages.
fn permission(op: Op) -> &'static str {
    match op {
        Op::Get => "s3:GetObject",
        Op::Create | Op::Update => "s3:PutObject",
        Op::Delete => "s3:DeleteObject",
    }
}

impl S3Store {
    /// The store for `bucket` with the options of an `s3://` URL. Checks the options; does
    /// not contact the server (the first call does).
    pub fn open(bucket: &str, options: &[(String, String)]) -> Result<S3Store> {
        let settings = Settings::parse(bucket, options)?;
        let url = super::with_query(&format!("s3://{bucket}"), options);
        let custom_endpoint = settings.endpoint.is_some()
            || env_nonempty("AWS_ENDPOINT_URL_S3").is_some()
            || env_nonempty("AWS_ENDPOINT_URL").is_some();
        Ok(S3Store {
            inner: Arc::new(Inner {
                bucket: bucket.to_string(),
                url,
                conditional_delete: settings.conditional_delete.unwrap_or(!custom_endpoint),
                settings,
                client: tokio::sync::OnceCell::new(),
            }),
        })
    }

    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// The SDK client this store uses (built on first use).
    pub async fn sdk_client(&self) -> Result<aws_sdk_s3::Client> {
        Ok(self.loaded().await?.client.clone())
    }

    /// Where requests go: the endpoint URL, or AWS S3 and the region.
    pub async fn endpoint(&self) -> Result<String> {
        Ok(self.loaded().await?.endpoint.clone())
    }

    async fn loaded(&self) -> Result<&Loaded> {
        self.inner.client.get_or_try_init(|| self.load()).await
    }

    fn describe(&self, op: Op, key: &str, loaded: &Loaded) -> String {
        format!(
            "cannot {} s3://{}/{key} on {}",
            op.verb(),
            self.inner.bucket,
            loaded.endpoint
        )
    }

    fn etag(&self, op: Op, key: &str, loaded: &Loaded, etag: Option<&str>) -> Result<Version> {
        match etag {
            Some(e) if !e.is_empty() => Ok(Version::etag(e)),
            _ => Err(Error::store(format!(
                "{}: the server sent no ETag, so it cannot be used for leases (conditional \
                 writes need one)",
                self.describe(op, key, loaded)
            ))),
        }
    }
}

fn to_system_time(d: Option<&DateTime>) -> Option<SystemTime> {
    d.and_then(|d| SystemTime::try_from(*d).ok())
}

#[async_trait]
impl Store for S3Store {
    fn url(&self) -> &str {
        &self.inner.url
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            conditional_delete: self.inner.conditional_delete,
            clock_resolution: Duration::from_secs(1),
            store_clock_rule: self.inner.settings.store_clock_rule,
            wall_clock: true,
            // The ETag of a PutObject is the MD5 of its bytes alone.
            versions_are_unique: false,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        validate_key(key)?;
        let loaded = self.loaded().await?;
        let date = DateCapture::default();
        let mut req = loaded
            .client
            .get_object()
            .bucket(&self.inner.bucket)
            .key(key);
        if let Some(v) = opts.if_none_match {
            req = req.if_none_match(&v.etag);
        }
        let result = req.customize().interceptor(date.clone()).send().await;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                return match self.classify(Op::Get, key, false, loaded, e) {
                    Failure::NotModified => Ok(Get::NotModified {
                        server_now: date.server_now(),
                    }),
                    Failure::NotFound => Ok(Get::NotFound {
                        server_now: date.server_now(),
                    }),
                    Failure::ConditionFailed => Err(Error::internal(format!(
                        "{}: a read reported a failed condition",
                        self.describe(Op::Get, key, loaded)
                    ))),
                    Failure::Error(e) => Err(e),
                }
            }
        };
        let version = self.etag(Op::Get, key, loaded, out.e_tag())?;
        let meta: Meta = out
            .metadata()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let last_modified = to_system_time(out.last_modified());
        let length = out.content_length().and_then(|n| u64::try_from(n).ok());
        let server_now = date.server_now();
        let mut body = out.body;
        if let (Some(max), Some(size)) = (opts.max_len, length) {
            if size > max {
                // Dropping the body closes the connection without reading it.
                drop(body);
                return Ok(Get::Found(Object {
                    bytes: None,
                    size,
                    version,
                    last_modified,
                    server_now,
                    meta,
                }));
            }
        }
        let broken = |e: &dyn std::error::Error| {
            Error::unavailable(format!(
                "{}: the reply was cut short ({e})",
                self.describe(Op::Get, key, loaded)
            ))
        };
        let mut buf = BytesMut::with_capacity(length.unwrap_or(0).min(1 << 20) as usize);
        let mut size = 0u64;
        let mut too_large = false;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| broken(&e))?;
            size += chunk.len() as u64;
            if opts.max_len.is_some_and(|max| size > max) {
                // No Content-Length (a chunked reply): count the rest, keep none of it.
                too_large = true;
                buf = BytesMut::new();
            }
            if !too_large {
                buf.extend_from_slice(&chunk);
            }
        }
        if let Some(expected) = length {
            if expected != size {
                return Err(broken(&std::io::Error::other(format!(
                    "{size} bytes of {expected}"
                ))));
            }
        }
        Ok(Get::Found(Object {
            bytes: (!too_large).then(|| buf.freeze()),
            size,
            version,
            last_modified,
            server_now,
            meta,
        }))
    }

    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        validate_key(key)?;
        validate_meta(meta)?;
        let loaded = self.loaded().await?;
        let date = DateCapture::default();
        let op = match cond {
            Cond::Create => Op::Create,
            Cond::Match(_) => Op::Update,
        };
        let mut req = loaded
            .client
            .put_object()
            .bucket(&self.inner.bucket)
            .key(key)
            .body(ByteStream::from(bytes));
        req = match &cond {
            Cond::Create => req.if_none_match("*"),
            Cond::Match(v) => req.if_match(&v.etag),
        };
        if !meta.is_empty() {
            req = req.set_metadata(Some(
                meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ));
        }
        match req.customize().interceptor(date.clone()).send().await {
            Ok(out) => Ok(Put::Written {
                version: self.etag(op, key, loaded, out.e_tag())?,
                server_now: date.server_now(),
            }),
            Err(e) => match self.classify(op, key, true, loaded, e) {
                Failure::ConditionFailed => Ok(Put::ConditionFailed),
                Failure::Error(e) => Err(e),
                other => Err(Error::unavailable(format!(
                    "{}: unexpected answer {other:?}",
                    self.describe(op, key, loaded)
                ))),
            },
        }
    }

    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        validate_key(key)?;
        let loaded = self.loaded().await?;
        // Always sent with If-Match. Whether the server honours it is what
        // `capabilities().conditional_delete` says; callers that need a conditional delete
        // (fenced deletes) check it first, and `lease doctor` tests it.
        let result = loaded
            .client
            .delete_object()
            .bucket(&self.inner.bucket)
            .key(key)
            .if_match(&version.etag)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Delete::Deleted),
            Err(e) => match self.classify(Op::Delete, key, true, loaded, e) {
                Failure::ConditionFailed => Ok(Delete::ConditionFailed),
                Failure::Error(e) => Err(e),
                other => Err(Error::unavailable(format!(
                    "{}: unexpected answer {other:?}",
                    self.describe(Op::Delete, key, loaded)
                ))),
            },
        }
    }
}
