//! `az://` (and `azure://`) — Azure Blob Storage, over the Blob service REST API.
//!
//! - `Create` is Put Blob (a block blob) with `If-None-Match: *`; `Match` is Put Blob with
//!   `If-Match: <etag>`; `delete` is Delete Blob with `If-Match: <etag>`; a read is Get Blob,
//!   with `If-None-Match: <etag>` for a poll (304 → [`Get::NotModified`]). One request each.
//! - A create that finds the blob answers 409 `BlobAlreadyExists` (Azure, Azurite) or 412:
//!   both are a failed condition. A 409 or 412 for another reason (an Azure blob lease taken
//!   on the record by someone else: `LeaseIdMissing`) is a store error that says so: the lease
//!   protocol does not use Azure's blob leases (docs/stores.md says why).
//! - The version is the ETag; `server_now` is the response's `Date`, `last_modified` the
//!   blob's `Last-Modified`, both whole seconds. Metadata is blob metadata (`x-ms-meta-*`),
//!   whose names must be C# identifiers: the store writes `lease-epoch` as `lease_epoch` and
//!   reads it back as `lease-epoch`.
//!
//! | Azure says                                               | The store answers          |
//! |----------------------------------------------------------|----------------------------|
//! | 412 `ConditionNotMet`; 409 `BlobAlreadyExists` to a create; 404 `BlobNotFound` to an update or delete | `ConditionFailed` |
//! | 404 `BlobNotFound` to a read                             | `NotFound`                 |
//! | 408, 429, 5xx (`ServerBusy`, `OperationTimedOut`), timeouts, resets | `Unavailable`: outcome unknown |
//! | 401, 403, 404 `ContainerNotFound`, other 4xx, lease conflicts, no credentials | `Store` |

mod auth;
mod classify;
mod settings;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::http::{
    encode_path, format_http_date, parse_http_date, Body, HttpClient, Method, Request, Response,
};
use super::remote::TokenCache;
use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Op,
    Put, Store, Version,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

use classify::{classify_status, error_message, ClassifyInput, Failure};
pub use settings::OPTIONS;
use settings::{Settings, API_VERSION};

pub use auth::{dev_endpoint, DEV_ACCOUNT, DEV_KEY};

/// The `Authorization` value of a request signed with an account key (base64), for callers
/// that make raw requests (tests, tools). `path` is the URL path as sent, `query` its
/// parameters decoded.
pub fn shared_key_authorization(
    account: &str,
    key_base64: &str,
    method: &str,
    headers: &[(String, String)],
    path: &str,
    query: &[(String, String)],
) -> Result<String> {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(key_base64.trim())
        .map_err(|e| Error::invalid(format!("the account key is not base64 ({e})")))?;
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &key);
    Ok(auth::shared_key_signature(
        account, &key, method, headers, path, query,
    ))
}

/// An Azure Blob Storage container. Cheap to clone; the HTTP client and credentials are set
/// up on first use.
#[derive(Clone)]
pub struct AzureStore {
    inner: Arc<Inner>,
}

struct Inner {
    account: String,
    container: String,
    url: String,
    settings: Settings,
    loaded: tokio::sync::OnceCell<Loaded>,
    tokens: TokenCache,
}

struct Loaded {
    http: HttpClient,
    credential: auth::Credential,
    /// The blob service's URL, without a trailing `/`.
    base: String,
    /// The path part of `base` (`/devstoreaccount1` on Azurite, empty on Azure).
    base_path: String,
    /// For messages: the URL and where it came from.
    hint: String,
}

impl fmt::Debug for AzureStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureStore")
            .field("url", &self.inner.url)
            .finish()
    }
}

/// The Azure RBAC data action a call needs, for messages.
fn data_action(op: Op) -> &'static str {
    match op {
        Op::Get => "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read",
        Op::Create | Op::Update => {
            "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write"
        }
        Op::Delete => "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/delete",
    }
}

/// A metadata name as Azure accepts it (a C# identifier): `-` becomes `_`.
fn meta_name_to_azure(name: &str) -> Result<String> {
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(Error::invalid(format!(
            "metadata key {name:?}: Azure metadata names must start with a letter"
        )));
    }
    Ok(name.replace('-', "_"))
}

/// A metadata name as Azure returns it, back to the store's form.
fn meta_name_from_azure(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

impl AzureStore {
    /// The store for `container` in `account` with the options of an `az://` URL. Checks the
    /// options; does not contact the server (the first call does).
    pub fn open(
        account: &str,
        container: &str,
        options: &[(String, String)],
    ) -> Result<AzureStore> {
        let name = format!("az://{account}/{container}");
        let settings = Settings::parse(&name, options)?;
        Ok(AzureStore {
            inner: Arc::new(Inner {
                account: account.to_string(),
                container: container.to_string(),
                url: super::with_query(&name, options),
                settings,
                loaded: tokio::sync::OnceCell::new(),
                tokens: TokenCache::default(),
            }),
        })
    }

    pub fn account(&self) -> &str {
        &self.inner.account
    }

    pub fn container(&self) -> &str {
        &self.inner.container
    }

    async fn loaded(&self) -> Result<&Loaded> {
        self.inner.loaded.get_or_try_init(|| self.load()).await
    }

    async fn load(&self) -> Result<Loaded> {
        let s = &self.inner.settings;
        let account = &self.inner.account;
        let found = auth::Credential::find(account, s.anonymous, s.use_emulator)
            .map_err(|e| e.context(format!("az://{account}/{}", self.inner.container)))?;
        let (base, hint) = match (&s.endpoint, &found.endpoint) {
            (Some(e), _) => (e.clone(), e.clone()),
            (None, Some(e)) => (
                e.clone(),
                format!("{e} (from AZURE_STORAGE_CONNECTION_STRING)"),
            ),
            (None, None) if s.use_emulator => {
                let e = dev_endpoint(account);
                (e.clone(), e)
            }
            (None, None) => {
                let e = format!("https://{account}.blob.core.windows.net");
                (e.clone(), e)
            }
        };
        let base_path = url::Url::parse(&base)
            .map(|u| u.path().trim_end_matches('/').to_string())
            .map_err(|e| Error::invalid(format!("blob endpoint {base:?} is not a URL ({e})")))?;
        Ok(Loaded {
            http: HttpClient::new(s.connect_timeout, s.timeout)?,
            credential: found.credential,
            base,
            base_path,
            hint,
        })
    }

    fn describe(&self, op: Op, key: &str, loaded: Option<&Loaded>) -> String {
        let on = loaded.map_or(String::new(), |l| format!(" on {}", l.hint));
        format!(
            "cannot {} az://{}/{}/{key}{on}",
            op.verb(),
            self.inner.account,
            self.inner.container
        )
    }

    /// Sign and send a request for the blob `key`.
    async fn send(
        &self,
        op: Op,
        key: &str,
        method: Method,
        mut headers: Vec<(String, String)>,
        body: Bytes,
        max_len: Option<u64>,
    ) -> Result<(Response, &Loaded)> {
        let loaded = self.loaded().await?;
        let path = format!(
            "{}/{}/{}",
            loaded.base_path,
            self.inner.container,
            encode_path(key)
        );
        let mut url = format!(
            "{}/{}/{}",
            loaded.base,
            self.inner.container,
            encode_path(key)
        );
        headers.push(("x-ms-version".into(), API_VERSION.into()));
        headers.push(("x-ms-date".into(), format_http_date(SystemClock.wall())));
        if method == Method::PUT {
            headers.push(("content-length".into(), body.len().to_string()));
        }
        match &loaded.credential {
            auth::Credential::Anonymous => {}
            auth::Credential::SharedKey { account, key, .. } => {
                let signature =
                    auth::shared_key_signature(account, key, method.as_str(), &headers, &path, &[]);
                headers.push(("authorization".into(), signature));
            }
            auth::Credential::Sas { query, .. } => {
                url.push('?');
                url.push_str(query);
            }
            auth::Credential::Identity(identity) => {
                let token = self
                    .inner
                    .tokens
                    .get(|| identity.fetch(&loaded.http))
                    .await
                    .map_err(|e| e.context(self.describe(op, key, Some(loaded))))?;
                headers.push(("authorization".into(), format!("Bearer {token}")));
            }
        }
        let mut request = Request::builder().method(method).uri(&url);
        for (k, v) in &headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let request = request.body(Body::from(body)).map_err(|e| {
            Error::invalid(format!("{}: {e}", self.describe(op, key, Some(loaded))))
        })?;
        let response = loaded.http.send(request, max_len).await.map_err(|e| {
            e.into_error(
                &self.describe(op, key, Some(loaded)),
                "the endpoint (URL option endpoint=, the connection string's BlobEndpoint)",
                op.unknown_outcome(),
            )
        })?;
        Ok((response, loaded))
    }

    fn classify(&self, op: Op, key: &str, loaded: &Loaded, response: &Response) -> Failure {
        let code = response.header("x-ms-error-code").unwrap_or("").to_string();
        let message = error_message(&response.text());
        classify_status(ClassifyInput {
            op,
            status: response.status,
            code: &code,
            message: &message,
            what: &self.describe(op, key, Some(loaded)),
            container: &self.inner.container,
            credentials: &loaded.credential.describe(),
        })
    }

    fn etag(&self, op: Op, key: &str, loaded: &Loaded, response: &Response) -> Result<Version> {
        match response.header("etag") {
            Some(e) if !e.is_empty() => Ok(Version::etag(e)),
            _ => Err(Error::store(format!(
                "{}: the server sent no ETag, so it cannot be used for leases (conditional \
                 writes need one)",
                self.describe(op, key, Some(loaded))
            ))),
        }
    }
}

#[async_trait]
impl Store for AzureStore {
    fn url(&self) -> &str {
        &self.inner.url
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            conditional_delete: self.inner.settings.conditional_delete,
            clock_resolution: Duration::from_secs(1),
            store_clock_rule: self.inner.settings.store_clock_rule,
            wall_clock: true,
            // Every write of a blob gets a new ETag, whatever it writes (unlike S3's MD5).
            versions_are_unique: true,
        }
    }

    async fn get(&self, key: &str, opts: GetOptions<'_>) -> Result<Get> {
        validate_key(key)?;
        let mut headers = vec![];
        if let Some(v) = opts.if_none_match {
            headers.push(("if-none-match".to_string(), v.etag.clone()));
        }
        let (response, loaded) = self
            .send(
                Op::Get,
                key,
                Method::GET,
                headers,
                Bytes::new(),
                opts.max_len,
            )
            .await?;
        let server_now = response.date();
        if response.status != 200 {
            return match self.classify(Op::Get, key, loaded, &response) {
                Failure::NotModified => Ok(Get::NotModified { server_now }),
                Failure::NotFound => Ok(Get::NotFound { server_now }),
                Failure::ConditionFailed => Err(Error::internal(format!(
                    "{}: a read reported a failed condition",
                    self.describe(Op::Get, key, Some(loaded))
                ))),
                Failure::Error(e) => Err(e),
            };
        }
        let version = self.etag(Op::Get, key, loaded, &response)?;
        let meta: Meta = response
            .headers
            .iter()
            .filter_map(|(name, value)| {
                let name = name.as_str().strip_prefix("x-ms-meta-")?;
                Some((meta_name_from_azure(name), value.to_str().ok()?.to_string()))
            })
            .collect();
        let last_modified = response.header("last-modified").and_then(parse_http_date);
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
        let mut headers = vec![
            ("x-ms-blob-type".to_string(), "BlockBlob".to_string()),
            (
                "content-type".to_string(),
                "application/octet-stream".to_string(),
            ),
        ];
        let op = match &cond {
            Cond::Create => {
                headers.push(("if-none-match".into(), "*".into()));
                Op::Create
            }
            Cond::Match(v) => {
                if v.etag.is_empty() {
                    return Ok(Put::ConditionFailed);
                }
                headers.push(("if-match".into(), v.etag.clone()));
                Op::Update
            }
        };
        for (k, v) in meta {
            headers.push((format!("x-ms-meta-{}", meta_name_to_azure(k)?), v.clone()));
        }
        let (response, loaded) = self
            .send(op, key, Method::PUT, headers, bytes, Some(64 * 1024))
            .await?;
        if response.status == 201 || response.status == 200 {
            return Ok(Put::Written {
                version: self.etag(op, key, loaded, &response)?,
                server_now: response.date(),
            });
        }
        match self.classify(op, key, loaded, &response) {
            Failure::ConditionFailed => Ok(Put::ConditionFailed),
            Failure::Error(e) => Err(e),
            other => Err(Error::unavailable(format!(
                "{}: unexpected answer {other:?}",
                self.describe(op, key, Some(loaded))
            ))),
        }
    }

    async fn delete(&self, key: &str, version: &Version) -> Result<Delete> {
        validate_key(key)?;
        if version.etag.is_empty() {
            return Ok(Delete::ConditionFailed);
        }
        // Always sent with If-Match; `capabilities().conditional_delete` says whether the
        // server honours it, and `lease doctor` tests it.
        let headers = vec![("if-match".to_string(), version.etag.clone())];
        let (response, loaded) = self
            .send(
                Op::Delete,
                key,
                Method::DELETE,
                headers,
                Bytes::new(),
                Some(64 * 1024),
            )
            .await?;
        if (200..300).contains(&response.status) {
            return Ok(Delete::Deleted);
        }
        match self.classify(Op::Delete, key, loaded, &response) {
            Failure::ConditionFailed => Ok(Delete::ConditionFailed),
            Failure::Error(e) => Err(e),
            other => Err(Error::unavailable(format!(
                "{}: unexpected answer {other:?}",
                self.describe(Op::Delete, key, Some(loaded))
            ))),
        }
    }
}
