//! The options of a `gs://` URL, checked, and the endpoint they resolve to.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::remote::{
    env_nonempty, parse_bool, parse_endpoint, parse_options, parse_timeout, OptionSpec,
};

/// Every option a `gs://` URL accepts: `(name, aliases, meaning)`.
pub const OPTIONS: &[OptionSpec] = &[
    (
        "endpoint",
        &["endpoint_url", "google_storage_endpoint"],
        "URL of a GCS-compatible server or emulator (http:// or https://); default \
         STORAGE_EMULATOR_HOST, else https://storage.googleapis.com",
    ),
    (
        "service_account_path",
        &[
            "google_service_account_path",
            "google_application_credentials",
            "application_credentials",
        ],
        "a service-account key file (JSON) to use instead of the credential chain",
    ),
    (
        "anonymous",
        &["skip_signature", "google_skip_signature"],
        "true: send no credentials; default true for an emulator (STORAGE_EMULATOR_HOST or an \
         http:// endpoint), else false",
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
        "whether the server honours ifGenerationMatch on delete; default true on Google's \
         endpoint, false with an emulator (fake-gcs-server ignores it): `lease doctor` tells",
    ),
    (
        "store_clock_rule",
        &[],
        "false when the server's clocks may disagree: waiters then only trust their own \
         observation (protocol §4); default true",
    ),
    (
        "min_write_interval",
        &[],
        "the shortest interval between two writes of one object the server sustains: acquiring \
         with a shorter renew interval is refused; default 1s on Google's endpoint (about one \
         write per second per object), 0s with an emulator, which has no such limit",
    ),
];

/// Option names that would put secrets in a URL.
pub(super) const SECRET_OPTIONS: &[&str] = &[
    "service_account_key",
    "google_service_account_key",
    "service_account",
    "google_service_account",
    "access_token",
    "token",
    "private_key",
];

pub(super) const GOOGLE_ENDPOINT: &str = "https://storage.googleapis.com";
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// GCS: "a limit on writes to the same object name … once per second".
pub const MIN_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// The options of one store, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) endpoint: Option<String>,
    pub(super) service_account_path: Option<PathBuf>,
    pub(super) anonymous: Option<bool>,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) conditional_delete: Option<bool>,
    pub(super) store_clock_rule: bool,
    pub(super) min_write_interval: Option<Duration>,
}

impl Settings {
    pub(super) fn parse(bucket: &str, options: &[(String, String)]) -> Result<Settings> {
        let store = format!("gs://{bucket}");
        let given = parse_options(
            &store,
            options,
            OPTIONS,
            SECRET_OPTIONS,
            "point GOOGLE_APPLICATION_CREDENTIALS (or the option service_account_path) at a \
             key file, or use gcloud's application default credentials or the metadata server",
        )?;
        let mut s = Settings {
            endpoint: None,
            service_account_path: None,
            anonymous: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            conditional_delete: None,
            store_clock_rule: true,
            min_write_interval: None,
        };
        for (name, (raw, value)) in &given {
            match *name {
                "endpoint" => s.endpoint = Some(parse_endpoint(&store, value)?),
                "service_account_path" => {
                    if value.is_empty() {
                        return Err(Error::invalid(format!("{store}: option {raw} is empty")));
                    }
                    s.service_account_path = Some(PathBuf::from(value));
                }
                "anonymous" => s.anonymous = Some(parse_bool(&store, raw, value)?),
                "timeout" => s.timeout = parse_timeout(&store, raw, value)?,
                "connect_timeout" => s.connect_timeout = parse_timeout(&store, raw, value)?,
                "conditional_delete" => {
                    s.conditional_delete = Some(parse_bool(&store, raw, value)?)
                }
                "store_clock_rule" => s.store_clock_rule = parse_bool(&store, raw, value)?,
                "min_write_interval" => {
                    s.min_write_interval =
                        Some(crate::duration::parse_duration(value).map_err(|e| {
                            Error::invalid(format!("{store}: option {raw}: {}", e.message()))
                        })?)
                }
                other => unreachable!("option {other} is listed but not handled"),
            }
        }
        Ok(s)
    }
}

/// Where requests go, decided at open.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    pub(super) base: String,
    /// For messages: the URL and where it came from.
    pub(super) hint: String,
    /// `Some(why)` when no credentials are sent by default.
    pub(super) anonymous_default: Option<String>,
    pub(super) google: bool,
}

pub(super) fn endpoint_for(s: &Settings) -> Endpoint {
    if let Some(e) = &s.endpoint {
        return Endpoint {
            base: e.clone(),
            hint: e.clone(),
            anonymous_default: e
                .starts_with("http://")
                .then(|| format!("an emulator at {e}")),
            google: e == GOOGLE_ENDPOINT,
        };
    }
    if let Some(host) = env_nonempty("STORAGE_EMULATOR_HOST") {
        let host = host.trim().trim_end_matches('/');
        let base = if host.contains("://") {
            host.to_string()
        } else {
            format!("http://{host}")
        };
        return Endpoint {
            hint: format!("{base} (from STORAGE_EMULATOR_HOST)"),
            anonymous_default: Some("STORAGE_EMULATOR_HOST names an emulator".into()),
            base,
            google: false,
        };
    }
    Endpoint {
        base: GOOGLE_ENDPOINT.to_string(),
        hint: GOOGLE_ENDPOINT.to_string(),
        anonymous_default: None,
        google: true,
    }
}
