//! Classifying a failed call (protocol §2) from its status and error body.

use serde::Deserialize;

use super::permission;
use crate::error::Error;
use crate::store::Op;

/// A status that is not the call's success, classified.
#[derive(Debug)]
pub(super) enum Failure {
    NotModified,
    NotFound,
    ConditionFailed,
    Error(Error),
}

/// The error GCS puts in a failed call's body.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ErrorBody {
    pub(super) error: Option<ErrorDetail>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ErrorDetail {
    #[serde(default)]
    pub(super) message: String,
}

pub(super) struct ClassifyInput<'a> {
    pub(super) op: Op,
    pub(super) status: u16,
    /// The `message` of GCS's error body, or the body's first characters.
    pub(super) message: &'a str,
    pub(super) what: &'a str,
    pub(super) bucket: &'a str,
    pub(super) key: &'a str,
    pub(super) credentials: &'a str,
}

/// Whether a 403's message says the object is protected rather than the caller refused: GCS
/// answers an overwrite or delete of an object under an event-based or temporary hold, or
/// younger than the bucket's retention period, with 403 ("Object 'B/K' is under active
/// Event-Based hold and cannot be deleted, overwritten or archived until hold is removed.",
/// "… is subject to bucket's retention policy …"; cloud.google.com/storage/docs/object-holds,
/// cloud.google.com/storage/docs/bucket-lock).
pub(super) fn is_hold(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("hold") && m.contains("cannot be") || m.contains("retention policy")
}

/// Whether a 404's message is about the bucket rather than the object.
pub(super) fn no_such_bucket(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    !m.starts_with("no such object") && m.contains("bucket")
}

/// The status part of the classification, separate so it can be tested on its own.
pub(super) fn classify_status(i: ClassifyInput<'_>) -> Failure {
    // The answer's status goes with the error, for the metrics' status label.
    let status = i.status;
    match classify_answer(i) {
        Failure::Error(e) => Failure::Error(e.with_http_status(status)),
        answer => answer,
    }
}

fn classify_answer(i: ClassifyInput<'_>) -> Failure {
    let ClassifyInput {
        op,
        status,
        message,
        what,
        bucket,
        key,
        credentials,
    } = i;
    let said = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {message}")
    };
    let store = |hint: String| Failure::Error(Error::store(format!("{what}: {said}: {hint}")));
    let unavailable = || {
        Failure::Error(Error::unavailable(format!(
            "{what}: {said} ({})",
            op.unknown_outcome()
        )))
    };
    match status {
        304 if op == Op::Get => Failure::NotModified,
        412 if op != Op::Get => Failure::ConditionFailed,
        404 if no_such_bucket(message) => store(format!(
            "bucket {bucket:?} does not exist on this endpoint: check the bucket name and the \
             endpoint"
        )),
        404 if op == Op::Get => Failure::NotFound,
        404 if op == Op::Delete => Failure::ConditionFailed,
        404 => store(format!(
            "the server answered 404 to a write of {key:?}: check the bucket name and the \
             endpoint"
        )),
        408 | 429 => unavailable(),
        500..=599 => unavailable(),
        401 => store(format!(
            "the credentials were not accepted: check {credentials}"
        )),
        403 if op != Op::Get && is_hold(message) => store(
            "the object is under a hold or the bucket's retention policy, so it cannot be \
             overwritten or deleted (not a permission problem): a lease record is rewritten at \
             every renewal, so keep leases in a bucket without a default event-based hold or a \
             retention policy (`lease doctor` checks a bucket)"
                .into(),
        ),
        403 => store(format!(
            "access denied: check that {credentials} have {} on gs://{bucket}/{key} (roles/storage.objectUser grants what a worker needs)",
            permission(op)
        )),
        400..=499 => store(
            "the server rejected the request; if it does not support preconditions \
             (ifGenerationMatch), it cannot hold leases: run `lease doctor`"
                .into(),
        ),
        // A 2xx that could not be used, a 1xx or 3xx we do not expect: the reply is not
        // trustworthy, so the outcome is unknown.
        _ => unavailable(),
    }
}
