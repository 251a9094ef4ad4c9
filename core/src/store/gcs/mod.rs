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
//! | 412                                              | `ConditionFailed`                   |
//! | 404 to a read / to a delete (no such object)     | `NotFound` / `ConditionFailed`      |
//! | 408, 429, 5xx, timeouts, resets, a reply cut short | `Unavailable`: outcome unknown      |
//! | 401, 403, 400, 404 no such bucket, no credentials | `Store`, naming bucket, key, endpoint |

mod auth;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::Deserialize;

use super::http::{encode_component, Body, HttpClient, Method, Request, Response};
use super::remote::{
    env_nonempty, parse_bool, parse_endpoint, parse_options, parse_timeout, OptionSpec, TokenCache,
};
use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Op,
    Put, Store, Version,
};
use crate::clock::Rng;
use crate::error::{Error, Result};

/// Every option a `gs://` URL accepts: `(name, aliases, meaning)`.
pub const OPTIONS: &[OptionSpec] = &[
    (
        "endpoint",
        &["endpoint_url", "google_storage_endpoint"],
        "URL of a GCS-compatible server or emulator (http:// or https://); default \
         STORAGE_EMULATOR_HOST, else https://storage.googleapis.com",
    ),
    (
        "service_account_path",
        &[
            "google_service_account_path",
            "google_application_credentials",
            "application_credentials",
        ],
        "a service-account key file (JSON) to use instead of the credential chain",
    ),
    (
        "anonymous",
        &["skip_signature", "google_skip_signature"],
        "true: send no credentials; default true for an emulator (STORAGE_EMULATOR_HOST or an \
         http:// endpoint), else false",
    ),
    (
        "timeout",
        &[],
        "backstop for one request, default 30s (a lease's own request timeout is shorter)",
    ),
    (
        "connect_timeout",
        &[],
        "time to establish a connection, default 5s",
    ),
    (
        "conditional_delete",
        &[],
        "whether the server honours ifGenerationMatch on delete; default true on Google's \
         endpoint, false with an emulator (fake-gcs-server ignores it): `lease doctor` tells",
    ),
    (
        "store_clock_rule",
        &[],
        "false when the server's clocks may disagree: waiters then only trust their own \
         observation (protocol §4); default true",
    ),
    (
        "min_write_interval",
        &[],
        "the shortest interval between two writes of one object the server sustains: acquiring \
         with a shorter renew interval is refused; default 1s on Google's endpoint (about one \
         write per second per object), 0s with an emulator, which has no such limit",
    ),
];

/// Option names that would put secrets in a URL.
const SECRET_OPTIONS: &[&str] = &[
    "service_account_key",
    "google_service_account_key",
    "service_account",
    "google_service_account",
    "access_token",
    "token",
    "private_key",
];

const GOOGLE_ENDPOINT: &str = "https://storage.googleapis.com";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// GCS: "a limit on writes to the same object name … once per second".
pub const MIN_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// The options of one store, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    endpoint: Option<String>,
    service_account_path: Option<PathBuf>,
    anonymous: Option<bool>,
    timeout: Duration,
    connect_timeout: Duration,
    conditional_delete: Option<bool>,
    store_clock_rule: bool,
    min_write_interval: Option<Duration>,
}

impl Settings {
    fn parse(bucket: &str, options: &[(String, String)]) -> Result<Settings> {
        let store = format!("gs://{bucket}");
        let given = parse_options(
            &store,
            options,
            OPTIONS,
            SECRET_OPTIONS,
            "point GOOGLE_APPLICATION_CREDENTIALS (or the option service_account_path) at a \
             key file, or use gcloud's application default credentials or the metadata server",
        )?;
        let mut s = Settings {
            endpoint: None,
            service_account_path: None,
            anonymous: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            conditional_delete: None,
            store_clock_rule: true,
            min_write_interval: None,
        };
        for (name, (raw, value)) in &given {
            match *name {
                "endpoint" => s.endpoint = Some(parse_endpoint(&store, value)?),
                "service_account_path" => {
                    if value.is_empty() {
                        return Err(Error::invalid(format!("{store}: option {raw} is empty")));
                    }
                    s.service_account_path = Some(PathBuf::from(value));
                }
                "anonymous" => s.anonymous = Some(parse_bool(&store, raw, value)?),
                "timeout" => s.timeout = parse_timeout(&store, raw, value)?,
                "connect_timeout" => s.connect_timeout = parse_timeout(&store, raw, value)?,
                "conditional_delete" => {
                    s.conditional_delete = Some(parse_bool(&store, raw, value)?)
                }
                "store_clock_rule" => s.store_clock_rule = parse_bool(&store, raw, value)?,
                "min_write_interval" => {
                    s.min_write_interval =
                        Some(crate::options::parse_duration(value).map_err(|e| {
                            Error::invalid(format!("{store}: option {raw}: {}", e.message()))
                        })?)
                }
                other => unreachable!("option {other} is listed but not handled"),
            }
        }
        Ok(s)
    }
}

/// Where requests go, decided at open.
#[derive(Debug, Clone)]
struct Endpoint {
    base: String,
    /// For messages: the URL and where it came from.
    hint: String,
    /// `Some(why)` when no credentials are sent by default.
    anonymous_default: Option<String>,
    google: bool,
}

fn endpoint_for(s: &Settings) -> Endpoint {
    if let Some(e) = &s.endpoint {
        return Endpoint {
            base: e.clone(),
            hint: e.clone(),
            anonymous_default: e
                .starts_with("http://")
                .then(|| format!("an emulator at {e}")),
            google: e == GOOGLE_ENDPOINT,
        };
    }
    if let Some(host) = env_nonempty("STORAGE_EMULATOR_HOST") {
        let host = host.trim().trim_end_matches('/');
        let base = if host.contains("://") {
            host.to_string()
        } else {
            format!("http://{host}")
        };
        return Endpoint {
            hint: format!("{base} (from STORAGE_EMULATOR_HOST)"),
            anonymous_default: Some("STORAGE_EMULATOR_HOST names an emulator".into()),
            base,
            google: false,
        };
    }
    Endpoint {
        base: GOOGLE_ENDPOINT.to_string(),
        hint: GOOGLE_ENDPOINT.to_string(),
        anonymous_default: None,
        google: true,
    }
}

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

/// A status that is not the call's success, classified.
#[derive(Debug)]
enum Failure {
    NotModified,
    NotFound,
    ConditionFailed,
    Error(Error),
}

/// The error GCS puts in a failed call's body.
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    error: Option<ErrorDetail>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: String,
}

/// The part of an object resource a write's answer gives back.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectResource {
    generation: Option<String>,
}

struct ClassifyInput<'a> {
    op: Op,
    status: u16,
    /// The `message` of GCS's error body, or the body's first characters.
    message: &'a str,
    what: &'a str,
    bucket: &'a str,
    key: &'a str,
    credentials: &'a str,
}

/// Whether a 404's message is about the bucket rather than the object.
fn no_such_bucket(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    !m.starts_with("no such object") && m.contains("bucket")
}

/// The status part of the classification, separate so it can be tested on its own.
fn classify_status(i: ClassifyInput<'_>) -> Failure {
    let ClassifyInput {
        op,
        status,
        message,
        what,
        bucket,
        key,
        credentials,
    } = i;
    let said = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {message}")
    };
    let store = |hint: String| Failure::Error(Error::store(format!("{what}: {said}: {hint}")));
    let unavailable = || {
        Failure::Error(Error::unavailable(format!(
            "{what}: {said}{}",
            op.unknown_outcome()
        )))
    };
    match status {
        304 if op == Op::Get => Failure::NotModified,
        412 if op != Op::Get => Failure::ConditionFailed,
        404 if no_such_bucket(message) => store(format!(
            "bucket {bucket:?} does not exist on this endpoint: check the bucket name and the \
             endpoint"
        )),
        404 if op == Op::Get => Failure::NotFound,
        404 if op == Op::Delete => Failure::ConditionFailed,
        404 => store(format!(
            "the server answered 404 to a write of {key:?}: check the bucket name and the \
             endpoint"
        )),
        408 | 429 => unavailable(),
        500..=599 => unavailable(),
        401 => store(format!(
            "the credentials were not accepted: check {credentials}"
        )),
        403 => store(format!(
            "access denied: check that {credentials} have {} on gs://{bucket}/{key} (roles/storage.objectUser grants what a worker needs)",
            permission(op)
        )),
        400..=499 => store(
            "the server rejected the request; if it does not support preconditions \
             (ifGenerationMatch), it cannot hold leases: run `lease doctor`"
                .into(),
        ),
        // A 2xx that could not be used, a 1xx or 3xx we do not expect: the reply is not
        // trustworthy, so the outcome is unknown.
        _ => unavailable(),
    }
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
                url: super::url::with_query(&format!("gs://{bucket}"), options),
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
                op,
                &self.describe(op, key),
                "the endpoint (URL option endpoint=, STORAGE_EMULATOR_HOST)",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_and_aliases() {
        let s = Settings::parse(
            "b",
            &opts(&[
                ("endpoint_url", "http://127.0.0.1:4443/"),
                ("timeout", "2s"),
                ("SKIP_SIGNATURE", "true"),
            ]),
        )
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:4443"));
        assert_eq!(s.timeout, Duration::from_secs(2));
        assert_eq!(s.anonymous, Some(true));
        for (pairs, needle) in [
            (vec![("bogus", "1")], "bogus"),
            (vec![("endpoint", "ftp://x")], "ftp://x"),
            (vec![("anonymous", "perhaps")], "perhaps"),
            (vec![("timeout", "0s")], "timeout"),
            (vec![("service_account_key", "{}")], "service_account_key"),
            (
                vec![("endpoint", "http://a"), ("endpoint_url", "http://b")],
                "twice",
            ),
        ] {
            let e = GcsStore::open("bucket", &opts(&pairs)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "{pairs:?}: {e}");
            assert!(e.message().contains(needle), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn emulator_endpoints_default_to_no_credentials_and_no_conditional_delete() {
        let store = GcsStore::open("b", &opts(&[("endpoint", "http://127.0.0.1:1")])).unwrap();
        assert!(!store.capabilities().conditional_delete);
        assert!(store.inner.endpoint.anonymous_default.is_some());
        // Emulators have no write-rate limit; Google's endpoint does, and a URL may say so.
        assert_eq!(store.min_write_interval(), Duration::ZERO);
        let paced = GcsStore::open(
            "b",
            &opts(&[
                ("endpoint", "http://127.0.0.1:1"),
                ("min_write_interval", "1s"),
            ]),
        )
        .unwrap();
        assert_eq!(paced.min_write_interval(), Duration::from_secs(1));
        let store = GcsStore::open(
            "b",
            &opts(&[
                ("endpoint", "https://storage.googleapis.com"),
                ("conditional_delete", "true"),
            ]),
        )
        .unwrap();
        assert!(store.capabilities().conditional_delete);
        assert!(store.inner.endpoint.anonymous_default.is_none());
        assert_eq!(store.min_write_interval(), MIN_WRITE_INTERVAL);
        assert_eq!(
            store.url(),
            "gs://b?endpoint=https://storage.googleapis.com&conditional_delete=true"
        );
    }

    fn status(op: Op, status: u16, message: &str) -> Failure {
        classify_status(ClassifyInput {
            op,
            status,
            message,
            what: "cannot x gs://b/k on E",
            bucket: "b",
            key: "k",
            credentials: "the creds",
        })
    }

    #[test]
    fn classification_follows_the_protocol() {
        use ErrorKind::*;
        assert!(matches!(status(Op::Get, 304, ""), Failure::NotModified));
        assert!(matches!(
            status(Op::Get, 404, "No such object: b/k"),
            Failure::NotFound
        ));
        assert!(matches!(
            status(Op::Create, 412, "Precondition Failed"),
            Failure::ConditionFailed
        ));
        assert!(matches!(
            status(Op::Update, 412, ""),
            Failure::ConditionFailed
        ));
        assert!(matches!(
            status(Op::Delete, 404, "No such object: b/k"),
            Failure::ConditionFailed
        ));
        let kind = |f: Failure| match f {
            Failure::Error(e) => {
                assert!(e.message().contains("gs://b/k on E"), "{e}");
                Some(e.kind())
            }
            _ => None,
        };
        for (op, st, msg, want) in [
            (Op::Update, 429, "rate", Unavailable),
            (Op::Create, 503, "", Unavailable),
            (Op::Get, 500, "", Unavailable),
            (Op::Update, 408, "", Unavailable),
            (Op::Get, 401, "Invalid Credentials", Store),
            (Op::Update, 403, "denied", Store),
            (Op::Get, 404, "The specified bucket does not exist.", Store),
            (
                Op::Delete,
                404,
                "The specified bucket does not exist.",
                Store,
            ),
            (Op::Create, 404, "", Store),
            (Op::Update, 400, "Invalid argument", Store),
        ] {
            assert_eq!(kind(status(op, st, msg)), Some(want), "{op:?} {st} {msg}");
        }
        let Failure::Error(e) = status(Op::Update, 403, "denied") else {
            panic!()
        };
        assert!(e.message().contains("storage.objects.delete"), "{e}");
    }

    #[test]
    fn versions_are_generations() {
        assert_eq!(generation_of(&Version::etag("17")), Some(17));
        assert_eq!(
            generation_of(&Version {
                etag: String::new(),
                generation: Some(5)
            }),
            Some(5)
        );
        assert_eq!(generation_of(&Version::etag("\"abc\"")), None);
    }
}
