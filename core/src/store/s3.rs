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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    ConfigBag, Intercept, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    RuntimeComponents, StalledStreamProtectionConfig,
};
use aws_sdk_s3::error::{BoxError, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, DateTime, DateTimeFormat};
use bytes::{Bytes, BytesMut};

use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Op,
    Put, Store, Version,
};
use crate::error::{Error, Result};

/// The SDK this store is built on, for callers that need a raw client (benchmarks, tests).
pub use aws_sdk_s3 as sdk;

/// Every option an `s3://` URL accepts: `(name, aliases, meaning)`.
pub const OPTIONS: &[(&str, &[&str], &str)] = &[
    (
        "region",
        &["aws_region", "aws_default_region"],
        "AWS region of the bucket; default from AWS_REGION / the profile / IMDS, or us-east-1 \
         when an endpoint is set",
    ),
    (
        "endpoint",
        &["endpoint_url", "aws_endpoint", "aws_endpoint_url"],
        "URL of an S3-compatible server (http:// or https://); default from \
         AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS S3",
    ),
    (
        "path_style",
        &["force_path_style"],
        "true: address the bucket as ENDPOINT/BUCKET/KEY, false: BUCKET.ENDPOINT/KEY; default \
         true with a custom endpoint, false on AWS",
    ),
    (
        "virtual_hosted_style_request",
        &["aws_virtual_hosted_style_request"],
        "the inverse of path_style (object_store's name)",
    ),
    (
        "profile",
        &["aws_profile"],
        "named profile in ~/.aws/config and ~/.aws/credentials (default AWS_PROFILE or \
         `default`)",
    ),
    (
        "allow_http",
        &["aws_allow_http"],
        "accepted for object_store compatibility; http:// endpoints are always allowed",
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
        "whether the server honours If-Match on DeleteObject; default true on AWS S3 (documented \
         since 2025-09), false with a custom endpoint (MinIO ignores it): `lease doctor` tells",
    ),
    (
        "store_clock_rule",
        &[],
        "false when the server's nodes' clocks may disagree: waiters then only trust their \
         own observation (protocol §4); default true",
    ),
];

/// Option names that would put secrets in a URL.
const SECRET_OPTIONS: &[&str] = &[
    "access_key_id",
    "aws_access_key_id",
    "secret_access_key",
    "aws_secret_access_key",
    "session_token",
    "aws_session_token",
    "token",
    "aws_token",
];

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The options of one store, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    region: Option<String>,
    endpoint: Option<String>,
    path_style: Option<bool>,
    profile: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    /// `None`: decided by whether the endpoint is AWS's.
    conditional_delete: Option<bool>,
    store_clock_rule: bool,
}

fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!(
            "option {name}={value:?}: expected true or false"
        ))),
    }
}

impl Settings {
    fn parse(bucket: &str, options: &[(String, String)]) -> Result<Settings> {
        let mut s = Settings {
            region: None,
            endpoint: None,
            path_style: None,
            profile: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            conditional_delete: None,
            store_clock_rule: true,
        };
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (raw_name, value) in options {
            let lower = raw_name.to_ascii_lowercase();
            let invalid = |why: String| Error::invalid(format!("s3://{bucket}: {why}"));
            if SECRET_OPTIONS.contains(&lower.as_str()) {
                return Err(invalid(format!(
                    "option {raw_name:?} is not accepted: credentials do not belong in a lease \
                     URL (it is shown in messages and exported as LEASE_URL); use \
                     AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, SSO or an instance role"
                )));
            }
            let Some((name, _, _)) = OPTIONS
                .iter()
                .find(|(n, aliases, _)| *n == lower || aliases.contains(&lower.as_str()))
            else {
                let known: Vec<&str> = OPTIONS.iter().map(|(n, _, _)| *n).collect();
                return Err(invalid(format!(
                    "unknown option {raw_name:?} (known options: {})",
                    known.join(", ")
                )));
            };
            if let Some(previous) = seen.insert(name, raw_name) {
                return Err(invalid(format!(
                    "option {name} is given twice ({previous:?} and {raw_name:?})"
                )));
            }
            let duration = |v: &str| -> Result<Duration> {
                let d = crate::options::parse_duration(v)
                    .map_err(|e| invalid(format!("option {raw_name}: {}", e.message())))?;
                if d.is_zero() {
                    return Err(invalid(format!("option {raw_name} must be above zero")));
                }
                Ok(d)
            };
            match *name {
                "region" => {
                    if value.is_empty()
                        || !value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                    {
                        return Err(invalid(format!("region {value:?} is not a region name")));
                    }
                    s.region = Some(value.clone());
                }
                "endpoint" => {
                    let parsed = url::Url::parse(value)
                        .map_err(|e| invalid(format!("endpoint {value:?} is not a URL ({e})")))?;
                    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                        return Err(invalid(format!(
                            "endpoint {value:?} must be an http:// or https:// URL with a host"
                        )));
                    }
                    if parsed.query().is_some() || parsed.fragment().is_some() {
                        return Err(invalid(format!(
                            "endpoint {value:?} must not have a query or fragment"
                        )));
                    }
                    s.endpoint = Some(value.trim_end_matches('/').to_string());
                }
                "path_style" => s.path_style = Some(parse_bool(raw_name, value)?),
                "virtual_hosted_style_request" => {
                    s.path_style = Some(!parse_bool(raw_name, value)?)
                }
                "profile" => {
                    if value.is_empty() {
                        return Err(invalid("option profile is empty".into()));
                    }
                    s.profile = Some(value.clone());
                }
                "allow_http" => {
                    parse_bool(raw_name, value)?;
                }
                "timeout" => s.timeout = duration(value)?,
                "connect_timeout" => s.connect_timeout = duration(value)?,
                "conditional_delete" => s.conditional_delete = Some(parse_bool(raw_name, value)?),
                "store_clock_rule" => s.store_clock_rule = parse_bool(raw_name, value)?,
                other => unreachable!("option {other} is listed but not handled"),
            }
        }
        if seen.contains_key("path_style") && seen.contains_key("virtual_hosted_style_request") {
            return Err(Error::invalid(format!(
                "s3://{bucket}: give path_style or virtual_hosted_style_request, not both"
            )));
        }
        Ok(s)
    }
}

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

/// A failed call, classified.
#[derive(Debug)]
enum Failure {
    NotModified,
    NotFound,
    ConditionFailed,
    Error(Error),
}

/// Captures the `Date` header of the response to one call: the store's clock.
#[derive(Debug, Clone, Default)]
struct DateCapture(Arc<Mutex<Option<String>>>);

impl Intercept for DateCapture {
    fn name(&self) -> &'static str {
        "lease::store::s3::DateCapture"
    }

    fn read_after_transmit(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        // Found by comparing names, not `get("date")`: that parses the name into the `http`
        // crate's uninitialised scratch buffer, whose optimized reads valgrind (the C ABI's
        // memcheck run) reports as jumps on uninitialised bytes.
        let date = context
            .response()
            .headers()
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("date"));
        if let Some((_, date)) = date {
            *self.0.lock().unwrap() = Some(date.to_string());
        }
        Ok(())
    }
}

impl DateCapture {
    fn server_now(&self) -> Option<SystemTime> {
        let date = self.0.lock().unwrap().clone()?;
        parse_http_date(&date)
    }
}

/// An HTTP date (`Sun, 22 Nov 2026 08:30:00 GMT`) as a `SystemTime`.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    DateTime::from_str(s.trim(), DateTimeFormat::HttpDate)
        .ok()
        .and_then(|d| SystemTime::try_from(d).ok())
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The error and every error it was caused by, as one line.
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    // One line: the SDK lists the credential providers it tried on lines of their own.
    let text = parts.join(": ");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

impl S3Store {
    /// The store for `bucket` with the options of an `s3://` URL. Checks the options; does
    /// not contact the server (the first call does).
    pub fn open(bucket: &str, options: &[(String, String)]) -> Result<S3Store> {
        let settings = Settings::parse(bucket, options)?;
        let url = super::url::with_query(&format!("s3://{bucket}"), options);
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

    async fn load(&self) -> Result<Loaded> {
        let s = &self.inner.settings;
        let bucket = &self.inner.bucket;
        let env_endpoint = env_nonempty("AWS_ENDPOINT_URL_S3")
            .map(|e| (e, "AWS_ENDPOINT_URL_S3"))
            .or_else(|| env_nonempty("AWS_ENDPOINT_URL").map(|e| (e, "AWS_ENDPOINT_URL")));
        let custom_endpoint = s.endpoint.is_some() || env_endpoint.is_some();

        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(profile) = &s.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = &s.region {
            loader = loader.region(Region::new(region.clone()));
        } else if custom_endpoint {
            // S3-compatible servers mostly ignore the region, but SigV4 needs one. Do not ask
            // IMDS for it: a machine talking to MinIO is rarely an EC2 instance, and the
            // lookup would only add a timeout to the first request.
            use aws_config::meta::region::RegionProviderChain;
            let mut profile = aws_config::profile::ProfileFileRegionProvider::builder();
            if let Some(name) = &s.profile {
                profile = profile.profile_name(name);
            }
            loader = loader.region(
                RegionProviderChain::first_try(
                    aws_config::environment::EnvironmentVariableRegionProvider::new(),
                )
                .or_else(profile.build())
                .or_else(Region::from_static("us-east-1")),
            );
        }
        let sdk_config = loader.load().await;
        let Some(region) = sdk_config.region().cloned() else {
            return Err(Error::store(format!(
                "s3://{bucket}: no AWS region: set AWS_REGION, a region in the AWS profile, or \
                 add ?region=REGION to the URL"
            )));
        };

        // Retries and timeouts. Every store call made by the protocol already runs under the
        // lease's own request timeout (`Timing::request_timeout`, half the renew interval), and
        // the client retries itself: it backs off within the renew interval, reads back before
        // resending a write, and stops at the holder's deadline. SDK retries would only sleep
        // on their own schedule (1 s-scale backoff) inside that timeout, and a retried write
        // that had landed comes back as 412 and costs a read-back anyway. So the SDK makes one
        // attempt per call, and its timeouts are only a backstop for direct users of the
        // store: `timeout` (default 30 s) for a whole call, `connect_timeout` (5 s) to connect.
        // A hung request can never carry a holder past its deadline: the holder's deadline is
        // fixed before the request is sent and the protocol cancels the request at its own
        // timeout.
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(s.connect_timeout)
            .operation_timeout(s.timeout)
            .build();
        let mut config = aws_sdk_s3::config::Builder::from(&sdk_config)
            .region(region.clone())
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts)
            // The protocol's own timeouts bound every call; the SDK's stalled-stream check
            // (a throughput floor after a 5 s grace) adds nothing for records of a few hundred
            // bytes and misfires on slow test proxies.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            // Checksums only where S3 requires them: the default CRC32 headers and trailers
            // are not understood by every S3-compatible server, and a lease record is a few
            // hundred bytes sent over TLS.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .force_path_style(s.path_style.unwrap_or(custom_endpoint));
        if let Some(endpoint) = &s.endpoint {
            config = config.endpoint_url(endpoint);
        }
        let endpoint = match (&s.endpoint, &env_endpoint) {
            (Some(e), _) => e.clone(),
            (None, Some((e, var))) => format!("{e} (from {var})"),
            (None, None) => format!("AWS S3 in {region}"),
        };
        let credentials_hint = if env_nonempty("AWS_ACCESS_KEY_ID").is_some() {
            "the credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".to_string()
        } else if let Some(p) = s.profile.clone().or_else(|| env_nonempty("AWS_PROFILE")) {
            format!("the credentials of AWS profile {p:?}")
        } else {
            "the credentials found by the AWS credential chain (environment, profile, SSO, web \
             identity, instance role)"
                .to_string()
        };
        Ok(Loaded {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            endpoint,
            credentials_hint,
        })
    }

    fn describe(&self, op: Op, key: &str, loaded: &Loaded) -> String {
        format!(
            "cannot {} s3://{}/{key} on {}",
            op.verb(),
            self.inner.bucket,
            loaded.endpoint
        )
    }

    /// Classify a failed call (protocol §2).
    fn classify<E>(
        &self,
        op: Op,
        key: &str,
        conditional: bool,
        loaded: &Loaded,
        err: SdkError<E, HttpResponse>,
    ) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let what = self.describe(op, key, loaded);
        let bucket = &self.inner.bucket;
        let unavailable = |detail: String| {
            Failure::Error(Error::unavailable(format!(
                "{what}: {detail}{}",
                op.unknown_outcome()
            )))
        };
        match &err {
            SdkError::ServiceError(_) | SdkError::ResponseError(_) => {
                let Some(raw) = err.raw_response() else {
                    return unavailable(chain_text(&err));
                };
                let status = raw.status().as_u16();
                let code = err.code().unwrap_or("").to_string();
                let message = err.message().unwrap_or("").to_string();
                let bucket_region = raw.headers().get("x-amz-bucket-region").map(str::to_string);
                let said = match (code.is_empty(), message.is_empty()) {
                    (true, _) => format!("HTTP {status}"),
                    (false, true) => format!("HTTP {status} {code}"),
                    (false, false) => format!("HTTP {status} {code}: {message}"),
                };
                classify_status(ClassifyInput {
                    op,
                    conditional,
                    status,
                    code: &code,
                    said,
                    what: &what,
                    bucket,
                    key,
                    bucket_region,
                    credentials_hint: &loaded.credentials_hint,
                })
            }
            SdkError::TimeoutError(_) => unavailable(format!("timed out ({})", chain_text(&err))),
            SdkError::DispatchFailure(d) => {
                let text = chain_text(&err);
                let lower = text.to_ascii_lowercase();
                if lower.contains("dns error") || lower.contains("failed to lookup address") {
                    Failure::Error(Error::store(format!(
                        "{what}: the endpoint's host name does not resolve ({text}): check the \
                         endpoint (URL option endpoint=, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL) \
                         and DNS"
                    )))
                } else if !d.is_io() && !d.is_timeout() && lower.contains("credential") {
                    Failure::Error(Error::store(format!(
                        "{what}: no usable AWS credentials ({text}): set \
                         AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, choose a profile (AWS_PROFILE \
                         or ?profile=), log in with `aws sso login`, or run with an instance or \
                         pod role"
                    )))
                } else if d.is_timeout() {
                    unavailable(format!("timed out ({text})"))
                } else if d.is_io() {
                    unavailable(format!("connection failed ({text}): is the endpoint up?"))
                } else {
                    unavailable(text)
                }
            }
            SdkError::ConstructionFailure(_) => Failure::Error(Error::invalid(format!(
                "{what}: the request could not be built ({}): check the URL options",
                chain_text(&err)
            ))),
            _ => unavailable(chain_text(&err)),
        }
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

struct ClassifyInput<'a> {
    op: Op,
    conditional: bool,
    status: u16,
    code: &'a str,
    said: String,
    what: &'a str,
    bucket: &'a str,
    key: &'a str,
    bucket_region: Option<String>,
    credentials_hint: &'a str,
}

/// The status-and-code part of the classification, separate so it can be tested on its own.
fn classify_status(i: ClassifyInput<'_>) -> Failure {
    let ClassifyInput {
        op,
        conditional,
        status,
        code,
        said,
        what,
        bucket,
        key,
        bucket_region,
        credentials_hint,
    } = i;
    let store = |hint: String| Failure::Error(Error::store(format!("{what}: {said}: {hint}")));
    let unavailable = || {
        Failure::Error(Error::unavailable(format!(
            "{what}: {said}{}",
            op.unknown_outcome()
        )))
    };
    const THROTTLING: &[&str] = &[
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
        "ConditionalRequestConflict",
        "OperationAborted",
        "IncompleteBody",
    ];
    if code == "NoSuchBucket" {
        return store(format!(
            "bucket {bucket:?} does not exist on this endpoint: check the bucket name, the \
             endpoint and the region"
        ));
    }
    match status {
        304 if op == Op::Get => Failure::NotModified,
        412 if op != Op::Get => Failure::ConditionFailed,
        404 if op == Op::Get => Failure::NotFound,
        // S3 answers 404 NoSuchKey to a write or delete with If-Match on a missing key.
        404 if conditional && matches!(op, Op::Update | Op::Delete) => Failure::ConditionFailed,
        404 => store(format!(
            "the server answered 404 to a write of {key:?}: check the bucket name and the \
             endpoint"
        )),
        409 | 408 | 429 => unavailable(),
        501 => store(
            "the server does not implement this request; it may not support conditional \
             requests (If-Match / If-None-Match), which leases need: run `lease doctor`"
                .into(),
        ),
        500..=599 => unavailable(),
        _ if THROTTLING.contains(&code) => unavailable(),
        301 | 307 | 308 => store(match bucket_region {
            Some(r) => format!(
                "bucket {bucket:?} is in region {r}: add ?region={r} to the URL or set AWS_REGION"
            ),
            None => "the bucket is in another region or needs another endpoint: set the \
                     region (?region= or AWS_REGION)"
                .into(),
        }),
        403 => store(match code {
            "InvalidAccessKeyId" => {
                format!("the access key is not known to this endpoint: check {credentials_hint}")
            }
            "SignatureDoesNotMatch" => {
                format!("the signature does not match: check the secret key of {credentials_hint}")
            }
            "RequestTimeTooSkewed" => "this machine's clock differs from the server's by more \
                                       than 15 minutes: fix the clock (NTP)"
                .into(),
            "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired" => {
                format!("the session token is expired or invalid: refresh {credentials_hint}")
            }
            _ if op == Op::Get => format!(
                "access denied: check that {credentials_hint} allow s3:GetObject on \
                 arn:aws:s3:::{bucket}/{key}; if the key does not exist yet, S3 also answers 403 \
                 unless s3:ListBucket is allowed on arn:aws:s3:::{bucket} (see docs/stores.md)"
            ),
            _ => format!(
                "access denied: check that {credentials_hint} allow {} on \
                 arn:aws:s3:::{bucket}/{key} (and that no bucket policy or KMS key policy \
                 denies it)",
                permission(op)
            ),
        }),
        400 if code == "AuthorizationHeaderMalformed" => store(match bucket_region {
            Some(r) => format!("bucket {bucket:?} is in region {r}: add ?region={r}"),
            None => "the region is probably wrong: set ?region= or AWS_REGION".into(),
        }),
        400 if matches!(code, "ExpiredToken" | "InvalidToken") => store(format!(
            "the session token is expired or invalid: refresh {credentials_hint}"
        )),
        400..=499 => store(
            "the server rejected the request; if it does not support conditional requests \
             (If-Match / If-None-Match), it cannot hold leases: run `lease doctor`"
                .into(),
        ),
        // A 2xx that could not be parsed, a 1xx or 3xx we do not expect: the reply is not
        // trustworthy, so the outcome is unknown.
        _ => unavailable(),
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
                ("aws_endpoint_url", "http://127.0.0.1:9000/"),
                ("AWS_REGION", "eu-west-1"),
                ("virtual_hosted_style_request", "false"),
                ("timeout", "2s"),
            ]),
        )
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s.region.as_deref(), Some("eu-west-1"));
        assert_eq!(s.path_style, Some(true));
        assert_eq!(s.timeout, Duration::from_secs(2));
        assert_eq!(s.conditional_delete, None);
        assert!(s.store_clock_rule);
    }

    #[test]
    fn bad_options_are_invalid_and_named() {
        for (pairs, needle) in [
            (vec![("bogus", "1")], "bogus"),
            (vec![("endpoint", "ftp://x")], "ftp://x"),
            (vec![("endpoint", "not a url")], "not a url"),
            (vec![("path_style", "maybe")], "maybe"),
            (vec![("timeout", "0s")], "timeout"),
            (vec![("region", "eu west")], "eu west"),
            (
                vec![("aws_secret_access_key", "x")],
                "aws_secret_access_key",
            ),
            (vec![("region", "a"), ("aws_region", "b")], "twice"),
            (
                vec![
                    ("path_style", "true"),
                    ("virtual_hosted_style_request", "true"),
                ],
                "not both",
            ),
        ] {
            let pairs: Vec<(&str, &str)> = pairs;
            let e = S3Store::open("bucket", &opts(&pairs)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "{pairs:?}: {e}");
            assert!(e.message().contains(needle), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn url_round_trips_through_the_parser() {
        let store = S3Store::open(
            "bkt",
            &opts(&[("endpoint", "http://127.0.0.1:9000"), ("region", "x-1")]),
        )
        .unwrap();
        assert_eq!(
            store.url(),
            "s3://bkt?endpoint=http://127.0.0.1:9000&region=x-1"
        );
        let parsed = crate::StoreUrl::parse(store.url()).unwrap();
        assert_eq!(
            parsed,
            crate::StoreUrl::S3 {
                bucket: "bkt".into(),
                options: opts(&[("endpoint", "http://127.0.0.1:9000"), ("region", "x-1")])
            }
        );
        assert_eq!(
            store.capabilities().clock_resolution,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn http_dates() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::from_secs(784_111_777)
        );
        assert!(parse_http_date("yesterday").is_none());
    }

    fn kind_of(f: &Failure) -> Option<ErrorKind> {
        match f {
            Failure::Error(e) => Some(e.kind()),
            _ => None,
        }
    }

    fn status(op: Op, conditional: bool, status: u16, code: &str) -> Failure {
        classify_status(ClassifyInput {
            op,
            conditional,
            status,
            code,
            said: format!("HTTP {status} {code}"),
            what: "cannot x s3://b/k on E",
            bucket: "b",
            key: "k",
            bucket_region: None,
            credentials_hint: "the credentials",
        })
    }

    #[test]
    fn classification_follows_the_protocol() {
        use ErrorKind::*;
        assert!(matches!(
            status(Op::Get, false, 304, ""),
            Failure::NotModified
        ));
        assert!(matches!(
            status(Op::Get, false, 404, "NoSuchKey"),
            Failure::NotFound
        ));
        assert!(matches!(
            status(Op::Update, true, 412, "PreconditionFailed"),
            Failure::ConditionFailed
        ));
        assert!(matches!(
            status(Op::Create, true, 412, "PreconditionFailed"),
            Failure::ConditionFailed
        ));
        assert!(matches!(
            status(Op::Update, true, 404, "NoSuchKey"),
            Failure::ConditionFailed
        ));
        assert!(matches!(
            status(Op::Delete, true, 404, "NoSuchKey"),
            Failure::ConditionFailed
        ));
        for (op, st, code, kind) in [
            (Op::Update, 409, "ConditionalRequestConflict", Unavailable),
            (Op::Create, 503, "SlowDown", Unavailable),
            (Op::Get, 500, "InternalError", Unavailable),
            (Op::Update, 429, "", Unavailable),
            (Op::Update, 400, "RequestTimeout", Unavailable),
            (Op::Get, 400, "ThrottlingException", Unavailable),
            (Op::Get, 403, "AccessDenied", Store),
            (Op::Update, 403, "SignatureDoesNotMatch", Store),
            (Op::Get, 404, "NoSuchBucket", Store),
            (Op::Update, 404, "NoSuchBucket", Store),
            (Op::Create, 404, "", Store),
            (Op::Get, 301, "PermanentRedirect", Store),
            (Op::Update, 501, "NotImplemented", Store),
            (Op::Update, 400, "InvalidArgument", Store),
        ] {
            let f = status(op, true, st, code);
            assert_eq!(kind_of(&f), Some(kind), "{op:?} {st} {code}: {f:?}");
            if let Failure::Error(e) = &f {
                assert!(e.message().contains("s3://b/k on E"), "{e}");
            }
        }
        let Failure::Error(e) = status(Op::Update, true, 403, "AccessDenied") else {
            panic!()
        };
        assert!(
            e.message().contains("s3:PutObject") && e.message().contains("arn:aws:s3:::b/k"),
            "{e}"
        );
        let Failure::Error(e) = status(Op::Get, false, 403, "AccessDenied") else {
            panic!()
        };
        assert!(e.message().contains("s3:ListBucket"), "{e}");
    }
}
