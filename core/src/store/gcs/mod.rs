//! `gs://` — Google Cloud Storage, over its JSON API.
//!
//! - `Create` is a multipart upload (`POST /upload/storage/v1/b/B/o?uploadType=multipart`) with
//!   `ifGenerationMatch=0`; `Match(v)` the same upload with `ifGenerationMatch=<generation>`;
//!   `delete` is `DELETE …/o/KEY?ifGenerationMatch=<generation>`; a read is
//!   `GET …/o/KEY?alt=media` (with `ifGenerationNotMatch=<generation>` for a poll: 304 →
//!   [`Get::NotModified`]). One request per operation, always the multipart form: emulators
//!   such as fake-gcs-server honour preconditions only there.
//! - The version is the generation, a number GCS gives every write of an object; it is also
//!   the version's etag string, so bindings that hand versions around as strings hand back
//!   the generation.
//! - `server_now` is the response's `Date`; `last_modified` the object's `Last-Modified`
//!   (its `updated` time), both whole seconds. Metadata is the object's custom metadata
//!   (`x-goog-meta-*` on reads).
//! - GCS sustains about one write per second to one object name (a 429 beyond): the store
//!   reports a minimum write interval of 1 s on Google's endpoint ([`Store::min_write_interval`];
//!   0 with an emulator, which has no such limit; the option `min_write_interval` sets it), so a
//!   renew interval below it (a ttl below 3 s) is a configuration error; see docs/stores.md.
//!
//! | GCS says                                         | The store answers                   |
//! |--------------------------------------------------|-------------------------------------|
//! | 412 to a write or delete                         | `ConditionFailed`                   |
//! | 412 to a poll (`ifGenerationNotMatch` on an object with no live generation) | read again without it |
//! | 404 to a read / to a delete (no such object)     | `NotFound` / `ConditionFailed`      |
//! | 408, 429, 5xx, timeouts, resets, a reply cut short | `Unavailable`: outcome unknown      |
//! | 401, 403, 400, 404 no such bucket, no credentials | `Store`, naming bucket, key, endpoint |

mod auth;
mod classify;
mod settings;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::Deserialize;

use super::http::{encode_component, Body, HttpClient, Method, Request, Response};
use super::remote::TokenCache;
use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Op,
    Put, Store, Version,
};
use crate::clock::Rng;
use crate::error::{Error, Result};

use classify::{classify_status, ClassifyInput, ErrorBody, Failure};
use settings::{endpoint_for, Endpoint, Settings};
pub use settings::{MIN_WRITE_INTERVAL, OPTIONS};

/// A GCS bucket. Cheap to clone; the HTTP client and credentials are set up on first use.
#[derive(Clone)]
pub struct GcsStore {
    inner: Arc<Inner>,
}

struct Inner {
    bucket: String,
    url: String,
    settings: Settings,
    endpoint: Endpoint,
    conditional_delete: bool,
    min_write_interval: Duration,
    loaded: tokio::sync::OnceCell<Loaded>,
    tokens: TokenCache,
}

struct Loaded {
    http: HttpClient,
    credential: auth::Credential,
    quota_project: Option<String>,
}

impl fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcsStore")
            .field("url", &self.inner.url)
            .finish()
    }
}

/// The permission a call needs, for messages.
fn permission(op: Op) -> &'static str {
    match op {
        Op::Get => "storage.objects.get",
        Op::Create => "storage.objects.create",
        // Replacing an object needs the right to delete the old generation too.
        Op::Update => "storage.objects.create and storage.objects.delete",
        Op::Delete => "storage.objects.delete",
    }
}

/// The part of an object resource a write's answer gives back.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectResource {
    generation: Option<String>,
}

fn multipart_boundary(body: &[u8]) -> String {
    loop {
        let boundary = format!("lease-{}", Rng::from_entropy().hex_id());
        if !body
            .windows(boundary.len())
            .any(|w| w == boundary.as_bytes())
        {
            return boundary;
        }
    }
}

impl GcsStore {
    /// The store for `bucket` with the options of a `gs://` URL. Checks the options; does not
    /// contact the server (the first call does).
    pub fn open(bucket: &str, options: &[(String, String)]) -> Result<GcsStore> {
        let settings = Settings::parse(bucket, options)?;
        let endpoint = endpoint_for(&settings);
        Ok(GcsStore {
            inner: Arc::new(Inner {
                bucket: bucket.to_string(),
                url: super::with_query(&format!("gs://{bucket}"), options),
                conditional_delete: settings.conditional_delete.unwrap_or(endpoint.google),
                min_write_interval: settings.min_write_interval.unwrap_or(if endpoint.google {
                    MIN_WRITE_INTERVAL
                } else {
                    Duration::ZERO
                }),
                endpoint,
                settings,
                loaded: tokio::sync::OnceCell::new(),
                tokens: TokenCache::default(),
            }),
        })
    }

    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// Where requests go, for messages.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint.hint
    }

    async fn loaded(&self) -> Result<&Loaded> {
        self.inner.loaded.get_or_try_init(|| self.load()).await
    }

    async fn load(&self) -> Result<Loaded> {
        let s = &self.inner.settings;
        let http = HttpClient::new(s.connect_timeout, s.timeout)?;
        let anonymous = match s.anonymous {
            Some(true) => Some("anonymous=true in the URL".to_string()),
            Some(false) => None,
            None => self.inner.endpoint.anonymous_default.clone(),
        };
        let found = auth::Credential::find(s.service_account_path.as_deref(), anonymous)
            .map_err(|e| e.context(format!("gs://{}", self.inner.bucket)))?;
        Ok(Loaded {
            http,
            credential: found.credential,
            quota_project: found.quota_project,
        })
    }

    fn describe(&self, op: Op, key: &str) -> String {
        format!(
            "cannot {} gs://{}/{key} on {}",
            op.verb(),
            self.inner.bucket,
            self.inner.endpoint.hint
        )
    }

    fn object_url(&self, key: &str) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.inner.endpoint.base,
            encode_component(&self.inner.bucket),
            encode_component(key)
        )
    }

    /// Add credentials to a request and send it.
    async fn send(
        &self,
        op: Op,
        key: &str,
        request: http::request::Builder,
        body: Bytes,
        max_len: Option<u64>,
    ) -> Result<(Response, &Loaded)> {
        let loaded = self.loaded().await?;
        let mut request = request;
        let token =
            self.inner
                .tokens
                .get(|| async {
                    Ok(loaded.credential.fetch(&loaded.http).await?.unwrap_or(
                        super::remote::Token {
                            value: String::new(),
                            expires: None,
                        },
                    ))
                })
                .await
                .map_err(|e| e.context(self.describe(op, key)))?;
        if !token.is_empty() {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(project) = &loaded.quota_project {
            request = request.header("x-goog-user-project", project);
        }
        let request = request
            .body(Body::from(body))
            .map_err(|e| Error::invalid(format!("{}: {e}", self.describe(op, key))))?;
        let response = loaded.http.send(request, max_len).await.map_err(|e| {
            e.into_error(
                &self.describe(op, key),
                "the endpoint (URL option endpoint=, STORAGE_EMULATOR_HOST)",
                op.unknown_outcome(),
            )
        })?;
        Ok((response, loaded))
    }

    fn classify(&self, op: Op, key: &str, loaded: &Loaded, response: &Response) -> Failure {
        let text = response.text();
        let message = serde_json::from_str::<ErrorBody>(&text)
            .ok()
            .and_then(|b| b.error)
            .map(|e| e.message)
            .unwrap_or(text);
        classify_status(ClassifyInput {
            op,
            status: response.status,
            message: &message,
            what: &self.describe(op, key),
            bucket: &self.inner.bucket,
            key,
            credentials: &loaded.credential.describe(),
        })
    }

    fn generation(&self, op: Op, key: &str, value: Option<&str>) -> Result<Version> {
        match value.and_then(|g| g.trim().parse::<u64>().ok()) {
            Some(g) => Ok(Version {
                etag: g.to_string(),
                generation: Some(g),
            }),
            None => Err(Error::store(format!(
                "{}: the server sent no object generation, so it cannot be used for leases \
                 (preconditions need one)",
                self.describe(op, key)
            ))),
        }
    }
}

/// The generation a version names: its generation, else its etag read as a number (a
/// version handed back by a binding as a string).
fn generation_of(v: &Version) -> Option<u64> {
    v.generation.or_else(|| v.etag.trim().parse().ok())
}

#[async_trait]
impl Store for GcsStore {
    fn url(&self) -> &str {
        &self.inner.url
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            conditional_delete: self.inner.conditional_delete,
            clock_resolution: Duration::from_secs(1),
            store_clock_rule: self.inner.settings.store_clock_rule,
            wall_clock: true,
            // Every write of an object gets a new generation, whatever it writes.
            versions_are_unique: true,
        }
    }

    fn min_write_interval(&self) -> Duration {
        self.inner.min_write_interval
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        validate_key(key)?;
        let mut url = format!("{}?alt=media", self.object_url(key));
        let not_match = opts.if_none_match.and_then(generation_of);
        if let Some(g) = not_match {
            url.push_str(&format!("&ifGenerationNotMatch={g}"));
        }
        let request = Request::builder().method(Method::GET).uri(url);
        let (response, loaded) = self
            .send(Op::Get, key, request, Bytes::new(), opts.max_len)
            .await?;
        let server_now = response.date();
        if response.status == 412 && not_match.is_some() {
            // A poll of an object with no live generation (deleted since): real GCS may answer
            // 412 where it would answer 404 without the precondition (fake-gcs-server ignores
            // it). The answer says nothing about the object but that it is not at that
            // generation: read it again without the condition (issue 29, item 5).
            let opts = GetOptions {
                if_none_match: None,
                ..opts
            };
            return Box::pin(self.get(key, opts)).await;
        }
        if response.status != 200 {
            return match self.classify(Op::Get, key, loaded, &response) {
                Failure::NotModified => Ok(Get::NotModified { server_now }),
                Failure::NotFound => Ok(Get::NotFound { server_now }),
                Failure::ConditionFailed => Err(Error::internal(format!(
                    "{}: a read reported a failed condition",
                    self.describe(Op::Get, key)
                ))),
                Failure::Error(e) => Err(e),
            };
        }
        let version = self.generation(Op::Get, key, response.header("x-goog-generation"))?;
        if not_match.is_some() && version.generation == not_match {
            // The server ignored ifGenerationNotMatch (fake-gcs-server does): same answer.
            return Ok(Get::NotModified { server_now });
        }
        let meta: Meta = response
            .headers
            .iter()
            .filter_map(|(name, value)| {
                let key = name.as_str().strip_prefix("x-goog-meta-")?;
                Some((key.to_ascii_lowercase(), value.to_str().ok()?.to_string()))
            })
            .collect();
        let last_modified = response
            .header("last-modified")
            .and_then(super::http::parse_http_date);
        Ok(Get::Found(Object {
            bytes: response.body,
            size: response.size,
            version,
            last_modified,
            server_now,
            meta,
        }))
    }

    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> Result<Put> {
        validate_key(key)?;
        validate_meta(meta)?;
        let (op, generation) = match &cond {
            Cond::Create => (Op::Create, 0),
            Cond::Match(v) => match generation_of(v) {
                Some(g) => (Op::Update, g),
                // Not a generation: no object of this store is at that version.
                None => return Ok(Put::ConditionFailed),
            },
        };
        let resource = serde_json::json!({
            "name": key,
            "contentType": "application/octet-stream",
            "metadata": meta,
        });
        let boundary = multipart_boundary(&bytes);
        let mut body = Vec::with_capacity(bytes.len() + 512);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n{resource}\r\n\
                 --{boundary}\r\ncontent-type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(&bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=multipart&ifGenerationMatch={generation}",
            self.inner.endpoint.base,
            encode_component(&self.inner.bucket),
        );
        let request = Request::builder().method(Method::POST).uri(url).header(
            "content-type",
            format!("multipart/related; boundary={boundary}"),
        );
        let (response, loaded) = self
            .send(op, key, request, Bytes::from(body), Some(1 << 20))
            .await?;
        if response.status != 200 {
            return match self.classify(op, key, loaded, &response) {
                Failure::ConditionFailed => Ok(Put::ConditionFailed),
                Failure::Error(e) => Err(e),
                other => Err(Error::unavailable(format!(
                    "{}: unexpected answer {other:?}",
                    self.describe(op, key)
                ))),
            };
        }
        let resource: ObjectResource =
            serde_json::from_slice(response.body.as_deref().unwrap_or_default()).map_err(|e| {
                Error::unavailable(format!(
                    "{}: the answer to the write is not an object resource ({e}); the outcome is \
                 unknown until read back",
                    self.describe(op, key)
                ))
            })?;
        Ok(Put::Written {
            version: self.generation(op, key, resource.generation.as_deref())?,
            server_now: response.date(),
        })
    }

    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        validate_key(key)?;
        let Some(generation) = generation_of(version) else {
            return Ok(Delete::ConditionFailed);
        };
        // Always sent with ifGenerationMatch. Whether the server honours it is what
        // `capabilities().conditional_delete` says; `lease doctor` tests it.
        let url = format!("{}?ifGenerationMatch={generation}", self.object_url(key));
        let request = Request::builder().method(Method::DELETE).uri(url);
        let (response, loaded) = self
            .send(Op::Delete, key, request, Bytes::new(), Some(64 * 1024))
            .await?;
        if (200..300).contains(&response.status) {
            return Ok(Delete::Deleted);
        }
        match self.classify(Op::Delete, key, loaded, &response) {
            Failure::ConditionFailed => Ok(Delete::ConditionFailed),
            Failure::Error(e) => Err(e),
            other => Err(Error::unavailable(format!(
                "{}: unexpected answer {other:?}",
                self.describe(Op::Delete, key)
            ))),
        }
    }
}
