//! The options of an `s3://` URL, checked: what a store is opened with.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};

/// Every option an `s3://` URL accepts: `(name, aliases, meaning)`.
pub const OPTIONS: &[(&str, &[&str], &str)] = &[
    (
        "region",
        &["aws_region", "aws_default_region"],
        "AWS region of the bucket; default from AWS_REGION / the profile / IMDS, or us-east-1 \
         when an endpoint is set",
    ),
    (
        "endpoint",
        &["endpoint_url", "aws_endpoint", "aws_endpoint_url"],
        "URL of an S3-compatible server (http:// or https://); default from \
         AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS S3",
    ),
    (
        "path_style",
        &["force_path_style"],
        "true: address the bucket as ENDPOINT/BUCKET/KEY, false: BUCKET.ENDPOINT/KEY; default \
         true with a custom endpoint, false on AWS",
    ),
    (
        "virtual_hosted_style_request",
        &["aws_virtual_hosted_style_request"],
        "the inverse of path_style (object_store's name)",
    ),
    (
        "profile",
        &["aws_profile"],
        "named profile in ~/.aws/config and ~/.aws/credentials (default AWS_PROFILE or \
         `default`)",
    ),
    (
        "allow_http",
        &["aws_allow_http"],
        "accepted for object_store compatibility; http:// endpoints are always allowed",
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
        "whether the server honours If-Match on DeleteObject; default true on AWS S3 (documented \
         since 2025-09), false with a custom endpoint (MinIO ignores it): `lease doctor` tells",
    ),
    (
        "store_clock_rule",
        &[],
        "false when the server's nodes' clocks may disagree: waiters then only trust their \
         own observation (protocol §4); default true",
    ),
];

/// Option names that would put secrets in a URL.
pub(super) const SECRET_OPTIONS: &[&str] = &[
    "access_key_id",
    "aws_access_key_id",
    "secret_access_key",
    "aws_secret_access_key",
    "session_token",
    "aws_session_token",
    "token",
    "aws_token",
];

pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The options of one store, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) region: Option<String>,
    pub(super) endpoint: Option<String>,
    pub(super) path_style: Option<bool>,
    pub(super) profile: Option<String>,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    /// `None`: decided by whether the endpoint is AWS's.
    pub(super) conditional_delete: Option<bool>,
    pub(super) store_clock_rule: bool,
}

pub(super) fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!(
            "option {name}={value:?}: expected true or false"
        ))),
    }
}

impl Settings {
    pub(super) fn parse(bucket: &str, options: &[(String, String)]) -> Result<Settings> {
        let mut s = Settings {
            region: None,
            endpoint: None,
            path_style: None,
            profile: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            conditional_delete: None,
            store_clock_rule: true,
        };
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (raw_name, value) in options {
            let lower = raw_name.to_ascii_lowercase();
            let invalid = |why: String| Error::invalid(format!("s3://{bucket}: {why}"));
            if SECRET_OPTIONS.contains(&lower.as_str()) {
                return Err(invalid(format!(
                    "option {raw_name:?} is not accepted: credentials do not belong in a lease \
                     URL (it is shown in messages and exported as LEASE_URL); use \
                     AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, SSO or an instance role"
                )));
            }
            let Some((name, _, _)) = OPTIONS
                .iter()
                .find(|(n, aliases, _)| *n == lower || aliases.contains(&lower.as_str()))
            else {
                let known: Vec<&str> = OPTIONS.iter().map(|(n, _, _)| *n).collect();
                return Err(invalid(format!(
                    "unknown option {raw_name:?} (known options: {})",
                    known.join(", ")
                )));
            };
            if let Some(previous) = seen.insert(name, raw_name) {
                return Err(invalid(format!(
                    "option {name} is given twice ({previous:?} and {raw_name:?})"
                )));
            }
            let duration = |v: &str| -> Result<Duration> {
                let d = crate::duration::parse_duration(v)
                    .map_err(|e| invalid(format!("option {raw_name}: {}", e.message())))?;
                if d.is_zero() {
                    return Err(invalid(format!("option {raw_name} must be above zero")));
                }
                Ok(d)
            };
            match *name {
                "region" => {
                    if value.is_empty()
                        || !value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                    {
                        return Err(invalid(format!("region {value:?} is not a region name")));
                    }
                    s.region = Some(value.clone());
                }
                "endpoint" => {
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
                    s.endpoint = Some(value.trim_end_matches('/').to_string());
                }
                "path_style" => s.path_style = Some(parse_bool(raw_name, value)?),
                "virtual_hosted_style_request" => {
                    s.path_style = Some(!parse_bool(raw_name, value)?)
                }
                "profile" => {
                    if value.is_empty() {
                        return Err(invalid("option profile is empty".into()));
                    }
                    s.profile = Some(value.clone());
                }
                "allow_http" => {
                    parse_bool(raw_name, value)?;
                }
                "timeout" => s.timeout = duration(value)?,
                "connect_timeout" => s.connect_timeout = duration(value)?,
                "conditional_delete" => s.conditional_delete = Some(parse_bool(raw_name, value)?),
                "store_clock_rule" => s.store_clock_rule = parse_bool(raw_name, value)?,
                other => unreachable!("option {other} is listed but not handled"),
            }
        }
        if seen.contains_key("path_style") && seen.contains_key("virtual_hosted_style_request") {
            return Err(Error::invalid(format!(
                "s3://{bucket}: give path_style or virtual_hosted_style_request, not both"
            )));
        }
        Ok(s)
    }
}

pub(super) fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
