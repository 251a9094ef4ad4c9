//! Bare names that are mistyped URLs (`s3:/bucket/x`, `file:/tmp/x`, `s3//bucket/x`).
//!
//! A bare name is a lease in the default local directory, so a URL typo would silently become
//! a lock on this machine: two machines that meant to share `s3://bucket/x` would each hold
//! their own. A bare name is refused, with the likely fix, when
//! - it starts with one of our schemes (any case) and a colon: `s3:/b/x`, `S3:b/x`, `file:/x`;
//! - it starts with any URL scheme and `:/`: `https:/host/x`, `sftp:/x`;
//! - its first segment is one of our schemes followed by `//`: `s3//bucket/x`.
//!
//! Other colons stay legitimate in names (`db:migrate`, `tenant:42/gc`, `jobs/a:b`): a colon is
//! a URL's only where it ends a scheme, and an unknown word followed by `:` and no `/` is not
//! read as one.

/// The schemes `LeaseUrl::parse` knows.
const SCHEMES: [&str; 6] = ["s3", "gs", "az", "azure", "file", "memory"];

/// Whether `word` has the shape of a URL scheme (RFC 3986: a letter, then letters, digits,
/// `+`, `-`, `.`).
fn is_scheme(word: &str) -> bool {
    let mut bytes = word.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// The URL a mistyped one most likely meant: `scheme://` followed by the rest without its
/// leading slashes (`file:///` and an absolute path for `file`).
fn fixed(scheme: &str, rest: &str) -> String {
    let rest = rest.trim_start_matches('/');
    match scheme {
        "file" => format!("file:///{rest}"),
        _ => format!("{scheme}://{rest}"),
    }
}

/// Why `s`, given where a bare name (or for a store, a directory) is expected, is refused as
/// a mistyped URL (`it looks like …`), with the likely fix; `None` when it is a legitimate
/// bare name.
pub(super) fn mistyped_url(s: &str) -> Option<String> {
    let why = "a bare name is a lease on this machine only, so a mistyped URL is refused rather \
               than made a local lock";
    if let Some((word, rest)) = s.split_once(':') {
        let lower = word.to_ascii_lowercase();
        if SCHEMES.contains(&lower.as_str()) {
            return Some(format!(
                "it looks like a mistyped URL: did you mean {:?}? ({why})",
                fixed(&lower, rest)
            ));
        }
        if is_scheme(word) && rest.starts_with('/') {
            return Some(format!(
                "it looks like a URL, but {word:?} is not a supported scheme (use s3://, gs://, \
                 az://, file:///, memory:// or a bare name without ':/'; {why})"
            ));
        }
    }
    if let Some((word, rest)) = s.split_once("//") {
        let lower = word.to_ascii_lowercase();
        if SCHEMES.contains(&lower.as_str()) {
            return Some(format!(
                "it looks like a mistyped URL: did you mean {:?}? ({why})",
                fixed(&lower, rest)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::mistyped_url;

    #[test]
    fn mistyped_urls_are_found_with_their_fix() {
        for (typo, fix) in [
            ("s3:/bucket/x", "s3://bucket/x"),
            ("s3:bucket/x", "s3://bucket/x"),
            ("S3:/bucket/x", "s3://bucket/x"),
            ("gs:/b/x", "gs://b/x"),
            ("az:/acct/cont/x", "az://acct/cont/x"),
            ("azure:acct/cont/x", "azure://acct/cont/x"),
            ("file:/tmp/x", "file:///tmp/x"),
            ("file:tmp/x", "file:///tmp/x"),
            ("file://tmp/x", "file:///tmp/x"),
            ("memory:/ns/x", "memory://ns/x"),
            ("s3//bucket/x", "s3://bucket/x"),
            ("file//tmp/x", "file:///tmp/x"),
            ("s3:", "s3://"),
        ] {
            let why = mistyped_url(typo).unwrap_or_else(|| panic!("{typo} passed"));
            assert!(
                why.contains(&format!("did you mean {fix:?}")),
                "{typo}: {why}"
            );
        }
        for other in ["https:/host/x", "sftp:/x", "c:/x"] {
            let why = mistyped_url(other).unwrap_or_else(|| panic!("{other} passed"));
            assert!(why.contains("not a supported scheme"), "{other}: {why}");
        }
    }

    #[test]
    fn names_with_colons_that_cannot_be_a_scheme_stay_bare_names() {
        for name in [
            "nightly-gc",
            "jobs/gc",
            "db:migrate",
            "tenant:42/gc",
            "jobs/s3:x",
            "jobs/a:/b",
            "s3/sync",
            "s3-sync",
            "files:x",
            "x//y",
            "42:/x",
            ":x",
        ] {
            assert_eq!(mistyped_url(name), None, "{name}");
        }
    }
}
