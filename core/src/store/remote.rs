//! What the GCS and Azure stores share besides HTTP: their URL options, and OAuth 2 access
//! tokens (fetched, cached, refreshed before they expire).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use serde::Deserialize;

use super::http::{encode_component, HttpClient, Method, Request, SendError};
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
    let d = crate::duration::parse_duration(value)
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

/// How long a refresh may take while the current token still works (at most a tenth of the
/// time it has left): past that, the current token is used and the next request tries again.
const REFRESH_BUDGET: Duration = Duration::from_millis(300);

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
        // While the token we have still works, a refresh gets a short budget: a metadata server
        // that blips takes its retries (over a second) or, hung, the whole request timeout, and
        // the request the token is for must not wait for that; the next request tries again
        // (issue 29: a holder with a 6 s ttl lost its lease this way during a blip).
        let valid_for = cached
            .as_ref()
            .and_then(|(token, _)| token.expires)
            .map(|at| at.saturating_duration_since(now))
            .filter(|left| !left.is_zero());
        let fetched = match valid_for {
            Some(left) => {
                let budget = (left / 10).min(REFRESH_BUDGET);
                tokio::select! {
                    fetched = fetch() => fetched,
                    _ = SystemClock.sleep(budget) => Err(Error::unavailable(format!(
                        "the token endpoint did not answer within {budget:?}"
                    ))),
                }
            }
            None => fetch().await,
        };
        let token = match fetched {
            Ok(token) => token,
            // The endpoint is out for a moment (a metadata server's blip) while the token we
            // have still works: use it until it expires (issue 29).
            Err(e) => match cached.as_ref() {
                Some((token, _)) if token.expires.is_some_and(|at| at > now) => {
                    tracing::warn!(
                        "could not refresh an access token, using the current one until it \
                         expires: {e}"
                    );
                    return Ok(token.value.clone());
                }
                _ => return Err(e),
            },
        };
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
    /// When the token expires: seconds since the Unix epoch (a number or a string), or
    /// `MM/DD/YYYY hh:mm:ss AM +00:00` from App Service's older API. App Service and Azure
    /// Functions answer with this alone (learn.microsoft.com/azure/app-service/
    /// overview-managed-identity: "expires_on: The timespan when the access token expires").
    #[serde(default)]
    expires_on: Option<serde_json::Value>,
}

/// `expires_on` as a time: seconds since the epoch, or App Service's older
/// `MM/DD/YYYY hh:mm:ss AM|PM +00:00`.
fn parse_expires_on(v: &serde_json::Value) -> Option<std::time::SystemTime> {
    let secs = match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse::<u64>().ok().or_else(|| {
            // 09/14/2017 00:00:00 PM +00:00
            let mut it = s.split_whitespace();
            let date: Vec<u64> = it
                .next()?
                .split('/')
                .filter_map(|x| x.parse().ok())
                .collect();
            let time: Vec<u64> = it
                .next()?
                .split(':')
                .filter_map(|x| x.parse().ok())
                .collect();
            let ampm = it.next()?;
            let offset = it.next().unwrap_or("+00:00");
            if date.len() != 3 || time.len() != 3 || offset != "+00:00" {
                return None;
            }
            let (m, d, y) = (date[0], date[1], date[2]);
            let mut h = time[0] % 12;
            if ampm.eq_ignore_ascii_case("PM") {
                h += 12;
            }
            // Days from the civil date (Howard Hinnant's algorithm).
            let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
            let era = y / 400;
            let yoe = y - era * 400;
            let doy = (153 * m + 2) / 5 + d - 1;
            let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
            let days = era * 146_097 + doe - 719_468;
            Some(days * 86_400 + h * 3600 + time[1] * 60 + time[2])
        }),
        _ => None,
    }?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
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
    let expires = match (
        expires_in,
        answer.expires_on.as_ref().and_then(parse_expires_on),
    ) {
        (Some(s), _) => Some(now + Duration::from_secs(s)),
        // Only `expires_on` (App Service, Azure Functions): a time on the wall clock.
        (None, Some(at)) => Some(
            now + at
                .duration_since(SystemClock.wall())
                .unwrap_or(Duration::ZERO),
        ),
        (None, None) => None,
    };
    Ok(Token {
        value: answer.access_token,
        expires,
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
    let response = http.send(request, Some(64 * 1024)).await.map_err(|e| {
        e.into_error(
            &format!("{what}: cannot get a token"),
            url,
            "the request can be retried",
        )
    })?;
    token_from_answer(what, response.status, response.body.as_ref(), now)
}

/// Attempts of [`fetch_token_retrying`], and the first pause (doubled after each attempt).
pub(crate) const METADATA_ATTEMPTS: u32 = 4;
const METADATA_FIRST_PAUSE: Duration = Duration::from_millis(200);

/// A metadata server's token (GCE's, Azure's IMDS, App Service's identity endpoint): answers
/// that say "not now" are retried with exponential backoff (`METADATA_ATTEMPTS` attempts,
/// about 1.4 s): 408, 429, 5xx, a timeout or a reset, and the statuses in `also` (IMDS: 404
/// and 410 while an identity is being provisioned; learn.microsoft.com/entra/identity/
/// managed-identities-azure-resources/how-to-use-vm-token#error-handling: "retry with
/// exponential backoff" on 404, 410, 429 and 5xx). A transient failure that outlasts the
/// retries stays `Unavailable` (the caller's own retries go on); a server that refuses the
/// connection or does not resolve is not there at all, and is not retried.
pub(crate) async fn fetch_token_retrying(
    http: &HttpClient,
    what: &str,
    url: &str,
    build: impl Fn() -> Result<Request<super::http::Body>>,
    also: &[u16],
) -> Result<Token> {
    let mut pause = METADATA_FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        let now = SystemClock.now();
        let error = match http.send(build()?, Some(64 * 1024)).await {
            Ok(r) if also.contains(&r.status) || r.status == 408 => Error::unavailable(format!(
                "{what}: the metadata server answered HTTP {} (not ready yet)",
                r.status
            )),
            Ok(r) => match token_from_answer(what, r.status, r.body.as_ref(), now) {
                Err(e) if e.kind() == crate::ErrorKind::Unavailable => e,
                other => return other,
            },
            Err(e @ SendError::Unknown(_)) => e.into_error(
                &format!("{what}: cannot get a token"),
                url,
                "the request can be retried",
            ),
            Err(e) => {
                return Err(e.into_error(
                    &format!("{what}: cannot get a token"),
                    url,
                    "the request can be retried",
                ))
            }
        };
        if attempt >= METADATA_ATTEMPTS {
            return Err(error.context(format!("after {attempt} attempts")));
        }
        tracing::debug!("{error}; trying again in {pause:?}");
        SystemClock.sleep(pause).await;
        pause *= 2;
        attempt += 1;
    }
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

    /// App Service and Azure Functions answer with `expires_on` alone (issue 29): the token
    /// expires then, and is refreshed five minutes before (it was kept forever).
    #[test]
    fn a_token_with_only_expires_on_expires() {
        let now = SystemClock.now();
        let wall = SystemClock.wall();
        let in_an_hour = wall
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        for body in [
            format!(
                r#"{{"access_token":"t","expires_on":"{in_an_hour}","resource":"r","token_type":"Bearer"}}"#
            ),
            format!(r#"{{"access_token":"t","expires_on":{in_an_hour}}}"#),
        ] {
            let token = token_from_answer("w", 200, Some(&Bytes::from(body.clone())), now).unwrap();
            let left = token.expires.expect(&body).saturating_duration_since(now);
            assert!(
                left > Duration::from_secs(3590) && left <= Duration::from_secs(3600),
                "{body}: {left:?}"
            );
        }
        // App Service's older API: "MM/DD/YYYY hh:mm:ss AM|PM +00:00".
        let at = parse_expires_on(&serde_json::json!("09/14/2017 03:04:05 PM +00:00")).unwrap();
        assert_eq!(
            at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            1_505_401_445
        );
        assert_eq!(parse_expires_on(&serde_json::json!("soon")), None);
        // expires_in wins where both are given (IMDS sends both).
        let both = r#"{"access_token":"t","expires_in":"60","expires_on":"1"}"#;
        let token = token_from_answer("w", 200, Some(&Bytes::from(both)), now).unwrap();
        assert_eq!(token.expires, Some(now + Duration::from_secs(60)));
    }

    /// A cache holding an hour's token "old" with a minute left: due for a refresh (five
    /// minutes before it expires) but still valid.
    fn due_for_refresh(now: Instant) -> TokenCache {
        TokenCache {
            cached: tokio::sync::Mutex::new(Some((
                Token {
                    value: "old".into(),
                    expires: Some(now + Duration::from_secs(60)),
                },
                Duration::from_secs(3600),
            ))),
        }
    }

    /// A metadata server that blips while the cached token is still valid: the cached token
    /// is used (issue 29); once it has expired, the failure is the caller's.
    #[tokio::test]
    async fn a_failed_refresh_uses_the_token_until_it_expires() {
        let now = SystemClock.now();
        let cache = due_for_refresh(now);
        let blip = || async { Err(Error::unavailable("HTTP 503 from the metadata server")) };
        assert_eq!(cache.get(blip).await.unwrap(), "old");
        let expired = TokenCache::default();
        expired
            .get(|| async {
                Ok(Token {
                    value: "gone".into(),
                    expires: Some(now),
                })
            })
            .await
            .unwrap();
        let e = expired.get(blip).await.unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Unavailable);
    }

    /// A refresh that does not answer (a hung metadata server, or one whose retries take
    /// seconds) while the current token still works: the current token is used after
    /// `REFRESH_BUDGET`, not after the fetch gives up (issue 29).
    #[tokio::test]
    async fn a_slow_refresh_does_not_hold_up_a_request_while_the_token_works() {
        let now = SystemClock.now();
        let cache = due_for_refresh(now);
        let hung = || std::future::pending::<Result<Token>>();
        assert_eq!(cache.get(hung).await.unwrap(), "old");
    }
}
