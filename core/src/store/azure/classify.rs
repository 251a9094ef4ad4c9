//! Classifying a failed call (protocol §2) from its status and error code.

use super::data_action;
use crate::error::Error;
use crate::store::Op;

#[derive(Debug)]
pub(super) enum Failure {
    NotModified,
    NotFound,
    ConditionFailed,
    Error(Error),
}

pub(super) struct ClassifyInput<'a> {
    pub(super) op: Op,
    pub(super) status: u16,
    /// `x-ms-error-code`.
    pub(super) code: &'a str,
    /// The error's message, from the body.
    pub(super) message: &'a str,
    pub(super) what: &'a str,
    pub(super) container: &'a str,
    pub(super) credentials: &'a str,
}

/// Error codes of a blob that carries an Azure blob lease someone took on it.
pub(super) const LEASE_CODES: &[&str] = &[
    "LeaseIdMissing",
    "LeaseIdMismatchWithBlobOperation",
    "LeaseLost",
    "LeaseNotPresentWithBlobOperation",
    "LeaseIsBreakingAndCannotBeAcquired",
    "LeaseAlreadyPresent",
];

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
            "{what}: {said} ({})",
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
        (403, "AuthenticationFailed") if is_clock_skew(message) => store(
            "the request's date is too far from the service's clock (Azure accepts 15 minutes): \
             fix this machine's clock (NTP)"
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

/// Whether an `AuthenticationFailed` message says the request's date was refused. Azure
/// puts the reason in `<AuthenticationErrorDetail>` ("Request date header too old: '…'", or
/// "… too far in the future"), which [`error_message`] appends; its `<Message>` is the generic
/// "Server failed to authenticate the request" (issue 29: the hint looked for "time" there).
pub(super) fn is_clock_skew(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("request date header") || m.contains("x-ms-date") && m.contains("too")
}

/// The text of the first `<TAG>…</TAG>` of `body`, whitespace folded.
fn element(body: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = body.find(&open)? + open.len();
    let rest = &body[start..];
    let end = rest.find(&format!("</{tag}>")).unwrap_or(rest.len());
    Some(rest[..end].split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The message in an Azure error body (`<Error><Code>…</Code><Message>…</Message>`), with the
/// `<AuthenticationErrorDetail>` Azure adds to an `AuthenticationFailed` appended.
pub(super) fn error_message(body: &str) -> String {
    let Some(message) = element(body, "Message") else {
        return String::new();
    };
    // Azure appends RequestId and Time on lines of their own: keep what comes before.
    let message = message
        .split("RequestId:")
        .next()
        .unwrap_or(&message)
        .trim()
        .to_string();
    match element(body, "AuthenticationErrorDetail") {
        Some(detail) if !detail.is_empty() => format!("{message} ({detail})"),
        _ => message,
    }
}
