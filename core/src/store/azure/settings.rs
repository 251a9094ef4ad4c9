//! The options of an `az://` URL, checked.

use std::time::Duration;

use crate::error::Result;
use crate::store::remote::{parse_bool, parse_endpoint, parse_options, parse_timeout, OptionSpec};

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
pub(super) const SECRET_OPTIONS: &[&str] = &[
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
pub(super) const API_VERSION: &str = "2023-11-03";
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) endpoint: Option<String>,
    pub(super) use_emulator: bool,
    pub(super) anonymous: bool,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) conditional_delete: bool,
    pub(super) store_clock_rule: bool,
}

impl Settings {
    pub(super) fn parse(store: &str, options: &[(String, String)]) -> Result<Settings> {
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
