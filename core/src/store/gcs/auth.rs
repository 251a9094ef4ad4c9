//! Google credentials: the standard chain of application default credentials, as Google's
//! own libraries search it, and the OAuth 2 access tokens each kind gives.
//!
//! 1. `anonymous=true` in the URL, or an emulator (`STORAGE_EMULATOR_HOST`, an `http://`
//!    endpoint): no credentials.
//! 2. `service_account_path=FILE` in the URL: that key file.
//! 3. `GOOGLE_OAUTH_ACCESS_TOKEN`: a ready access token (as `gcloud auth print-access-token`
//!    prints), used as it is.
//! 4. `GOOGLE_APPLICATION_CREDENTIALS`: a service-account key file or an authorized-user file.
//! 5. gcloud's application default credentials
//!    (`$CLOUDSDK_CONFIG/application_default_credentials.json`, by default under
//!    `~/.config/gcloud/`, written by `gcloud auth application-default login`).
//! 6. The metadata server of GCE, GKE (Workload Identity), Cloud Run and Cloud Functions
//!    (`GCE_METADATA_HOST` overrides its address).
//!
//! Service-account keys are signed here (RS256, aws-lc-rs) and exchanged at the key's
//! `token_uri`; authorized-user files are refreshed at theirs. `external_account` files
//! (workload identity federation) are refused with a message saying so.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use base64::Engine;
use serde::Deserialize;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::store::http::{HttpClient, Method, Request};
use crate::store::remote::{env_nonempty, fetch_token_form, fetch_token_retrying, Token};

/// The scope every token is asked for: read and write objects.
const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
const DEFAULT_METADATA_HOST: &str = "169.254.169.254";

/// Where a request's `Authorization` comes from.
pub(crate) enum Credential {
    Anonymous {
        why: String,
    },
    AccessToken {
        token: String,
    },
    ServiceAccount {
        email: String,
        key_id: Option<String>,
        key: Arc<RsaKeyPair>,
        token_uri: String,
        source: String,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
        source: String,
    },
    Metadata {
        host: String,
    },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A credentials file as Google writes them.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
    quota_project_id: Option<String>,
}

/// What the chain found: the credential and the project to bill requests to, if the
/// credentials file names one (`quota_project_id`, sent as `x-goog-user-project`).
pub(crate) struct Found {
    pub credential: Credential,
    pub quota_project: Option<String>,
}

impl Credential {
    /// Walk the chain. `anonymous`: the URL's option or the emulator default (with why).
    pub fn find(service_account_path: Option<&Path>, anonymous: Option<String>) -> Result<Found> {
        let found = |credential| Found {
            credential,
            quota_project: None,
        };
        if let Some(why) = anonymous {
            return Ok(found(Credential::Anonymous { why }));
        }
        if let Some(path) = service_account_path {
            return Credential::from_file(path, "the URL's service_account_path");
        }
        if let Some(token) = env_nonempty("GOOGLE_OAUTH_ACCESS_TOKEN") {
            return Ok(found(Credential::AccessToken {
                token: token.trim().to_string(),
            }));
        }
        if let Some(path) = env_nonempty("GOOGLE_APPLICATION_CREDENTIALS") {
            return Credential::from_file(Path::new(&path), "GOOGLE_APPLICATION_CREDENTIALS");
        }
        if let Some(path) = gcloud_adc_path().filter(|p| p.is_file()) {
            return Credential::from_file(&path, "gcloud's application default credentials");
        }
        let host =
            env_nonempty("GCE_METADATA_HOST").unwrap_or_else(|| DEFAULT_METADATA_HOST.to_string());
        Ok(found(Credential::Metadata { host }))
    }

    fn from_file(path: &Path, named_by: &str) -> Result<Found> {
        let source = format!("{} ({named_by})", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::store(format!(
                "cannot read the Google credentials file {source}: {e}"
            ))
        })?;
        let file: KeyFile = serde_json::from_str(&text).map_err(|e| {
            Error::store(format!(
                "the Google credentials file {source} is not a credentials file ({e})"
            ))
        })?;
        let missing = |field: &str| {
            Error::store(format!(
                "the Google credentials file {source} has no {field:?}"
            ))
        };
        let credential = match file.kind.as_deref() {
            Some("service_account") => {
                let pem = file.private_key.ok_or_else(|| missing("private_key"))?;
                let key = rsa_key_from_pem(&pem).map_err(|why| {
                    Error::store(format!(
                        "the private key in the Google credentials file {source} is not usable: \
                         {why}"
                    ))
                })?;
                Credential::ServiceAccount {
                    email: file.client_email.ok_or_else(|| missing("client_email"))?,
                    key_id: file.private_key_id,
                    key: Arc::new(key),
                    token_uri: file
                        .token_uri
                        .unwrap_or_else(|| DEFAULT_TOKEN_URI.to_string()),
                    source,
                }
            }
            Some("authorized_user") => Credential::AuthorizedUser {
                client_id: file.client_id.ok_or_else(|| missing("client_id"))?,
                client_secret: file.client_secret.ok_or_else(|| missing("client_secret"))?,
                refresh_token: file.refresh_token.ok_or_else(|| missing("refresh_token"))?,
                token_uri: file
                    .token_uri
                    .unwrap_or_else(|| DEFAULT_TOKEN_URI.to_string()),
                source,
            },
            other => {
                return Err(Error::store(format!(
                    "the Google credentials file {source} is of type {}: lease supports \
                     service_account and authorized_user files, GOOGLE_OAUTH_ACCESS_TOKEN and \
                     the metadata server (for workload identity federation, exchange the \
                     token first and set GOOGLE_OAUTH_ACCESS_TOKEN)",
                    other.map_or("(none)".to_string(), |k| format!("{k:?}"))
                )))
            }
        };
        Ok(Found {
            credential,
            quota_project: file.quota_project_id,
        })
    }

    /// For messages: which credentials, from where.
    pub fn describe(&self) -> String {
        match self {
            Credential::Anonymous { why } => format!("no credentials ({why})"),
            Credential::AccessToken { .. } => {
                "the access token in GOOGLE_OAUTH_ACCESS_TOKEN".to_string()
            }
            Credential::ServiceAccount { email, source, .. } => {
                format!("the service account {email} from {source}")
            }
            Credential::AuthorizedUser { source, .. } => {
                format!("the user credentials in {source}")
            }
            Credential::Metadata { host } => {
                format!("the metadata server's service account (at {host})")
            }
        }
    }

    /// A fresh access token (`None`: send no `Authorization`).
    pub async fn fetch(&self, http: &HttpClient) -> Result<Option<Token>> {
        let what = format!("Google credentials: {}", self.describe());
        match self {
            Credential::Anonymous { .. } => Ok(None),
            Credential::AccessToken { token } => Ok(Some(Token {
                value: token.clone(),
                expires: None,
            })),
            Credential::ServiceAccount {
                email,
                key_id,
                key,
                token_uri,
                ..
            } => {
                let assertion = service_account_jwt(email, key_id.as_deref(), key, token_uri)?;
                fetch_token_form(
                    http,
                    &what,
                    token_uri,
                    &[
                        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                        ("assertion", &assertion),
                    ],
                )
                .await
                .map(Some)
            }
            Credential::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
                ..
            } => fetch_token_form(
                http,
                &what,
                token_uri,
                &[
                    ("grant_type", "refresh_token"),
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                    ("refresh_token", refresh_token),
                ],
            )
            .await
            .map(Some),
            Credential::Metadata { host } => {
                let url = if host.starts_with("http://") || host.starts_with("https://") {
                    host.trim_end_matches('/').to_string()
                } else {
                    format!("http://{host}")
                };
                let url =
                    format!("{url}/computeMetadata/v1/instance/service-accounts/default/token");
                let build = || {
                    Request::builder()
                        .method(Method::GET)
                        .uri(&url)
                        .header("metadata-flavor", "Google")
                        .body(Default::default())
                        .map_err(|e| {
                            Error::invalid(format!("bad metadata server address {host:?} ({e})"))
                        })
                };
                fetch_token_retrying(http, &what, &url, build, &[])
                    .await
                    .map(Some)
                    .map_err(|e| {
                        // A metadata server that is there but says "not now" (503, a timeout)
                        // is a blip: the caller retries, and a cached token is used meanwhile.
                        if e.kind() == crate::ErrorKind::Unavailable
                            && !e.message().contains("connection failed")
                        {
                            return e;
                        }
                        Error::store(format!(
                            "no Google credentials found: set GOOGLE_APPLICATION_CREDENTIALS to a \
                             service-account key file, run `gcloud auth application-default \
                             login`, set GOOGLE_OAUTH_ACCESS_TOKEN, or run on Google Cloud (the \
                             metadata server did not give a token: {})",
                            e.message()
                        ))
                    })
            }
        }
    }
}

/// gcloud's application default credentials file.
fn gcloud_adc_path() -> Option<PathBuf> {
    let dir = match env_nonempty("CLOUDSDK_CONFIG") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env_nonempty("HOME")?).join(".config/gcloud"),
    };
    Some(dir.join("application_default_credentials.json"))
}

/// A PKCS#8 RSA key in PEM (`-----BEGIN PRIVATE KEY-----`), as in service-account files.
pub(crate) fn rsa_key_from_pem(pem: &str) -> std::result::Result<RsaKeyPair, String> {
    let body: String = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    if !pem.contains("BEGIN PRIVATE KEY") {
        return Err("expected a PKCS#8 key (-----BEGIN PRIVATE KEY-----)".into());
    }
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.as_bytes())
        .map_err(|e| format!("bad base64 ({e})"))?;
    RsaKeyPair::from_pkcs8(&der).map_err(|e| format!("not an RSA key ({e})"))
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The signed JWT a service account exchanges for an access token (RFC 7523).
pub(crate) fn service_account_jwt(
    email: &str,
    key_id: Option<&str>,
    key: &RsaKeyPair,
    token_uri: &str,
) -> Result<String> {
    let now = SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut header = serde_json::json!({ "alg": "RS256", "typ": "JWT" });
    if let Some(kid) = key_id {
        header["kid"] = kid.into();
    }
    let claims = serde_json::json!({
        "iss": email,
        "scope": SCOPE,
        "aud": token_uri,
        "iat": now,
        "exp": now + 3600,
    });
    let signing_input = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let mut signature = vec![0u8; key.public_modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| Error::internal("signing the service-account token request failed"))?;
    Ok(format!("{signing_input}.{}", b64url(&signature)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::{KeyPair, UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

    pub(crate) fn test_key_pem() -> (String, RsaKeyPair) {
        let key = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der = key.as_der().unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
        for chunk in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(chunk).unwrap());
            pem.push('\n');
        }
        pem.push_str("-----END PRIVATE KEY-----\n");
        (pem, key)
    }

    #[test]
    fn service_account_tokens_are_signed_jwts() {
        let (pem, _) = test_key_pem();
        let key = rsa_key_from_pem(&pem).unwrap();
        let jwt = service_account_jwt(
            "sa@p.iam.gserviceaccount.com",
            Some("kid1"),
            &key,
            DEFAULT_TOKEN_URI,
        )
        .unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let d = |s: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .unwrap()
        };
        let header: serde_json::Value = serde_json::from_slice(&d(parts[0])).unwrap();
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], "kid1");
        let claims: serde_json::Value = serde_json::from_slice(&d(parts[1])).unwrap();
        assert_eq!(claims["iss"], "sa@p.iam.gserviceaccount.com");
        assert_eq!(claims["aud"], DEFAULT_TOKEN_URI);
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(
            claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
            3600
        );
        let public = UnparsedPublicKey::new(
            &RSA_PKCS1_2048_8192_SHA256,
            key.public_key().as_ref().to_vec(),
        );
        public
            .verify(
                format!("{}.{}", parts[0], parts[1]).as_bytes(),
                &d(parts[2]),
            )
            .expect("the signature verifies with the key's public half");
    }

    #[test]
    fn bad_key_files_are_store_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text, needle) in [
            ("notjson", "{", "not a credentials file"),
            (
                "external",
                r#"{"type":"external_account"}"#,
                "external_account",
            ),
            (
                "nokey",
                r#"{"type":"service_account","client_email":"x"}"#,
                "private_key",
            ),
            (
                "badkey",
                r#"{"type":"service_account","client_email":"x","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"}"#,
                "not usable",
            ),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let e = Credential::from_file(&path, "test").err().unwrap();
            assert_eq!(e.kind(), crate::ErrorKind::Store, "{name}");
            assert!(
                e.message().contains(needle) && e.message().contains(name),
                "{name}: {e}"
            );
        }
        let e = Credential::from_file(&dir.path().join("missing"), "test")
            .err()
            .unwrap();
        assert!(e.message().contains("cannot read"), "{e}");
    }
}
