//! The HTTP client the GCS and Azure stores share, and what both need around it.
//!
//! hyper 1 over rustls with aws-lc-rs and the system's root certificates: the stack the S3 SDK
//! already brings, so the two stores add almost nothing to a build that has S3. One attempt per
//! call, no hidden retry: the lease protocol retries itself and reads back before resending a
//! write (protocol §2), and a retried conditional write that had landed would come back as a
//! failed condition. HTTP/1.1 only, one request per connection at a time, so request counts are
//! what the code says and concurrent writes race on separate connections.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, CONTENT_LENGTH, DATE};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::Op;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

pub(crate) use http::{Method, Request};

/// A request body.
pub(crate) type Body = Full<Bytes>;

/// A connection pool with a timeout per call.
#[derive(Clone)]
pub(crate) struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    timeout: Duration,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An answer with its body read (or only measured, when larger than the caller's limit).
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    /// `None` when the body is larger than the limit the caller gave: it was never read.
    pub body: Option<Bytes>,
    pub size: u64,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Date` header: the store's clock when it answered.
    pub fn date(&self) -> Option<SystemTime> {
        self.headers
            .get(DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_http_date)
    }

    /// The body as text, for error messages (cut to a few hundred characters).
    pub fn text(&self) -> String {
        let body = self.body.as_deref().unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(600)]);
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// Why a call got no HTTP answer.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The host name does not resolve: a configuration error.
    Dns(String),
    /// The server's certificate was refused: a configuration error.
    Tls(String),
    /// No connection (refused, reset while connecting): nothing was sent.
    Connect(String),
    /// Timed out, or the connection broke after the request was (perhaps) sent: the outcome of
    /// a write is unknown.
    Unknown(String),
}

impl SendError {
    /// The library's error for it; `what` says which call (`cannot read gs://b/k on …`).
    pub fn into_error(self, op: Op, what: &str, endpoint_hint: &str) -> Error {
        match self {
            SendError::Dns(e) => Error::store(format!(
                "{what}: the host name does not resolve ({e}): check {endpoint_hint} and DNS"
            )),
            SendError::Tls(e) => Error::store(format!(
                "{what}: the server's TLS certificate was refused ({e}): check {endpoint_hint}"
            )),
            SendError::Connect(e) => Error::unavailable(format!(
                "{what}: connection failed ({e}): is the endpoint up?"
            )),
            SendError::Unknown(e) => {
                Error::unavailable(format!("{what}: {e}{}", op.unknown_outcome()))
            }
        }
    }
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
    parts
        .join(": ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

impl HttpClient {
    /// A client with the system's root certificates. `timeout` bounds a whole call (sending,
    /// waiting, reading the body); the lease protocol's own request timeout is shorter and
    /// cancels calls itself.
    pub fn new(connect_timeout: Duration, timeout: Duration) -> Result<HttpClient> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)
            .map_err(|e| {
                Error::store(format!(
                    "no usable root certificates on this machine ({e}): install the CA \
                     certificates package"
                ))
            })?
            .https_or_http()
            .enable_http1()
            .wrap_connector({
                let mut http = HttpConnector::new();
                http.enforce_http(false);
                http.set_connect_timeout(Some(connect_timeout));
                http.set_nodelay(true);
                http
            });
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(HttpClient { client, timeout })
    }

    /// Send one request and read the answer. A body larger than `max_len` is not read (its
    /// size comes from `Content-Length`, or from counting when there is none).
    pub async fn send(
        &self,
        request: Request<Body>,
        max_len: Option<u64>,
    ) -> std::result::Result<Response, SendError> {
        let call = self.call(request, max_len);
        tokio::select! {
            r = call => r,
            _ = SystemClock.sleep(self.timeout) => Err(SendError::Unknown(format!(
                "no answer within {}", crate::options::format_duration(self.timeout)
            ))),
        }
    }

    async fn call(
        &self,
        request: Request<Body>,
        max_len: Option<u64>,
    ) -> std::result::Result<Response, SendError> {
        let response = self.client.request(request).await.map_err(|e| {
            let text = chain_text(&e);
            let lower = text.to_ascii_lowercase();
            if lower.contains("dns error") || lower.contains("failed to lookup address") {
                SendError::Dns(text)
            } else if lower.contains("certificate") {
                SendError::Tls(text)
            } else if e.is_connect() {
                SendError::Connect(text)
            } else {
                SendError::Unknown(text)
            }
        })?;
        let (parts, mut body) = response.into_parts();
        let length = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let status = parts.status.as_u16();
        if let (Some(max), Some(len)) = (max_len, length) {
            if len > max && (200..300).contains(&status) {
                // Dropping the body closes the connection without reading it.
                return Ok(Response {
                    status,
                    headers: parts.headers,
                    body: None,
                    size: len,
                });
            }
        }
        let mut buf = BytesMut::with_capacity(length.unwrap_or(0).min(1 << 20) as usize);
        let mut size = 0u64;
        let mut too_large = false;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                SendError::Unknown(format!("the reply was cut short ({})", chain_text(&e)))
            })?;
            if let Ok(data) = frame.into_data() {
                size += data.len() as u64;
                if max_len.is_some_and(|max| size > max) && (200..300).contains(&status) {
                    // No Content-Length (a chunked reply): count the rest, keep none of it.
                    too_large = true;
                    buf = BytesMut::new();
                }
                if !too_large {
                    buf.extend_from_slice(&data);
                }
            }
        }
        if let Some(expected) = length {
            if expected != size {
                return Err(SendError::Unknown(format!(
                    "the reply was cut short ({size} bytes of {expected})"
                )));
            }
        }
        Ok(Response {
            status,
            headers: parts.headers,
            body: (!too_large).then(|| buf.freeze()),
            size,
        })
    }
}

/// Percent-encode everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`):
/// safe in a path segment and in a query value. `/` is encoded too; see [`encode_path`].
pub(crate) fn encode_component(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

#[cfg_attr(not(feature = "azure"), allow(dead_code))] // only Azure signs dates and paths
/// [`encode_component`] of each `/`-separated segment: a key as a URL path.
pub(crate) fn encode_path(key: &str) -> String {
    key.split('/')
        .map(encode_component)
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg_attr(not(feature = "azure"), allow(dead_code))] // only Azure signs dates and paths
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg_attr(not(feature = "azure"), allow(dead_code))] // only Azure signs dates and paths
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// An HTTP date in the one format servers send (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110
/// IMF-fixdate) as a `SystemTime`.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let mut it = s.split_whitespace();
    let _weekday = it.next()?;
    let day: u32 = it.next()?.parse().ok()?;
    let month_name = it.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u32 + 1;
    let year: i64 = it.next()?.parse().ok()?;
    let hms: Vec<u64> = it
        .next()?
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    if it.next()? != "GMT" || it.next().is_some() || hms.len() != 3 {
        return None;
    }
    if !(1..=31).contains(&day) || year < 1970 || hms[0] > 23 || hms[1] > 59 || hms[2] > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let secs = days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2];
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg_attr(not(feature = "azure"), allow(dead_code))] // only Azure signs dates and paths
/// `t` as an HTTP date (whole seconds, GMT).
pub fn format_http_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[m as usize - 1],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_round_trip() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::from_secs(784_111_777)
        );
        assert_eq!(format_http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        let t = parse_http_date("Tue, 24 Nov 2026 02:45:14 GMT").unwrap();
        assert_eq!(format_http_date(t), "Tue, 24 Nov 2026 02:45:14 GMT");
        for day in 0..800u64 {
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + day * 86_417);
            assert_eq!(parse_http_date(&format_http_date(t)), Some(t));
        }
        for bad in [
            "",
            "yesterday",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
        ] {
            assert!(parse_http_date(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn encoding() {
        assert_eq!(
            encode_component("a b/c%+é~._-"),
            "a%20b%2Fc%25%2B%C3%A9~._-"
        );
        assert_eq!(encode_path("locks/a b/c"), "locks/a%20b/c");
    }
}
