//! Lease URLs: which store, which key.
//!
//! | Written as                         | Store                         | Key        |
//! |------------------------------------|-------------------------------|------------|
//! | `s3://bucket/locks/gc?region=…`    | S3 bucket `bucket`            | `locks/gc` |
//! | `gs://bucket/locks/gc`             | GCS bucket `bucket`           | `locks/gc` |
//! | `az://account/container/locks/gc`  | Azure container (`azure://` too) | `locks/gc` |
//! | `file:///var/lib/app/locks/gc`     | directory `/var/lib/app/locks`| `gc`       |
//! | `/var/lib/app/locks/gc`, `./gc`    | the same, as a path           | `gc`       |
//! | `memory://test/gc`                 | in-process namespace `test`   | `gc`       |
//! | `nightly-gc`, `jobs/gc` (bare)     | the default local directory   | the name   |
//!
//! This module reads and writes URLs; `open.rs` opens the store a URL names (the one place that
//! knows every backend, which no backend imports). Stores are opened once per process and
//! shared ([`StoreUrl::open`], [`Client::for_store`](crate::Client::for_store)), so every lease
//! on one bucket reuses one client and its connections.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::file::default_root;
use super::{file_root_in_url, join_key, validate_key, with_query};
use crate::error::{Error, Result};

mod open;

/// Where a store is, with its options.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StoreUrl {
    /// An in-process namespace.
    Memory { namespace: String },
    /// A local directory.
    File { root: PathBuf },
    /// The default local directory for bare names (resolved when opened).
    DefaultFile,
    /// An S3 (or S3-compatible) bucket; `options` are the URL's query parameters.
    S3 {
        bucket: String,
        options: Vec<(String, String)>,
    },
    /// A Google Cloud Storage bucket.
    Gcs {
        bucket: String,
        options: Vec<(String, String)>,
    },
    /// An Azure Blob Storage container (`az://` or `azure://`).
    Azure {
        account: String,
        container: String,
        options: Vec<(String, String)>,
    },
}

/// A lease: a store and a key in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseUrl {
    pub store: StoreUrl,
    pub key: String,
}

fn invalid(url: &str, why: impl fmt::Display) -> Error {
    Error::invalid(format!("invalid lease URL {url:?}: {why}"))
}

/// Percent-decode `s` as UTF-8. A `%` not followed by two hex digits is refused (the
/// `percent-encoding` crate would pass it through): in a URL it is a mistake to point out.
fn decode(url: &str, s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let bad_escape = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if bad_escape {
        return Err(invalid(url, "bad %-escape"));
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|d| d.into_owned())
        .map_err(|_| invalid(url, "%-escapes do not decode to UTF-8"))
}

fn parse_query(url: &str, query: Option<&str>) -> Result<Vec<(String, String)>> {
    let mut options = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        options.push((decode(url, k)?, decode(url, v)?));
    }
    options.sort();
    Ok(options)
}

/// Split an absolute path into a store directory and a key (its last component).
fn split_path(url: &str, path: &Path) -> Result<LeaseUrl> {
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => clean.push("/"),
            Component::Normal(s) => clean.push(s),
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            Component::Prefix(_) => return Err(invalid(url, "unsupported path prefix")),
        }
    }
    let key = clean
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| invalid(url, "the path names no file"))?
        .to_string();
    let root = clean
        .parent()
        .ok_or_else(|| invalid(url, "the path names no file"))?
        .to_path_buf();
    validate_key(&key).map_err(|e| e.context(format!("lease URL {url:?}")))?;
    Ok(LeaseUrl {
        store: StoreUrl::File { root },
        key,
    })
}

fn validate_bucket(url: &str, bucket: &str) -> Result<()> {
    let ok_chars = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !(3..=63).contains(&bucket.len()) || !ok_chars {
        return Err(invalid(
            url,
            format!("{bucket:?} is not a valid bucket name (3-63 characters: a-z, 0-9, '.', '-')"),
        ));
    }
    Ok(())
}

/// GCS bucket names: 3-63 characters of a-z, 0-9, '-', '_' and '.', starting and ending with a
/// letter or digit; up to 222 with dots, each dot-separated part at most 63.
fn validate_gcs_bucket(url: &str, bucket: &str) -> Result<()> {
    let chars_ok = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bucket
        .bytes()
        .next()
        .zip(bucket.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    let len_ok = (3..=63).contains(&bucket.len())
        || (bucket.contains('.')
            && (3..=222).contains(&bucket.len())
            && bucket.split('.').all(|p| (1..=63).contains(&p.len())));
    if !(chars_ok && ends_ok && len_ok) {
        return Err(invalid(
            url,
            format!(
                "{bucket:?} is not a valid GCS bucket name (3-63 characters: a-z, 0-9, '-', '_', \
                 '.', starting and ending with a letter or digit)"
            ),
        ));
    }
    Ok(())
}

/// Azure storage account names: 3-24 lower-case letters and digits.
fn validate_azure_account(url: &str, account: &str) -> Result<()> {
    if !(3..=24).contains(&account.len())
        || !account
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(invalid(
            url,
            format!(
                "{account:?} is not a valid Azure storage account name (3-24 characters: a-z, 0-9)"
            ),
        ));
    }
    Ok(())
}

/// Azure container names: 3-63 characters of a-z, 0-9 and single '-', starting and ending with
/// a letter or digit.
fn validate_azure_container(url: &str, container: &str) -> Result<()> {
    let ok = (3..=63).contains(&container.len())
        && container
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !container.starts_with('-')
        && !container.ends_with('-')
        && !container.contains("--");
    if !ok {
        return Err(invalid(
            url,
            format!(
                "{container:?} is not a valid Azure container name (3-63 characters: a-z, 0-9, \
                 single '-', starting and ending with a letter or digit)"
            ),
        ));
    }
    Ok(())
}

/// The key in the store of the object `key` names for the lease at `lease_key`: the one
/// placement rule of fenced keys, the same on every store and from every entry point.
///
/// `key` is read like a relative path from the lease's own directory: `x` and `./x` are
/// siblings of the lease, `jobs/x` is below its directory, `../x` one level up, and a leading
/// `/` starts at the store's root (the bucket or container; for a file store, the directory it
/// was opened on, which for a `file://` URL is the lease's directory). Going above the store's
/// root, or naming no object (`""`, `.`, `jobs/`), is [`ErrorKind::Invalid`](crate::ErrorKind),
/// naming the key. With an empty `lease_key` (a reader with no lease), `key` is read from the
/// store's root.
pub fn object_key(lease_key: &str, key: &str) -> Result<String> {
    let dir = lease_key.rsplit_once('/').map_or("", |(dir, _)| dir);
    place(dir, key, || match lease_key {
        "" => String::new(),
        lease => format!(" (beside the lease {lease:?})"),
    })
}

/// `key` read like a relative path from the directory `dir` of a store (`""`: its root), as
/// [`object_key`] reads it from a lease's directory.
pub(crate) fn key_in_dir(dir: &str, key: &str) -> Result<String> {
    place(dir, key, || match dir {
        "" => String::new(),
        dir => format!(" (under {dir:?})"),
    })
}

fn place(dir: &str, key: &str, whence: impl Fn() -> String) -> Result<String> {
    let refuse =
        |why: &str| Error::invalid(format!("invalid object key {key:?}{}: {why}", whence()));
    if key.is_empty() {
        return Err(refuse("it is empty"));
    }
    let (mut parts, path): (Vec<&str>, &str) = match key.strip_prefix('/') {
        Some(from_root) => (Vec::new(), from_root),
        None => (dir.split('/').filter(|s| !s.is_empty()).collect(), key),
    };
    for segment in path.split('/') {
        match segment {
            "" => {
                return Err(refuse(
                    "it has an empty path segment (a trailing or double '/')",
                ))
            }
            "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(refuse("'..' goes above the store's root"));
                }
            }
            name => parts.push(name),
        }
    }
    if parts.is_empty() || matches!(path.rsplit('/').next(), Some("." | "..")) {
        return Err(refuse("it names a directory, not an object"));
    }
    let resolved = parts.join("/");
    validate_key(&resolved).map_err(|e| refuse(e.message()))?;
    Ok(resolved)
}

impl LeaseUrl {
    /// Parse a lease URL, a path, or a bare name.
    pub fn parse(s: &str) -> Result<LeaseUrl> {
        if s.is_empty() {
            return Err(Error::invalid("lease name is empty"));
        }
        if s.starts_with('/') || s.starts_with("./") || s.starts_with("../") {
            let path = if s.starts_with('/') {
                PathBuf::from(s)
            } else {
                std::env::current_dir()
                    .map_err(|e| {
                        Error::invalid(format!("cannot resolve {s:?}: no current directory"))
                            .with_source(e)
                    })?
                    .join(s)
            };
            return split_path(s, &path);
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            if let Some(why) = typo::mistyped_url(s) {
                return Err(Error::invalid(format!("invalid lease name {s:?}: {why}")));
            }
            validate_key(s)?;
            return Ok(LeaseUrl {
                store: StoreUrl::DefaultFile,
                key: s.to_string(),
            });
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let options = parse_query(s, query)?;
        let no_options = |store: &str| -> Result<()> {
            match options.first() {
                Some((k, _)) => Err(invalid(
                    s,
                    format!("the {store} store takes no option {k:?}"),
                )),
                None => Ok(()),
            }
        };
        match scheme {
            "memory" => {
                no_options("memory")?;
                let (namespace, key) = rest
                    .split_once('/')
                    .ok_or_else(|| invalid(s, "expected memory://NAMESPACE/NAME"))?;
                if namespace.is_empty() {
                    return Err(invalid(s, "expected memory://NAMESPACE/NAME"));
                }
                let key = decode(s, key)?;
                validate_key(&key).map_err(|e| e.context(format!("lease URL {s:?}")))?;
                Ok(LeaseUrl {
                    store: StoreUrl::Memory {
                        namespace: decode(s, namespace)?,
                    },
                    key,
                })
            }
            "file" => {
                no_options("file")?;
                let path = rest.strip_prefix("localhost").unwrap_or(rest);
                if !path.starts_with('/') {
                    return Err(invalid(s, "expected file:///ABSOLUTE/PATH (three slashes)"));
                }
                split_path(s, Path::new(&decode(s, path)?))
            }
            "s3" => {
                let (bucket, key) = rest
                    .split_once('/')
                    .ok_or_else(|| invalid(s, "expected s3://BUCKET/NAME"))?;
                validate_bucket(s, bucket)?;
                let key = decode(s, key)?;
                validate_key(&key).map_err(|e| e.context(format!("lease URL {s:?}")))?;
                Ok(LeaseUrl {
                    store: StoreUrl::S3 {
                        bucket: bucket.to_string(),
                        options,
                    },
                    key,
                })
            }
            "gs" => {
                let (bucket, key) = rest
                    .split_once('/')
                    .ok_or_else(|| invalid(s, "expected gs://BUCKET/NAME"))?;
                validate_gcs_bucket(s, bucket)?;
                let key = decode(s, key)?;
                validate_key(&key).map_err(|e| e.context(format!("lease URL {s:?}")))?;
                Ok(LeaseUrl {
                    store: StoreUrl::Gcs {
                        bucket: bucket.to_string(),
                        options,
                    },
                    key,
                })
            }
            "az" | "azure" => {
                let expected = || invalid(s, format!("expected {scheme}://ACCOUNT/CONTAINER/NAME"));
                let (account, rest) = rest.split_once('/').ok_or_else(expected)?;
                let (container, key) = rest.split_once('/').ok_or_else(expected)?;
                validate_azure_account(s, account)?;
                validate_azure_container(s, container)?;
                let key = decode(s, key)?;
                validate_key(&key).map_err(|e| e.context(format!("lease URL {s:?}")))?;
                Ok(LeaseUrl {
                    store: StoreUrl::Azure {
                        account: account.to_string(),
                        container: container.to_string(),
                        options,
                    },
                    key,
                })
            }
            other => Err(invalid(
                s,
                format!(
                    "unsupported scheme {other:?} (use s3://, gs://, az://, file://, memory:// or \
                     a bare name)"
                ),
            )),
        }
    }
}

impl StoreUrl {
    /// Parse a store URL (a lease URL without the key): `s3://bucket?…`, `file:///dir`,
    /// `memory://namespace`, or a directory path.
    ///
    /// A store URL names the store alone: the keys given with it are read from the store's
    /// root, as they are for a `file://` store's directory. A path inside a bucket
    /// (`s3://bucket/locks`) is refused rather than dropped, so no key lands elsewhere than
    /// its user thought: name the lease `locks/gc`, or use a lease URL
    /// (`s3://bucket/locks/gc`). (Gates and `lease doctor` take such a path: see
    /// [`StoreUrl::parse_with_path`].)
    pub fn parse(s: &str) -> Result<StoreUrl> {
        let (store, path) = StoreUrl::parse_with_path(s)?;
        if !path.is_empty() {
            return Err(Error::invalid(format!(
                "store URL {s:?} names a path inside the store ({path:?}): a store URL names \
                 the store alone (the bucket or container), and keys are read from its root; \
                 give the bucket's URL with keys such as \"{path}/gc\", or a lease URL"
            )));
        }
        Ok(store)
    }

    /// Parse a store URL without a path (the part `parse` and `parse_with_path` share).
    fn parse_store(s: &str) -> Result<StoreUrl> {
        if s.starts_with('/') || s.starts_with('.') {
            let path = Path::new(s);
            let abs = if path.is_absolute() {
                path.to_path_buf()
            } else {
                std::env::current_dir()
                    .map_err(|e| Error::invalid("no current directory").with_source(e))?
                    .join(path)
            };
            return Ok(StoreUrl::File { root: abs });
        }
        // Parse the store with a placeholder key, then drop the key.
        let (base, query) = match s.split_once('?') {
            Some((b, q)) => (b.trim_end_matches('/'), Some(q)),
            None => (s.trim_end_matches('/'), None),
        };
        if !base.contains("://") {
            if let Some(why) = typo::mistyped_url(base) {
                return Err(Error::invalid(format!("invalid store URL {s:?}: {why}")));
            }
            return Err(Error::invalid(format!(
                "invalid store URL {s:?}: expected s3://BUCKET, gs://BUCKET, \
                 az://ACCOUNT/CONTAINER, file:///DIR or memory://NAMESPACE"
            )));
        }
        let probe = match query {
            Some(q) => format!("{base}/placeholder?{q}"),
            None => format!("{base}/placeholder"),
        };
        LeaseUrl::parse(&probe)
            .map(|l| l.store)
            .map_err(|e| Error::invalid(e.message().replace(&probe, s)))
    }

    /// Parse a store URL that may name a path inside the store (`s3://bucket/locks?…`,
    /// `memory://ns/jobs`): the store, and that path (`locks`, `jobs`; empty when there is
    /// none). A file store's path is its directory, so its path here is always empty.
    pub fn parse_with_path(s: &str) -> Result<(StoreUrl, String)> {
        let store = StoreUrl::parse_store(s)?;
        if matches!(store, StoreUrl::File { .. } | StoreUrl::DefaultFile) {
            return Ok((store, String::new()));
        }
        let (base, query) = match s.split_once('?') {
            Some((b, q)) => (b.trim_end_matches('/'), Some(q)),
            None => (s.trim_end_matches('/'), None),
        };
        let probe = match query {
            Some(q) => format!("{base}/placeholder?{q}"),
            None => format!("{base}/placeholder"),
        };
        let key = LeaseUrl::parse(&probe)
            .map_err(|e| Error::invalid(e.message().replace(&probe, s)))?
            .key;
        let path = key
            .strip_suffix("placeholder")
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string();
        Ok((store, path))
    }
}

fn write_options(f: &mut fmt::Formatter<'_>, options: &[(String, String)]) -> fmt::Result {
    f.write_str(&with_query("", options))
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory { namespace } => write!(f, "memory://{namespace}"),
            StoreUrl::File { root } => write!(f, "file://{}", file_root_in_url(root)),
            StoreUrl::DefaultFile => match default_root() {
                Ok(root) => write!(f, "file://{}", file_root_in_url(&root)),
                Err(_) => f.write_str("file://$LEASE_HOME"),
            },
            StoreUrl::S3 { bucket, options } => {
                write!(f, "s3://{bucket}")?;
                write_options(f, options)
            }
            StoreUrl::Gcs { bucket, options } => {
                write!(f, "gs://{bucket}")?;
                write_options(f, options)
            }
            StoreUrl::Azure {
                account,
                container,
                options,
            } => {
                write!(f, "az://{account}/{container}")?;
                write_options(f, options)
            }
        }
    }
}

impl fmt::Display for LeaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are shown as written but for `%` and `?` (see `path_in_url`): they are for
        // people and for LEASE_URL, which this parser reads back to the same lease.
        let store = self.store.to_string();
        let (base, query) = match store.split_once('?') {
            Some((b, q)) => (b.to_string(), Some(q.to_string())),
            None => (store, None),
        };
        write!(f, "{}", join_key(&base, &self.key))?;
        if let Some(q) = query {
            write!(f, "?{q}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
mod typo;
