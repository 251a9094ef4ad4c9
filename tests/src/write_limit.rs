//! A store's per-object request limit, played by the proxy ([`FaultProxy::set_write_limit`]):
//! the emulators (moto, MinIO, fake-gcs-server, Azurite) accept any rate on one object, the
//! clouds do not. Each object gets a token bucket (`per_s` a second, up to `burst`); a request
//! the limit counts that finds the bucket empty is answered the way that store answers beyond
//! its limit, without being forwarded (so it never lands).
//!
//! What the stores document, and what is played:
//! - **S3** (`Limit::S3`): "Your application can achieve at least 3,500 PUT/COPY/POST/DELETE or
//!   5,500 GET/HEAD requests per second per partitioned Amazon S3 prefix" and beyond it S3
//!   answers `503 Slow Down` (AWS, "Best practices design patterns: optimizing Amazon S3
//!   performance", docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html;
//!   the error `SlowDown`, "Please reduce your request rate.", in the S3 API reference's "Error
//!   responses" list). On one key AWS names no figure; its knowledge-center article on 5xx
//!   errors (repost.aws/knowledge-center/http-5xx-errors-s3) says that in some scenarios
//!   "rapid concurrent PUT requests to the same key" get a 503. The issue (24) measures about 15
//!   conditional writes a second on one key: that is the default rate played here. Writes
//!   (PUT, POST, DELETE) count; reads do not.
//! - **GCS** (`Limit::Gcs`): "Maximum rate of writes to the same object name: One write per
//!   second" (cloud.google.com/storage/quotas), and cloud.google.com/storage/docs/request-rate:
//!   a bucket's initial ~1,000 object writes a second, with "a smaller limit for repeated writes
//!   to the same object name"; beyond it `429 Too Many Requests`, reason `rateLimitExceeded`.
//!   Writes count (an upload names its object in the multipart body; a delete in the path).
//! - **Azure** (`Limit::Azure`): "Target request rate for a single blob: Up to 500 requests per
//!   second" (learn.microsoft.com/azure/storage/blobs/scalability-targets), and "When your
//!   application reaches the limit of what a partition can handle for your workload, Azure
//!   Storage begins to return error code 503 (Server Busy)". Every request counts, reads too.
//!
//! The limit is per object (an S3 prefix's 3,500 writes a second are far above what one lock's
//! participants send, so only the object's limit is played).

use std::collections::HashMap;
use std::time::Instant;

use crate::cloud_identity::percent_decode;

/// Which store's limit, and answer, to play.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// 503 `SlowDown` to writes beyond the rate.
    S3,
    /// 429 `rateLimitExceeded` to writes beyond the rate.
    Gcs,
    /// 503 `ServerBusy` to any request beyond the rate.
    Azure,
}

impl Limit {
    /// The per-object rate each store documents (S3: the measured figure).
    pub fn documented_rate(self) -> f64 {
        match self {
            Limit::S3 => 15.0,
            Limit::Gcs => 1.0,
            Limit::Azure => 500.0,
        }
    }

    pub fn parse(name: &str) -> Option<Limit> {
        match name {
            "s3" => Some(Limit::S3),
            "gcs" => Some(Limit::Gcs),
            "azure" => Some(Limit::Azure),
            _ => None,
        }
    }

    /// The status this store answers beyond its limit.
    pub fn status(self) -> u16 {
        match self {
            Limit::Gcs => 429,
            Limit::S3 | Limit::Azure => 503,
        }
    }

    /// Whether a request with this method counts against the object's limit.
    pub fn counts(self, method: &str) -> bool {
        match self {
            Limit::S3 | Limit::Gcs => matches!(method, "PUT" | "POST" | "DELETE"),
            Limit::Azure => true,
        }
    }

    /// The reply the store sends beyond its limit, as its documentation shows it.
    pub fn reply(self) -> Vec<u8> {
        let (status, reason, content_type, extra, body) = match self {
            Limit::S3 => (
                503,
                "Slow Down",
                "application/xml",
                "",
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                 <Message>Please reduce your request rate.</Message>\
                 <RequestId>write-limit</RequestId></Error>"
                    .to_string(),
            ),
            Limit::Gcs => (
                429,
                "Too Many Requests",
                "application/json; charset=UTF-8",
                "",
                serde_json::json!({"error": {
                    "code": 429,
                    "message": "The object exceeded the rate limit for object mutation \
                                operations (create, update, and delete). Please reduce your \
                                request rate.",
                    "errors": [{"domain": "usageLimits", "reason": "rateLimitExceeded",
                                "message": "rate limit exceeded (played by the test proxy)"}]
                }})
                .to_string(),
            ),
            Limit::Azure => (
                503,
                "The server is busy.",
                "application/xml",
                "x-ms-error-code: ServerBusy\r\n",
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code>\
                 <Message>The server is busy.</Message></Error>"
                    .to_string(),
            ),
        };
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n{extra}\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// The object a request addresses: its path for S3 and Azure (`/bucket/key`,
/// `/account/container/blob`); for GCS, the bucket and the `name` of an upload's metadata (the
/// multipart body) or the object of a `/storage/v1/b/B/o/KEY` path.
pub fn object_of(target: &str, body: &[u8]) -> String {
    let path = target.split('?').next().unwrap_or(target);
    if let Some(rest) = path.strip_prefix("/upload/storage/v1/b/") {
        let bucket = rest.split('/').next().unwrap_or("");
        let text = String::from_utf8_lossy(body);
        // The metadata part is JSON: `{"name":"KEY",…}` (serde_json writes no spaces).
        let name = text
            .split_once("\"name\":\"")
            .and_then(|(_, after)| after.split_once('"'))
            .map_or("", |(name, _)| name);
        return format!("gcs:{bucket}/{name}");
    }
    if let Some(rest) = path.strip_prefix("/storage/v1/b/") {
        if let Some((bucket, object)) = rest.split_once("/o/") {
            return format!("gcs:{bucket}/{}", percent_decode(object));
        }
    }
    path.to_string()
}

/// A limit in force: the store played, its rate and burst, and each object's bucket.
#[derive(Debug)]
pub struct Limiter {
    pub limit: Limit,
    pub per_s: f64,
    pub burst: f64,
    buckets: HashMap<String, (f64, Instant)>,
    /// Requests answered with the store's throttling reply.
    pub throttled: u64,
}

impl Limiter {
    /// `per_s` requests a second on one object, up to `burst` at once (at least one).
    pub fn new(limit: Limit, per_s: f64, burst: f64) -> Limiter {
        assert!(per_s > 0.0, "a write limit is a positive rate");
        Limiter {
            limit,
            per_s,
            burst: burst.max(1.0),
            buckets: HashMap::new(),
            throttled: 0,
        }
    }

    /// Whether a request to `object` made `now` goes through (and takes a token), or is
    /// throttled.
    pub fn admit(&mut self, object: &str, now: Instant) -> bool {
        let (per_s, burst) = (self.per_s, self.burst);
        let (tokens, last) = self
            .buckets
            .entry(object.to_string())
            .or_insert((burst, now));
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * per_s).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            self.throttled += 1;
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // one real instant as the base of the buckets' arithmetic
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_admits_its_burst_then_its_rate_per_object() {
        let t0 = Instant::now();
        let mut l = Limiter::new(Limit::Gcs, 1.0, 1.0);
        assert!(l.admit("gcs:b/k", t0));
        assert!(!l.admit("gcs:b/k", t0 + Duration::from_millis(500)));
        // Another object has its own budget.
        assert!(l.admit("gcs:b/other", t0 + Duration::from_millis(500)));
        assert!(l.admit("gcs:b/k", t0 + Duration::from_millis(1001)));
        assert!(!l.admit("gcs:b/k", t0 + Duration::from_millis(1002)));
        assert_eq!(l.throttled, 2);
        let mut s3 = Limiter::new(Limit::S3, 15.0, 15.0);
        let admitted = (0..30).filter(|_| s3.admit("/b/k", t0)).count();
        assert_eq!(admitted, 15, "a burst of 15, then 503s");
        assert!(s3.admit("/b/k", t0 + Duration::from_millis(67)));
    }

    #[test]
    fn the_object_is_found_where_each_store_names_it() {
        assert_eq!(
            object_of("/bucket/locks/a?x-id=PutObject", b""),
            "/bucket/locks/a"
        );
        assert_eq!(
            object_of("/devstoreaccount1/c/locks/a?comp=x", b""),
            "/devstoreaccount1/c/locks/a"
        );
        let body = b"--b\r\ncontent-type: application/json\r\n\r\n{\"name\":\"locks/a\",\"metadata\":{}}\r\n--b--";
        assert_eq!(
            object_of(
                "/upload/storage/v1/b/bkt/o?uploadType=multipart&ifGenerationMatch=0",
                body
            ),
            "gcs:bkt/locks/a"
        );
        assert_eq!(
            object_of("/storage/v1/b/bkt/o/locks%2Fa?ifGenerationMatch=3", b""),
            "gcs:bkt/locks/a"
        );
    }

    #[test]
    fn each_store_answers_its_own_way() {
        let s3 = String::from_utf8(Limit::S3.reply()).unwrap();
        assert!(s3.starts_with("HTTP/1.1 503 ") && s3.contains("<Code>SlowDown</Code>"));
        let gcs = String::from_utf8(Limit::Gcs.reply()).unwrap();
        assert!(gcs.starts_with("HTTP/1.1 429 ") && gcs.contains("rateLimitExceeded"));
        let az = String::from_utf8(Limit::Azure.reply()).unwrap();
        assert!(az.starts_with("HTTP/1.1 503 ") && az.contains("x-ms-error-code: ServerBusy"));
        assert!(
            Limit::Azure.counts("GET") && !Limit::S3.counts("GET") && Limit::Gcs.counts("POST")
        );
    }
}
