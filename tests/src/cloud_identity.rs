//! Stand-ins for the clouds' token endpoints and for a store that checks the tokens, on
//! 127.0.0.1 (issue 29, items 2 and 3). The emulators take no tokens: fake-gcs-server ignores
//! `Authorization`, and Azurite takes bearer tokens only over HTTPS with `--oauth basic`. So:
//!
//! - [`TokenServer`] plays one metadata or identity endpoint as its documentation describes it
//!   (the request it requires, the answer's fields), issues short-lived tokens, and can blip
//!   (answer "not now" for a while) the way the documentation says it may.
//! - [`gcs_requires_bearer`] and [`azure_requires_bearer`] are proxy intercepts
//!   ([`crate::proxy::Intercept`]) that refuse a request whose bearer token is not one the
//!   server issued or has expired, with the service's documented 401.
//! - [`azure_shared_key`] is a proxy rewrite ([`crate::proxy::Rewrite`]) that forwards an
//!   accepted request to Azurite signed with the account's Shared Key.
//!
//! What is real: the lease client, its token requests and cache, every blob operation and its
//! conditions (executed by fake-gcs-server and Azurite). What is played: the token endpoints,
//! and the service's check of the token (here: issued by the played endpoint and not expired;
//! Entra ID tokens are JWTs whose signature and audience the real service also checks).

#![allow(clippy::disallowed_methods)] // a test harness in real time

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use base64::Engine;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::proxy::{read_head, reply, Intercept, Request, Rewrite};

/// Which endpoint a [`TokenServer`] plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavor {
    /// App Service and Azure Functions: `GET {IDENTITY_ENDPOINT}?resource=…&api-version=2019-08-01`
    /// with the header `X-IDENTITY-HEADER: {IDENTITY_HEADER}`; the answer carries
    /// `access_token`, `expires_on` (seconds since the epoch, as a string), `resource`,
    /// `token_type` and `client_id`, and no `expires_in` (learn.microsoft.com/azure/app-service/
    /// overview-managed-identity, "REST endpoint reference").
    AppService,
    /// GCE's metadata server: `GET /computeMetadata/v1/instance/service-accounts/default/token`
    /// with `Metadata-Flavor: Google` (refused with 403 without it); the answer is
    /// `{"access_token", "expires_in", "token_type"}` (cloud.google.com/compute/docs/metadata/
    /// querying-metadata; cloud.google.com/compute/docs/access/authenticate-workloads).
    Gce,
    /// Azure's instance metadata service: `GET /metadata/identity/oauth2/token?api-version=…&
    /// resource=…` with `Metadata: true` (refused with 400 without it); the answer carries
    /// `access_token`, `expires_in`, `expires_on`, `not_before`, `resource`, `token_type`, the
    /// numbers as strings (learn.microsoft.com/entra/identity/managed-identities-azure-resources/
    /// how-to-use-vm-token, "Get a token using HTTP").
    Imds,
}

/// One "not now" answer of a blipping endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blip {
    /// Answer this status. GCE's metadata server may answer 503 for a moment (its docs:
    /// transient errors, retry with exponential backoff); IMDS answers 404 and 410 while the
    /// identity is being provisioned or IMDS updated, 429 when throttled, 5xx on transient
    /// faults, and says to retry them with exponential backoff ("Error handling" and "Retry
    /// guidance" of how-to-use-vm-token).
    Status(u16),
    /// Close the connection without answering (a reset: the request timed out on the way).
    Drop,
}

/// The tokens a [`TokenServer`] issued, with when each expires (seconds since the epoch).
#[derive(Debug, Clone, Default)]
pub struct Tokens(Arc<Mutex<HashMap<String, u64>>>);

impl Tokens {
    /// Whether `token` was issued and has not expired: what the service checks.
    pub fn valid(&self, token: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .get(token)
            .is_some_and(|&expires_on| unix_secs() < expires_on)
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[derive(Default)]
struct Counters {
    issued: u64,
    refused: u64,
    /// Answers cycle through these until the instant.
    blip: Option<(Vec<Blip>, Instant)>,
    cycle: usize,
}

/// A token endpoint on 127.0.0.1 playing `Flavor`, issuing tokens that live `lifetime`.
pub struct TokenServer {
    addr: SocketAddr,
    flavor: Flavor,
    tokens: Tokens,
    counters: Arc<Mutex<Counters>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The secret App Service puts in `IDENTITY_HEADER`.
const IDENTITY_HEADER: &str = "fixture-identity-header";

impl TokenServer {
    pub async fn start(flavor: Flavor, lifetime: Duration) -> std::io::Result<TokenServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let tokens = Tokens::default();
        let counters = Arc::new(Mutex::new(Counters::default()));
        let (f, t, c) = (flavor.clone(), tokens.clone(), counters.clone());
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (f, t, c) = (f.clone(), t.clone(), c.clone());
                tokio::spawn(async move {
                    let _ = serve(conn, f, lifetime, t, c).await;
                });
            }
        });
        Ok(TokenServer {
            addr,
            flavor,
            tokens,
            counters,
            task,
        })
    }

    /// The environment that points a client at this endpoint, as the platform sets it
    /// (`AZURE_POD_IDENTITY_AUTHORITY_HOST` is the Azure SDKs' override of IMDS's address).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let base = format!("http://{}", self.addr);
        match self.flavor {
            Flavor::AppService => vec![
                ("IDENTITY_ENDPOINT", format!("{base}/msi/token")),
                ("IDENTITY_HEADER", IDENTITY_HEADER.to_string()),
            ],
            Flavor::Gce => vec![("GCE_METADATA_HOST", self.addr.to_string())],
            Flavor::Imds => vec![("AZURE_POD_IDENTITY_AUTHORITY_HOST", base)],
        }
    }

    /// Answer "not now" for `duration`, cycling through `answers`.
    pub fn blip(&self, answers: &[Blip], duration: Duration) {
        let mut c = self.counters.lock().unwrap();
        c.blip = Some((answers.to_vec(), Instant::now() + duration));
        c.cycle = 0;
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.counters.lock().unwrap().issued
    }

    /// Requests answered "not now".
    pub fn refused(&self) -> u64 {
        self.counters.lock().unwrap().refused
    }

    pub fn tokens(&self) -> Tokens {
        self.tokens.clone()
    }
}

async fn serve(
    conn: TcpStream,
    flavor: Flavor,
    lifetime: Duration,
    tokens: Tokens,
    counters: Arc<Mutex<Counters>>,
) -> std::io::Result<()> {
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r);
    while let Some(head) = read_head(&mut r).await? {
        let target = head
            .first_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let blip = {
            let mut c = counters.lock().unwrap();
            match c.blip.clone() {
                Some((answers, until)) if Instant::now() < until => {
                    let b = answers[c.cycle % answers.len()];
                    c.cycle += 1;
                    c.refused += 1;
                    Some(b)
                }
                _ => None,
            }
        };
        let answer = match blip {
            Some(Blip::Drop) => return Ok(()),
            Some(Blip::Status(status)) => reply(
                status,
                "application/json",
                &[],
                r#"{"error":"temporarily_unavailable","error_description":"played by the fixture"}"#,
            ),
            None => answer(&flavor, &target, &head, lifetime, &tokens, &counters),
        };
        w.write_all(&answer).await?;
    }
    Ok(())
}

fn answer(
    flavor: &Flavor,
    target: &str,
    head: &crate::proxy::Head,
    lifetime: Duration,
    tokens: &Tokens,
    counters: &Mutex<Counters>,
) -> Vec<u8> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let has = |k: &str| query.split('&').any(|p| p.starts_with(&format!("{k}=")));
    let refused = match flavor {
        Flavor::AppService if path != "/msi/token" => Some(404),
        Flavor::AppService if head.header("x-identity-header") != Some(IDENTITY_HEADER) => {
            Some(400)
        }
        Flavor::AppService if !has("resource") || !has("api-version") => Some(400),
        Flavor::Gce if path != "/computeMetadata/v1/instance/service-accounts/default/token" => {
            Some(404)
        }
        Flavor::Gce if head.header("metadata-flavor") != Some("Google") => Some(403),
        Flavor::Imds if path != "/metadata/identity/oauth2/token" => Some(404),
        Flavor::Imds if head.header("metadata") != Some("true") => Some(400),
        Flavor::Imds if !has("resource") || !has("api-version") => Some(400),
        _ => None,
    };
    if let Some(status) = refused {
        return reply(status, "text/plain", &[], "refused by the fixture");
    }
    let n = {
        let mut c = counters.lock().unwrap();
        c.issued += 1;
        c.issued
    };
    let token = format!("fixture-token-{n}-{}", std::process::id());
    let now = unix_secs();
    // Whole seconds, as the services give them: at least `lifetime` from now.
    let secs = lifetime.as_secs_f64().ceil() as u64;
    let expires_on = now + secs;
    tokens.0.lock().unwrap().insert(token.clone(), expires_on);
    let resource = "https://storage.azure.com/";
    let body = match flavor {
        Flavor::AppService => serde_json::json!({
            "access_token": token, "expires_on": expires_on.to_string(),
            "resource": resource, "token_type": "Bearer",
            "client_id": "00000000-0000-0000-0000-000000000000",
        }),
        Flavor::Gce => serde_json::json!({
            "access_token": token, "expires_in": secs, "token_type": "Bearer",
        }),
        Flavor::Imds => serde_json::json!({
            "access_token": token, "refresh_token": "", "expires_in": secs.to_string(),
            "expires_on": expires_on.to_string(), "not_before": now.to_string(),
            "resource": resource, "token_type": "Bearer",
        }),
    };
    let extra: &[(&str, &str)] = match flavor {
        Flavor::Gce => &[("Metadata-Flavor", "Google")],
        _ => &[],
    };
    reply(200, "application/json", extra, &body.to_string())
}

fn bearer(req: &Request) -> Option<&str> {
    req.header("authorization")?.strip_prefix("Bearer ")
}

/// GCS refuses a request whose OAuth token is missing, unknown or expired with 401
/// `Invalid Credentials` (cloud.google.com/storage/docs/json_api/v1/status-codes, "401
/// Unauthorized": "the access token ... has expired"). fake-gcs-server ignores
/// `Authorization`; this plays the check for tokens of `tokens`.
pub fn gcs_requires_bearer(tokens: Tokens) -> Intercept {
    Arc::new(move |req: &Request, upstream: Option<u16>| {
        if upstream.is_some() || bearer(req).is_some_and(|t| tokens.valid(t)) {
            return None;
        }
        let body = r#"{"error":{"code":401,"message":"Invalid Credentials","errors":[{"message":"Invalid Credentials","domain":"global","reason":"authError","locationType":"header","location":"Authorization"}]}}"#;
        Some(reply(
            401,
            "application/json",
            &[(
                "WWW-Authenticate",
                "Bearer realm=\"https://accounts.google.com/\"",
            )],
            body,
        ))
    })
}

/// Azure Storage refuses a request whose Entra ID token is missing or expired with 401
/// `InvalidAuthenticationInfo` ("Server failed to authenticate the request. Please refer to
/// the information in the www-authenticate header.": learn.microsoft.com/rest/api/
/// storageservices/common-rest-api-error-codes; the reason in `<AuthenticationErrorDetail>`,
/// for an expired token "Lifetime validation failed. The token is expired."), with a
/// `WWW-Authenticate: Bearer` challenge (learn.microsoft.com/rest/api/storageservices/
/// authorize-with-azure-active-directory). Azurite over HTTP takes no bearer tokens; this
/// plays the check for tokens of `tokens`, and [`azure_shared_key`] forwards what it accepts.
pub fn azure_requires_bearer(tokens: Tokens) -> Intercept {
    Arc::new(move |req: &Request, upstream: Option<u16>| {
        if upstream.is_some() {
            return None;
        }
        let (code, detail) = match bearer(req) {
            Some(t) if tokens.valid(t) => return None,
            Some(_) => (
                "InvalidAuthenticationInfo",
                "Lifetime validation failed. The token is expired.",
            ),
            None => ("NoAuthenticationInformation", "No bearer token"),
        };
        let body = format!(
            "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code>\
             <Message>Server failed to authenticate the request. Please refer to the information \
             in the www-authenticate header.\nRequestId:00000000-0000-0000-0000-000000000000\n\
             Time:{}</Message><AuthenticationErrorDetail>{detail}</AuthenticationErrorDetail></Error>",
            httpdate::fmt_http_date(SystemTime::now())
        );
        Some(reply(
            401,
            "application/xml",
            &[
                ("x-ms-error-code", code),
                (
                    "WWW-Authenticate",
                    "Bearer authorization_uri=https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/oauth2/authorize resource_id=https://storage.azure.com",
                ),
            ],
            &body,
        ))
    })
}

/// Forward a request to Azurite signed with `account`'s Shared Key in place of its bearer
/// token: the request the service would execute once the token is accepted, in the form
/// Azurite checks. Signed as "Authorize with Shared Key" describes it (learn.microsoft.com/
/// rest/api/storageservices/authorize-with-shared-key, version 2015-02-21 and later), written
/// here from the documentation rather than taken from the client under test.
pub fn azure_shared_key(account: &str, key_b64: &str) -> Rewrite {
    let account = account.to_string();
    let key = base64::engine::general_purpose::STANDARD
        .decode(key_b64)
        .expect("a base64 account key");
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key);
    Arc::new(move |req: &Request| {
        let mut headers: Vec<(String, String)> = req
            .headers
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
            .cloned()
            .collect();
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map_or("", |(_, v)| v.as_str())
        };
        // Content-Length is empty when zero.
        let length = match get("content-length") {
            "0" => "",
            n => n,
        };
        let mut to_sign = format!("{}\n", req.method);
        for h in ["content-encoding", "content-language"] {
            to_sign.push_str(get(h));
            to_sign.push('\n');
        }
        to_sign.push_str(length);
        to_sign.push('\n');
        for h in [
            "content-md5",
            "content-type",
            "date",
            "if-modified-since",
            "if-match",
            "if-none-match",
            "if-unmodified-since",
            "range",
        ] {
            to_sign.push_str(get(h));
            to_sign.push('\n');
        }
        // Canonicalized headers: the x-ms- ones, lower-cased, sorted, "name:value\n".
        let mut ms: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
            .filter(|(k, _)| k.starts_with("x-ms-"))
            .collect();
        ms.sort();
        for (k, v) in ms {
            to_sign.push_str(&format!("{k}:{v}\n"));
        }
        // Canonicalized resource: /account/path, then each query parameter, lower-cased name,
        // decoded value, sorted, "\nname:value".
        let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
        to_sign.push_str(&format!("/{account}{path}"));
        let mut params: Vec<(String, String)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_ascii_lowercase(), percent_decode(v))
            })
            .collect();
        params.sort();
        for (k, v) in params {
            to_sign.push_str(&format!("\n{k}:{v}"));
        }
        let signature = base64::engine::general_purpose::STANDARD
            .encode(hmac::sign(&key, to_sign.as_bytes()).as_ref());
        headers.push((
            "Authorization".into(),
            format!("SharedKey {account}:{signature}"),
        ));
        headers
    })
}

/// `%XX` escapes decoded (form bodies here; a GCS object path in `write_limit`).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| u8::from_str_radix(&s[i + 1..i + 3], 16).ok())
            .flatten();
        match hex {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
