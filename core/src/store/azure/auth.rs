//! Azure credentials, searched in this order (the first that is configured wins):
//!
//! 1. `anonymous=true` in the URL: no credentials (a public container: reads only).
//! 2. `AZURE_STORAGE_CONNECTION_STRING`: `AccountName=…;AccountKey=…` (shared key),
//!    `SharedAccessSignature=…` (SAS), `BlobEndpoint=…`, or `UseDevelopmentStorage=true`
//!    (Azurite). Its account must be the URL's.
//! 3. `AZURE_STORAGE_SAS_TOKEN`: a SAS token (`sv=…&sig=…`).
//! 4. `AZURE_STORAGE_KEY` (or `AZURE_STORAGE_ACCOUNT_KEY`): the account key, for the account in
//!    `AZURE_STORAGE_ACCOUNT` if set (which must be the URL's).
//! 5. `use_emulator=true` with the account `devstoreaccount1`: Azurite's published key.
//! 6. The Azure identity chain, as `DefaultAzureCredential` orders it: a service principal
//!    with a secret (`AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`), workload
//!    identity (`AZURE_FEDERATED_TOKEN_FILE` with the tenant and client ids, as AKS sets
//!    them), managed identity (App Service's `IDENTITY_ENDPOINT` + `IDENTITY_HEADER`, else the
//!    instance metadata service), then the Azure CLI (`az account get-access-token`). Tokens
//!    are for `https://storage.azure.com/`; the principal needs a data role on the container
//!    (Storage Blob Data Contributor).

use std::fmt;
use std::path::PathBuf;

use aws_lc_rs::hmac;
use base64::Engine;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::store::http::{HttpClient, Method, Request};
use crate::store::remote::{env_nonempty, fetch_token_form, fetch_token_retrying, Token};

/// Azurite's development account and its published key (not a secret: it is in Microsoft's
/// documentation and in every Azure SDK).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// Azurite's default blob address for an account.
pub fn dev_endpoint(account: &str) -> String {
    format!("http://127.0.0.1:10000/{account}")
}

const RESOURCE: &str = "https://storage.azure.com/";
const SCOPE: &str = "https://storage.azure.com/.default";
const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";
const IMDS: &str = "http://169.254.169.254/metadata/identity/oauth2/token";

/// Where a request's authorization comes from.
pub(crate) enum Credential {
    Anonymous,
    SharedKey {
        account: String,
        /// Boxed: an HMAC key is large, the other credentials are small.
        key: Box<hmac::Key>,
        source: String,
    },
    Sas {
        /// The token without a leading `?`.
        query: String,
        source: String,
    },
    /// An Entra ID (Azure AD) token from the identity chain.
    Identity(Identity),
}

/// The identity chain's credentials.
#[derive(Debug, Clone)]
pub(crate) enum Identity {
    ClientSecret {
        tenant: String,
        client_id: String,
        secret: String,
        authority: String,
    },
    Workload {
        tenant: String,
        client_id: String,
        token_file: PathBuf,
        authority: String,
    },
    AppService {
        endpoint: String,
        header: String,
        client_id: Option<String>,
    },
    /// The instance metadata service, then the Azure CLI.
    ManagedIdentityOrCli {
        client_id: Option<String>,
        imds: String,
    },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A connection string's fields (`Key=Value;…`, keys case-insensitive).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionString {
    pub account: Option<String>,
    pub key: Option<String>,
    pub sas: Option<String>,
    pub blob_endpoint: Option<String>,
    pub protocol: Option<String>,
    pub suffix: Option<String>,
    pub development: bool,
}

impl ConnectionString {
    pub fn parse(s: &str) -> Result<ConnectionString> {
        let mut c = ConnectionString::default();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(Error::invalid(
                    "AZURE_STORAGE_CONNECTION_STRING: expected Key=Value pairs separated by ';'",
                ));
            };
            let v = v.trim().to_string();
            match k.trim().to_ascii_lowercase().as_str() {
                "accountname" => c.account = Some(v),
                "accountkey" => c.key = Some(v),
                "sharedaccesssignature" => c.sas = Some(v.trim_start_matches('?').to_string()),
                "blobendpoint" => c.blob_endpoint = Some(v.trim_end_matches('/').to_string()),
                "defaultendpointsprotocol" => c.protocol = Some(v),
                "endpointsuffix" => c.suffix = Some(v),
                "usedevelopmentstorage" => c.development = v.eq_ignore_ascii_case("true"),
                // Other services' endpoints and unknown keys do not concern blobs.
                _ => {}
            }
        }
        if c.development {
            c.account.get_or_insert_with(|| DEV_ACCOUNT.to_string());
            c.key.get_or_insert_with(|| DEV_KEY.to_string());
            c.blob_endpoint
                .get_or_insert_with(|| dev_endpoint(DEV_ACCOUNT));
        }
        Ok(c)
    }

    /// The blob endpoint it names, if any: `BlobEndpoint`, or built from the protocol and
    /// suffix.
    pub fn endpoint(&self) -> Option<String> {
        if let Some(e) = &self.blob_endpoint {
            return Some(e.clone());
        }
        let account = self.account.as_ref()?;
        let suffix = self.suffix.as_ref()?;
        let protocol = self.protocol.as_deref().unwrap_or("https");
        Some(format!("{protocol}://{account}.blob.{suffix}"))
    }
}

fn shared_key(account: &str, key_b64: &str, source: &str) -> Result<Credential> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(key_b64.trim())
        .map_err(|e| {
            Error::store(format!(
                "the account key in {source} is not base64 ({e}): copy it again from the \
                 portal (Access keys) or `az storage account keys list`"
            ))
        })?;
    Ok(Credential::SharedKey {
        account: account.to_string(),
        key: Box::new(hmac::Key::new(hmac::HMAC_SHA256, &key)),
        source: source.to_string(),
    })
}

/// What the chain found, and the endpoint a connection string names (if any).
pub(crate) struct Found {
    pub credential: Credential,
    pub endpoint: Option<String>,
}

impl Credential {
    /// Walk the chain for `account`.
    pub fn find(account: &str, anonymous: bool, use_emulator: bool) -> Result<Found> {
        let found = |credential| Found {
            credential,
            endpoint: None,
        };
        if anonymous {
            return Ok(found(Credential::Anonymous));
        }
        if let Some(text) = env_nonempty("AZURE_STORAGE_CONNECTION_STRING") {
            let c = ConnectionString::parse(&text)?;
            let source = "AZURE_STORAGE_CONNECTION_STRING";
            if let Some(other) = c.account.as_deref().filter(|a| *a != account) {
                return Err(Error::store(format!(
                    "{source} is for the storage account {other:?}, but the URL names {account:?}"
                )));
            }
            let endpoint = c.endpoint();
            let credential = if let Some(key) = &c.key {
                shared_key(account, key, source)?
            } else if let Some(sas) = &c.sas {
                Credential::Sas {
                    query: sas.clone(),
                    source: source.to_string(),
                }
            } else {
                return Err(Error::store(format!(
                    "{source} has neither AccountKey nor SharedAccessSignature"
                )));
            };
            return Ok(Found {
                credential,
                endpoint,
            });
        }
        if let Some(sas) = env_nonempty("AZURE_STORAGE_SAS_TOKEN") {
            return Ok(found(Credential::Sas {
                query: sas.trim().trim_start_matches('?').to_string(),
                source: "AZURE_STORAGE_SAS_TOKEN".into(),
            }));
        }
        let key_var = ["AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"]
            .into_iter()
            .find_map(|v| env_nonempty(v).map(|k| (v, k)));
        if let Some((var, key)) = key_var {
            if let Some(other) =
                env_nonempty("AZURE_STORAGE_ACCOUNT").filter(|a| a.trim() != account)
            {
                return Err(Error::store(format!(
                    "{var} is the key of AZURE_STORAGE_ACCOUNT={other:?}, but the URL names \
                     {account:?}"
                )));
            }
            return Ok(found(shared_key(account, &key, var)?));
        }
        if use_emulator && account == DEV_ACCOUNT {
            return Ok(found(shared_key(
                account,
                DEV_KEY,
                "Azurite's development key (use_emulator=true)",
            )?));
        }
        Ok(found(Credential::Identity(Identity::from_env())))
    }

    pub fn describe(&self) -> String {
        match self {
            Credential::Anonymous => "no credentials (anonymous=true)".into(),
            Credential::SharedKey {
                account, source, ..
            } => {
                format!("the shared key of account {account} from {source}")
            }
            Credential::Sas { source, .. } => format!("the SAS token in {source}"),
            Credential::Identity(i) => i.describe(),
        }
    }
}

impl Identity {
    fn from_env() -> Identity {
        let authority = env_nonempty("AZURE_AUTHORITY_HOST")
            .unwrap_or_else(|| DEFAULT_AUTHORITY.to_string())
            .trim_end_matches('/')
            .to_string();
        let tenant = env_nonempty("AZURE_TENANT_ID");
        let client_id = env_nonempty("AZURE_CLIENT_ID");
        if let (Some(tenant), Some(client_id), Some(secret)) = (
            tenant.clone(),
            client_id.clone(),
            env_nonempty("AZURE_CLIENT_SECRET"),
        ) {
            return Identity::ClientSecret {
                tenant,
                client_id,
                secret,
                authority,
            };
        }
        if let (Some(tenant), Some(client_id), Some(file)) = (
            tenant,
            client_id.clone(),
            env_nonempty("AZURE_FEDERATED_TOKEN_FILE"),
        ) {
            return Identity::Workload {
                tenant,
                client_id,
                token_file: PathBuf::from(file),
                authority,
            };
        }
        if let (Some(endpoint), Some(header)) = (
            env_nonempty("IDENTITY_ENDPOINT"),
            env_nonempty("IDENTITY_HEADER"),
        ) {
            return Identity::AppService {
                endpoint,
                header,
                client_id,
            };
        }
        Identity::ManagedIdentityOrCli {
            client_id,
            imds: env_nonempty("AZURE_POD_IDENTITY_AUTHORITY_HOST")
                .map(|h| format!("{}/metadata/identity/oauth2/token", h.trim_end_matches('/')))
                .unwrap_or_else(|| IMDS.to_string()),
        }
    }

    fn describe(&self) -> String {
        match self {
            Identity::ClientSecret { client_id, .. } => {
                format!("the service principal {client_id} (AZURE_CLIENT_ID/AZURE_CLIENT_SECRET)")
            }
            Identity::Workload { client_id, .. } => {
                format!("workload identity {client_id} (AZURE_FEDERATED_TOKEN_FILE)")
            }
            Identity::AppService { .. } => "the App Service managed identity".into(),
            Identity::ManagedIdentityOrCli { .. } => {
                "the managed identity, else the Azure CLI login".into()
            }
        }
    }

    /// A fresh Entra ID token for Azure Storage.
    pub async fn fetch(&self, http: &HttpClient) -> Result<Token> {
        let what = format!("Azure credentials: {}", self.describe());
        match self {
            Identity::ClientSecret {
                tenant,
                client_id,
                secret,
                authority,
            } => {
                fetch_token_form(
                    http,
                    &what,
                    &format!("{authority}/{tenant}/oauth2/v2.0/token"),
                    &[
                        ("grant_type", "client_credentials"),
                        ("client_id", client_id),
                        ("client_secret", secret),
                        ("scope", SCOPE),
                    ],
                )
                .await
            }
            Identity::Workload {
                tenant,
                client_id,
                token_file,
                authority,
            } => {
                let assertion = std::fs::read_to_string(token_file).map_err(|e| {
                    Error::store(format!("{what}: cannot read {}: {e}", token_file.display()))
                })?;
                fetch_token_form(
                    http,
                    &what,
                    &format!("{authority}/{tenant}/oauth2/v2.0/token"),
                    &[
                        ("grant_type", "client_credentials"),
                        ("client_id", client_id),
                        (
                            "client_assertion_type",
                            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                        ),
                        ("client_assertion", assertion.trim()),
                        ("scope", SCOPE),
                    ],
                )
                .await
            }
            Identity::AppService {
                endpoint,
                header,
                client_id,
            } => {
                let mut url = format!("{endpoint}?api-version=2019-08-01&resource={RESOURCE}");
                if let Some(id) = client_id {
                    url.push_str(&format!("&client_id={id}"));
                }
                let build = || {
                    Request::builder()
                        .method(Method::GET)
                        .uri(&url)
                        .header("x-identity-header", header)
                        .body(Default::default())
                        .map_err(|e| Error::invalid(format!("{what}: bad IDENTITY_ENDPOINT ({e})")))
                };
                fetch_token_retrying(http, &what, &url, build, &[]).await
            }
            Identity::ManagedIdentityOrCli { client_id, imds } => {
                let mut url = format!("{imds}?api-version=2018-02-01&resource={RESOURCE}");
                if let Some(id) = client_id {
                    url.push_str(&format!("&client_id={id}"));
                }
                let build = || {
                    Request::builder()
                        .method(Method::GET)
                        .uri(&url)
                        .header("metadata", "true")
                        .body(Default::default())
                        .map_err(|e| Error::invalid(format!("{what}: bad IMDS address ({e})")))
                };
                // IMDS answers 404 and 410 while the identity is being provisioned.
                let imds_error =
                    match fetch_token_retrying(http, &what, &url, build, &[404, 410]).await {
                        Ok(token) => return Ok(token),
                        // IMDS is there and says "not now": a blip, not a missing credential.
                        Err(e)
                            if e.kind() == crate::ErrorKind::Unavailable
                                && !e.message().contains("connection failed") =>
                        {
                            return Err(e)
                        }
                        Err(e) => e,
                    };
                azure_cli_token().await.map_err(|cli_error| {
                    Error::store(format!(
                        "no Azure credentials found: set AZURE_STORAGE_CONNECTION_STRING, \
                         AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN, a service principal \
                         (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET), or log in with \
                         `az login` (managed identity: {}; Azure CLI: {})",
                        imds_error.message(),
                        cli_error.message()
                    ))
                })
            }
        }
    }
}

/// `az account get-access-token --resource https://storage.azure.com/`.
async fn azure_cli_token() -> Result<Token> {
    let run = tokio::process::Command::new("az")
        .args([
            "account",
            "get-access-token",
            "--resource",
            RESOURCE,
            "--output",
            "json",
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::select! {
        o = run => o.map_err(|e| Error::store(format!("cannot run `az` ({e})")))?,
        _ = SystemClock.sleep(std::time::Duration::from_secs(20)) => {
            return Err(Error::store("`az account get-access-token` did not finish within 20s"))
        }
    };
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(Error::store(format!(
            "`az account get-access-token` failed: {}",
            err.split_whitespace().collect::<Vec<_>>().join(" ")
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        Error::store(format!(
            "`az account get-access-token` printed no JSON ({e})"
        ))
    })?;
    let value = v["accessToken"]
        .as_str()
        .ok_or_else(|| Error::store("`az account get-access-token` printed no accessToken"))?
        .to_string();
    // `expires_on` (seconds since the epoch) in recent CLIs; else trust it for five minutes.
    let now_wall = SystemClock.wall();
    let now = SystemClock.now();
    let expires = v["expires_on"]
        .as_u64()
        .or_else(|| v["expires_on"].as_str().and_then(|s| s.parse().ok()))
        .map(|at| {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at);
            now + at.duration_since(now_wall).unwrap_or_default()
        })
        .unwrap_or(now + std::time::Duration::from_secs(300));
    Ok(Token {
        value,
        expires: Some(expires),
    })
}

/// The Shared Key signature of a request (Azure Storage's "Authorize with Shared Key", version
/// 2015-02-21 and later): HMAC-SHA256 over the verb, the standard headers, the `x-ms-` headers
/// and the canonical resource (`path` as sent, with `query` decoded).
pub(crate) fn shared_key_signature(
    account: &str,
    key: &hmac::Key,
    method: &str,
    headers: &[(String, String)],
    path: &str,
    query: &[(String, String)],
) -> String {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let content_length = match header("content-length") {
        "0" => "",
        other => other,
    };
    let mut ms: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| k.to_ascii_lowercase().starts_with("x-ms-"))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    ms.sort();
    let mut to_sign = format!(
        "{method}\n{}\n{}\n{content_length}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        header("content-encoding"),
        header("content-language"),
        header("content-md5"),
        header("content-type"),
        header("date"),
        header("if-modified-since"),
        header("if-match"),
        header("if-none-match"),
        header("if-unmodified-since"),
        header("range"),
    );
    for (k, v) in &ms {
        to_sign.push_str(&format!("{k}:{v}\n"));
    }
    to_sign.push_str(&format!("/{account}{path}"));
    let mut q: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    q.sort();
    for (k, v) in q {
        to_sign.push_str(&format!("\n{k}:{v}"));
    }
    let tag = hmac::sign(key, to_sign.as_bytes());
    format!(
        "SharedKey {account}:{}",
        base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings() {
        let c = ConnectionString::parse(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
        )
        .unwrap();
        assert_eq!(c.account.as_deref(), Some("acct"));
        assert_eq!(c.key.as_deref(), Some("a2V5"));
        assert_eq!(
            c.endpoint().as_deref(),
            Some("https://acct.blob.core.windows.net")
        );
        let c = ConnectionString::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(c.account.as_deref(), Some(DEV_ACCOUNT));
        assert_eq!(c.key.as_deref(), Some(DEV_KEY));
        assert_eq!(
            c.endpoint().as_deref(),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        let c = ConnectionString::parse(
            "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=?sv=2022&sig=x%2Fy",
        )
        .unwrap();
        assert_eq!(c.sas.as_deref(), Some("sv=2022&sig=x%2Fy"));
        assert_eq!(
            c.endpoint().as_deref(),
            Some("https://acct.blob.core.windows.net")
        );
        assert!(ConnectionString::parse("garbage").is_err());
    }

    #[test]
    fn shared_key_signature_matches_a_known_answer() {
        // The string to sign as Azure's documentation builds it, signed independently (Python
        // hmac + base64 over the same bytes with Azurite's published key).
        let key = hmac::Key::new(
            hmac::HMAC_SHA256,
            &base64::engine::general_purpose::STANDARD
                .decode(DEV_KEY)
                .unwrap(),
        );
        let headers = vec![
            ("content-length".to_string(), "5".to_string()),
            (
                "content-type".to_string(),
                "application/octet-stream".to_string(),
            ),
            ("if-match".to_string(), "\"0x1\"".to_string()),
            ("x-ms-version".to_string(), "2023-11-03".to_string()),
            (
                "x-ms-date".to_string(),
                "Tue, 24 Nov 2026 02:46:40 GMT".to_string(),
            ),
            ("x-ms-blob-type".to_string(), "BlockBlob".to_string()),
            ("x-ms-meta-lease_epoch".to_string(), "7".to_string()),
        ];
        let sig = shared_key_signature(
            DEV_ACCOUNT,
            &key,
            "PUT",
            &headers,
            "/devstoreaccount1/lease-test/a%20b",
            &[],
        );
        assert_eq!(
            sig,
            "SharedKey devstoreaccount1:QAox+DLYUcotoLeGcMe80HGcc0F0y3ii5MsEFqXZfWk="
        );
    }
}
