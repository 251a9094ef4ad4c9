//! Classifying a failed call (protocol §2): condition failed, unknown outcome
//! (`Unavailable`, read back), or a store error naming what to check.

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use super::{permission, Loaded, S3Store};
use crate::error::Error;
use crate::store::Op;

/// A failed call, classified.
#[derive(Debug)]
pub(super) enum Failure {
    NotModified,
    NotFound,
    ConditionFailed,
    Error(Error),
}

/// The error and every error it was caused by, as one line.
pub(super) fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
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
    /// Classify a failed call (protocol §2).
    pub(super) fn classify<E>(
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
                "{what}: {detail} ({})",
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
                match classify_status(ClassifyInput {
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
                }) {
                    Failure::Error(e) => Failure::Error(e.with_http_status(status)),
                    answer => answer,
                }
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
}

pub(super) struct ClassifyInput<'a> {
    pub(super) op: Op,
    pub(super) conditional: bool,
    pub(super) status: u16,
    pub(super) code: &'a str,
    pub(super) said: String,
    pub(super) what: &'a str,
    pub(super) bucket: &'a str,
    pub(super) key: &'a str,
    pub(super) bucket_region: Option<String>,
    pub(super) credentials_hint: &'a str,
}

/// The status-and-code part of the classification, separate so it can be tested on its own.
pub(super) fn classify_status(i: ClassifyInput<'_>) -> Failure {
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
            "{what}: {said} ({})",
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
