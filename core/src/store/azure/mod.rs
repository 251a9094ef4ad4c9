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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::http::{
    encode_path, format_http_date, parse_http_date, Body, HttpClient, Method, Request, Response,
};
use super::remote::{
    parse_bool, parse_endpoint, parse_options, parse_timeout, OptionSpec, TokenCache,
};
use super::{
    validate_key, validate_meta, Capabilities, Cond, Delete, Get, GetOptions, Meta, Object, Op,
    Put, Store, Version,
};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

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

/// Every option an `az://` URL accepts: `(name, aliases, meaning)`.
pub const OPTIONS: &[OptionSpec] = &[
    (
        "endpoint",
        &["endpoint_url", "azure_storage_endpoint", "blob_endpoint"],
        "URL of the blob service (http:// or https://), e.g. Azurite's \
         http://127.0.0.1:10000/ACCOUNT; default the connection string's BlobEndpoint, else \
         https://ACCOUNT.blob.core.windows.net",
    ),
    (
        "use_emulator",
        &["azure_storage_use_emulator"],
        "true: Azurite; endpoint http://127.0.0.1:10000/ACCOUNT unless given, and for \
         devstoreaccount1 its published key unless other credentials are set",
    ),
    (
        "anonymous",
        &["skip_signature", "azure_skip_signature"],
        "true: send no credentials (a public container; reads only)",
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
        "whether the server honours If-Match on Delete Blob; default true (Azure and Azurite \
         do): `lease doctor` tells",
    ),
    (
        "store_clock_rule",
        &[],
        "false when the server's clocks may disagree: waiters then only trust their own \
         observation (protocol §4); default true",
    ),
];

/// Option names that would put secrets in a URL.
const SECRET_OPTIONS: &[&str] = &[
    "account_key",
    "azure_storage_account_key",
    "access_key",
    "azure_storage_access_key",
    "key",
    "sas_key",
    "sas_token",
    "azure_storage_sas_key",
    "azure_storage_sas_token",
    "sig",
    "client_secret",
    "azure_client_secret",
    "connection_string",
    "bearer_token",
    "azure_storage_token",
    "token",
];

/// The REST API version this store speaks (Azurite 3.35 knows it; Azure keeps old versions).
const API_VERSION: &str = "2023-11-03";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    endpoint: Option<String>,
    use_emulator: bool,
    anonymous: bool,
    timeout: Duration,
    connect_timeout: Duration,
    conditional_delete: bool,
    store_clock_rule: bool,
}

impl Settings {
    fn parse(store: &str, options: &[(String, String)]) -> Result<Settings> {
        let given = parse_options(
            store,
            options,
            OPTIONS,
            SECRET_OPTIONS,
            "set AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN, \
             or use the Azure identity chain (service principal, workload or managed identity, \
             `az login`)",
        )?;
        let mut s = Settings {
            endpoint: None,
            use_emulator: false,
            anonymous: false,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            conditional_delete: true,
            store_clock_rule: true,
        };
        for (name, (raw, value)) in &given {
            match *name {
                "endpoint" => s.endpoint = Some(parse_endpoint(store, value)?),
                "use_emulator" => s.use_emulator = parse_bool(store, raw, value)?,
                "anonymous" => s.anonymous = parse_bool(store, raw, value)?,
                "timeout" => s.timeout = parse_timeout(store, raw, value)?,
                "connect_timeout" => s.connect_timeout = parse_timeout(store, raw, value)?,
                "conditional_delete" => s.conditional_delete = parse_bool(store, raw, value)?,
                "store_clock_rule" => s.store_clock_rule = parse_bool(store, raw, value)?,
                other => unreachable!("option {other} is listed but not handled"),
            }
        }
        Ok(s)
    }
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

#[derive(Debug)]
enum Failure {
    NotModified,
    NotFound,
    ConditionFailed,
    Error(Error),
}

struct ClassifyInput<'a> {
    op: Op,
    status: u16,
    /// `x-ms-error-code`.
    code: &'a str,
    /// The error's message, from the body.
    message: &'a str,
    what: &'a str,
    container: &'a str,
    credentials: &'a str,
}

/// Error codes of a blob that carries an Azure blob lease someone took on it.
const LEASE_CODES: &[&str] = &[
    "LeaseIdMissing",
    "LeaseIdMismatchWithBlobOperation",
    "LeaseLost",
    "LeaseNotPresentWithBlobOperation",
    "LeaseIsBreakingAndCannotBeAcquired",
    "LeaseAlreadyPresent",
];

fn classify_status(i: ClassifyInput<'_>) -> Failure {
    let ClassifyInput {
        op,
        status,
        code,
        message,
        what,
        container,
        credentials,
    } = i;
    let said = match (code.is_empty(), message.is_empty()) {
        (true, _) => format!("HTTP {status}"),
        (false, true) => format!("HTTP {status} {code}"),
        (false, false) => format!("HTTP {status} {code}: {message}"),
    };
    let store = |hint: String| Failure::Error(Error::store(format!("{what}: {said}: {hint}")));
    let unavailable = || {
        Failure::Error(Error::unavailable(format!(
            "{what}: {said}{}",
            op.unknown_outcome()
        )))
    };
    if LEASE_CODES.contains(&code) {
        return store(
            "the blob carries an Azure blob lease taken by someone else; lease records are \
             changed only by conditional writes and never take Azure leases: break it (`az \
             storage blob lease break`) and do not lease lease records"
                .into(),
        );
    }
    match (status, code) {
        (304, _) if op == Op::Get => Failure::NotModified,
        (412, "ConditionNotMet" | "") if op != Op::Get => Failure::ConditionFailed,
        (409, "BlobAlreadyExists" | "") if op == Op::Create => Failure::ConditionFailed,
        (404, "ContainerNotFound") => store(format!(
            "container {container:?} does not exist in this account: create it (`az storage \
             container create`) or check the URL"
        )),
        (404, "BlobNotFound" | "") if op == Op::Get => Failure::NotFound,
        (404, "BlobNotFound" | "") if matches!(op, Op::Update | Op::Delete) => {
            Failure::ConditionFailed
        }
        (404, _) => store("check the account, container and endpoint".into()),
        (408 | 429, _) | (500..=599, _) => unavailable(),
        (401, _) => store(format!(
            "the credentials were not accepted: check {credentials}"
        )),
        (403, "AuthenticationFailed") if message.to_ascii_lowercase().contains("time") => store(
            "the request's time is too far from the server's (more than 15 minutes): fix this \
             machine's clock (NTP)"
                .into(),
        ),
        (403, "AuthenticationFailed") => store(format!(
            "the signature or token was refused: check {credentials}"
        )),
        (403, _) => store(format!(
            "access denied: {credentials} need the data action {} on the container (the role \
             Storage Blob Data Contributor grants what a worker needs), or a SAS with the \
             right permissions",
            data_action(op)
        )),
        (400..=499, _) => store(
            "the server rejected the request; if it does not support conditional requests \
             (If-Match / If-None-Match), it cannot hold leases: run `lease doctor`"
                .into(),
        ),
        _ => unavailable(),
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

/// The message in an Azure error body (`<Error><Code>…</Code><Message>…</Message>`).
fn error_message(body: &str) -> String {
    let Some(start) = body.find("<Message>") else {
        return String::new();
    };
    let rest = &body[start + "<Message>".len()..];
    let end = rest.find("</Message>").unwrap_or(rest.len());
    // Azure appends RequestId and Time on lines of their own: keep what comes before.
    let message = &rest[..end];
    let message = message.split("RequestId:").next().unwrap_or(message);
    message.split_whitespace().collect::<Vec<_>>().join(" ")
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
                url: super::url::with_query(&name, options),
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
                op,
                &self.describe(op, key, Some(loaded)),
                "the endpoint (URL option endpoint=, the connection string's BlobEndpoint)",
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
            "az://a/c",
            &opts(&[
                (
                    "azure_storage_endpoint",
                    "http://127.0.0.1:10000/devstoreaccount1/",
                ),
                ("use_emulator", "true"),
                ("conditional_delete", "false"),
            ]),
        )
        .unwrap();
        assert_eq!(
            s.endpoint.as_deref(),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        assert!(s.use_emulator && !s.conditional_delete);
        for (pairs, needle) in [
            (vec![("bogus", "1")], "bogus"),
            (vec![("account_key", "x")], "account_key"),
            (vec![("sas_token", "x")], "sas_token"),
            (vec![("endpoint", "ftp://x")], "ftp://x"),
            (vec![("use_emulator", "maybe")], "maybe"),
        ] {
            let e = AzureStore::open("acct", "cont", &opts(&pairs)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "{pairs:?}: {e}");
            assert!(e.message().contains(needle), "{pairs:?}: {e}");
        }
        let store = AzureStore::open("acct", "cont", &opts(&[("timeout", "3s")])).unwrap();
        assert_eq!(store.url(), "az://acct/cont?timeout=3s");
        assert!(store.capabilities().conditional_delete);
        assert_eq!(store.min_write_interval(), Duration::ZERO);
    }

    #[test]
    fn metadata_names() {
        assert_eq!(meta_name_to_azure("lease-epoch").unwrap(), "lease_epoch");
        assert_eq!(meta_name_from_azure("Lease_Epoch"), "lease-epoch");
        assert!(meta_name_to_azure("1abc").is_err());
    }

    fn status(op: Op, status: u16, code: &str) -> Failure {
        classify_status(ClassifyInput {
            op,
            status,
            code,
            message: "",
            what: "cannot x az://a/c/k on E",
            container: "c",
            credentials: "the creds",
        })
    }

    #[test]
    fn classification_follows_the_protocol() {
        use ErrorKind::*;
        assert!(matches!(status(Op::Get, 304, ""), Failure::NotModified));
        assert!(matches!(
            status(Op::Get, 404, "BlobNotFound"),
            Failure::NotFound
        ));
        for (op, st, code) in [
            (Op::Create, 409, "BlobAlreadyExists"),
            (Op::Create, 412, "ConditionNotMet"),
            (Op::Update, 412, "ConditionNotMet"),
            (Op::Update, 404, "BlobNotFound"),
            (Op::Delete, 412, "ConditionNotMet"),
            (Op::Delete, 404, "BlobNotFound"),
        ] {
            assert!(
                matches!(status(op, st, code), Failure::ConditionFailed),
                "{op:?} {st} {code}"
            );
        }
        let kind = |f: Failure| match f {
            Failure::Error(e) => {
                assert!(e.message().contains("az://a/c/k on E"), "{e}");
                Some(e.kind())
            }
            _ => None,
        };
        for (op, st, code, want) in [
            (Op::Update, 503, "ServerBusy", Unavailable),
            (Op::Update, 500, "OperationTimedOut", Unavailable),
            (Op::Get, 429, "", Unavailable),
            (Op::Update, 412, "LeaseIdMissing", Store),
            (Op::Create, 409, "LeaseIdMissing", Store),
            (Op::Update, 409, "BlobAlreadyExists", Store),
            (Op::Get, 404, "ContainerNotFound", Store),
            (Op::Update, 404, "ContainerNotFound", Store),
            (Op::Get, 403, "AuthorizationPermissionMismatch", Store),
            (Op::Get, 403, "AuthenticationFailed", Store),
            (Op::Get, 401, "", Store),
            (Op::Update, 400, "InvalidMetadata", Store),
        ] {
            assert_eq!(kind(status(op, st, code)), Some(want), "{op:?} {st} {code}");
        }
        let Failure::Error(e) = status(Op::Update, 412, "LeaseIdMissing") else {
            panic!()
        };
        assert!(e.message().contains("Azure blob lease"), "{e}");
    }

    #[test]
    fn error_messages_from_bodies() {
        let body = "<?xml version=\"1.0\"?><Error><Code>BlobNotFound</Code><Message>The \
                    specified blob does not exist.\nRequestId:x\nTime:y</Message></Error>";
        assert_eq!(error_message(body), "The specified blob does not exist.");
        assert_eq!(error_message("nothing"), "");
    }
}
