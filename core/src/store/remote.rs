//! What the GCS and Azure stores share besides HTTP: their URL options, and OAuth 2 access
//! tokens (fetched, cached, refreshed before they expire).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use serde::Deserialize;

use super::http::{encode_component, HttpClient, Method, Request};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

/// One option a store URL accepts: `(name, aliases, meaning)`.
pub type OptionSpec = (&'static str, &'static [&'static str], &'static str);

/// The options of a URL, checked against `known`: canonical name → (name as written, value).
/// Unknown options, options given twice, and options that would put a secret in the URL are
/// `Invalid` errors naming them.
pub(crate) fn parse_options(
    store: &str,
    options: &[(String, String)],
    known: &[OptionSpec],
    secrets: &[&str],
    where_secrets_go: &str,
) -> Result<BTreeMap<&'static str, (String, String)>> {
    let mut seen: BTreeMap<&'static str, (String, String)> = BTreeMap::new();
    for (raw_name, value) in options {
        let lower = raw_name.to_ascii_lowercase();
        let invalid = |why: String| Error::invalid(format!("{store}: {why}"));
        if secrets.contains(&lower.as_str()) {
            return Err(invalid(format!(
                "option {raw_name:?} is not accepted: credentials do not belong in a lease URL \
                 (it is shown in messages and exported as LEASE_URL); {where_secrets_go}"
            )));
        }
        let Some((name, _, _)) = known
            .iter()
            .find(|(n, aliases, _)| *n == lower || aliases.contains(&lower.as_str()))
        else {
            let names: Vec<&str> = known.iter().map(|(n, _, _)| *n).collect();
            return Err(invalid(format!(
                "unknown option {raw_name:?} (known options: {})",
                names.join(", ")
            )));
        };
        if let Some((previous, _)) = seen.insert(name, (raw_name.clone(), value.clone())) {
            return Err(invalid(format!(
                "option {name} is given twice ({previous:?} and {raw_name:?})"
            )));
        }
    }
    Ok(seen)
}

pub(crate) fn parse_bool(store: &str, name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!(
            "{store}: option {name}={value:?}: expected true or false"
        ))),
    }
}

/// A duration option above zero.
pub(crate) fn parse_timeout(store: &str, name: &str, value: &str) -> Result<Duration> {
    let d = crate::options::parse_duration(value)
        .map_err(|e| Error::invalid(format!("{store}: option {name}: {}", e.message())))?;
    if d.is_zero() {
        return Err(Error::invalid(format!(
            "{store}: option {name} must be above zero"
        )));
    }
    Ok(d)
}

/// An `http://` or `https://` URL with a host and nothing after the path, without its
/// trailing `/`.
pub(crate) fn parse_endpoint(store: &str, value: &str) -> Result<String> {
    let invalid = |why: String| Error::invalid(format!("{store}: {why}"));
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
    Ok(value.trim_end_matches('/').to_string())
}

pub(crate) fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// An access token and when it stops working.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub value: String,
    pub expires: Option<Instant>,
}

/// The token a credential last fetched, refreshed before it expires. Concurrent callers wait
/// for one fetch.
#[derive(Debug, Default)]
pub(crate) struct TokenCache {
    cached: tokio::sync::Mutex<Option<(Token, Duration)>>,
}

impl TokenCache {
    pub async fn get<F, Fut>(&self, fetch: F) -> Result<String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Token>>,
    {
        let mut cached = self.cached.lock().await;
        let now = SystemClock.now();
        if let Some((token, lifetime)) = cached.as_ref() {
            // Refresh when less than five minutes (or half the lifetime, for short-lived
            // tokens) are left: a request must never carry a token that expires on the way.
            let margin = (*lifetime / 2).min(Duration::from_secs(300));
            match token.expires {
                None => return Ok(token.value.clone()),
                Some(at) if at.saturating_duration_since(now) > margin => {
                    return Ok(token.value.clone())
                }
                _ => {}
            }
        }
        let token = fetch().await?;
        let lifetime = token
            .expires
            .map_or(Duration::MAX, |at| at.saturating_duration_since(now));
        let value = token.value.clone();
        *cached = Some((token, lifetime));
        Ok(value)
    }
}

/// The answer of an OAuth 2 token endpoint (and of the cloud metadata servers, which answer
/// the same shape; Azure's send `expires_in` as a string).
#[derive(Debug, Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

/// Read a token endpoint's answer. `what` names the credential for messages.
pub(crate) fn token_from_answer(
    what: &str,
    status: u16,
    body: Option<&Bytes>,
    now: Instant,
) -> Result<Token> {
    let text = body
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    let short: String = text.chars().take(400).collect();
    if !(200..300).contains(&status) {
        let error = Error::store(format!(
            "{what}: the token endpoint answered HTTP {status}: {}",
            short.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
        // A token endpoint that is down or throttling is worth another attempt.
        return Err(if status == 429 || status >= 500 {
            Error::unavailable(error.message().to_string())
        } else {
            error
        });
    }
    let answer: TokenAnswer = serde_json::from_str(&text).map_err(|e| {
        Error::store(format!(
            "{what}: the token endpoint's answer is not a token ({e})"
        ))
    })?;
    let expires_in = answer.expires_in.and_then(|v| match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    });
    Ok(Token {
        value: answer.access_token,
        expires: expires_in.map(|s| now + Duration::from_secs(s)),
    })
}

/// `POST url` with a form body; the answer read as a token.
pub(crate) async fn fetch_token_form(
    http: &HttpClient,
    what: &str,
    url: &str,
    form: &[(&str, &str)],
) -> Result<Token> {
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", encode_component(k), encode_component(v)))
        .collect();
    let request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(super::http::Body::from(body.join("&")))
        .map_err(|e| Error::invalid(format!("{what}: bad token endpoint {url:?} ({e})")))?;
    fetch_token(http, what, url, request).await
}

/// Send a request to a token endpoint (or metadata server) and read the token.
pub(crate) async fn fetch_token(
    http: &HttpClient,
    what: &str,
    url: &str,
    request: Request<super::http::Body>,
) -> Result<Token> {
    let now = SystemClock.now();
    let response = http
        .send(request, Some(64 * 1024))
        .await
        .map_err(|e| e.into_error(super::Op::Get, &format!("{what}: cannot get a token"), url))?;
    token_from_answer(what, response.status, response.body.as_ref(), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[OptionSpec] = &[("endpoint", &["endpoint_url"], ""), ("timeout", &[], "")];

    #[test]
    fn options() {
        let o = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let got = parse_options(
            "gs://b",
            &o(&[("ENDPOINT_URL", "http://x"), ("timeout", "2s")]),
            KNOWN,
            &["token"],
            "",
        )
        .unwrap();
        assert_eq!(got["endpoint"].1, "http://x");
        for (pairs, needle) in [
            (o(&[("colour", "x")]), "colour"),
            (o(&[("token", "x")]), "credentials do not belong"),
            (o(&[("endpoint", "a"), ("endpoint_url", "b")]), "twice"),
        ] {
            let e = parse_options("gs://b", &pairs, KNOWN, &["token"], "").unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Invalid);
            assert!(e.message().contains(needle), "{e}");
        }
        assert!(parse_endpoint("s", "ftp://x").is_err());
        assert_eq!(
            parse_endpoint("s", "http://h:1/a/").unwrap(),
            "http://h:1/a"
        );
        assert!(parse_timeout("s", "t", "0s").is_err());
        assert!(parse_bool("s", "b", "perhaps").is_err());
    }

    #[test]
    fn token_answers() {
        let now = SystemClock.now();
        let t = token_from_answer(
            "x",
            200,
            Some(&Bytes::from_static(
                br#"{"access_token":"abc","expires_in":3599,"token_type":"Bearer"}"#,
            )),
            now,
        )
        .unwrap();
        assert_eq!(t.value, "abc");
        assert_eq!(t.expires, Some(now + Duration::from_secs(3599)));
        let t = token_from_answer(
            "x",
            200,
            Some(&Bytes::from_static(
                br#"{"access_token":"abc","expires_in":"86399"}"#,
            )),
            now,
        )
        .unwrap();
        assert_eq!(t.expires, Some(now + Duration::from_secs(86399)));
        let e =
            token_from_answer("cred", 401, Some(&Bytes::from_static(b"denied")), now).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Store);
        assert!(e.message().contains("cred") && e.message().contains("401"));
        let e = token_from_answer("cred", 503, None, now).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn token_cache_refreshes_before_expiry() {
        let cache = TokenCache::default();
        let now = SystemClock.now();
        let a = cache
            .get(|| async {
                Ok(Token {
                    value: "one".into(),
                    expires: Some(now + Duration::from_secs(3600)),
                })
            })
            .await
            .unwrap();
        let b = cache
            .get(|| async { panic!("a valid token is not fetched again") })
            .await
            .unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("one", "one"));
        // A token with no time left is replaced.
        let cache = TokenCache::default();
        cache
            .get(|| async {
                Ok(Token {
                    value: "expired".into(),
                    expires: Some(now),
                })
            })
            .await
            .unwrap();
        let c = cache
            .get(|| async {
                Ok(Token {
                    value: "fresh".into(),
                    expires: None,
                })
            })
            .await
            .unwrap();
        assert_eq!(c, "fresh");
    }
}
