//! One error model for the whole library.
//!
//! `ErrorKind` tells a caller what to do (give up, retry later, stop acting as holder); the
//! message says what happened to which lease and is not API. Every binding maps the kinds
//! exactly once (C status codes, Python exception classes, Node `code` strings).

use std::fmt;

use crate::record::Holder;

/// What went wrong, as far as a caller needs to decide what to do next.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The lease is held by another holder and the caller asked not to wait.
    Held,
    /// The wait for the lease ran out.
    Timeout,
    /// A waiting call was cancelled by its caller.
    Cancelled,
    /// The lease was lost (taken over, broken, expired without renewal, or deleted).
    Lost,
    /// A write carried an epoch lower than one already recorded: a newer holder exists.
    Fenced,
    /// A version-conditional write found the object changed since the version the caller
    /// read (by a writer of the same or a lower epoch; a higher epoch is `Fenced`). Read
    /// again and decide again.
    Conflict,
    /// The store is unavailable or overloaded; the same call may succeed later.
    Unavailable,
    /// Bad input: URL, name, ttl, option, or a value of the wrong shape.
    Invalid,
    /// A permanent store problem: permissions, missing bucket or directory, missing credentials,
    /// a store that does not honour conditional writes.
    Store,
    /// A stored object could not be understood.
    Corrupt,
    /// A bug in this library (including a caught panic at a language boundary).
    Internal,
    /// A queued lock's record has no room for another participant: its limit (in bytes) is
    /// reached. Nothing was written; the same call may succeed once others have left.
    QueueFull,
    /// A stored record was written by a newer version of this library (a format, mode or
    /// feature this version does not know). It is never taken over or written over: upgrade
    /// this client.
    Unsupported,
}

impl ErrorKind {
    /// Every kind there is, in declaration order: what bindings map and their tests walk.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::Held,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::Lost,
        ErrorKind::Fenced,
        ErrorKind::Conflict,
        ErrorKind::Unavailable,
        ErrorKind::Invalid,
        ErrorKind::Store,
        ErrorKind::Corrupt,
        ErrorKind::Internal,
        ErrorKind::QueueFull,
        ErrorKind::Unsupported,
    ];

    /// The kind whose [`as_str`](Self::as_str) name is `name`.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// A stable, lower-case name used in messages, JSON output and bindings.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Held => "held",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Lost => "lost",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Store => "store",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Internal => "internal",
            ErrorKind::QueueFull => "queue_full",
            ErrorKind::Unsupported => "unsupported",
        }
    }

    /// True when repeating the same call later may succeed without any change by the caller.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Unavailable | ErrorKind::Held | ErrorKind::Timeout | ErrorKind::QueueFull
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The library's error: a kind, a one-line message, and what is known about the lease.
/// Boxed, so results stay one pointer wide on the success path.
#[derive(Debug)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: ErrorKind,
    message: String,
    lease: Option<String>,
    holder: Option<Holder>,
    epoch: Option<u64>,
    /// The HTTP status the store answered with, when it answered (for the metrics' status
    /// label: 429, 5xx, …).
    http_status: Option<u16>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                lease: None,
                holder: None,
                epoch: None,
                http_status: None,
                source: None,
            }),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Invalid, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    pub fn store(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Store, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Internal, message)
    }

    /// The lease (URL or key) this error is about.
    pub fn with_lease(mut self, lease: impl Into<String>) -> Self {
        self.inner.lease = Some(lease.into());
        self
    }

    /// The holder that was in the way, when known.
    pub fn with_holder(mut self, holder: Holder) -> Self {
        self.inner.holder = Some(holder);
        self
    }

    /// The epoch involved, when known.
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.inner.epoch = Some(epoch);
        self
    }

    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.inner.source = Some(Box::new(source));
        self
    }

    /// Record the HTTP status of the store's answer.
    pub fn with_http_status(mut self, status: u16) -> Self {
        self.inner.http_status = Some(status);
        self
    }

    /// The HTTP status of the store's answer, when there was one.
    pub fn http_status(&self) -> Option<u16> {
        self.inner.http_status
    }

    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    pub fn message(&self) -> &str {
        &self.inner.message
    }

    pub fn lease(&self) -> Option<&str> {
        self.inner.lease.as_deref()
    }

    pub fn holder(&self) -> Option<&Holder> {
        self.inner.holder.as_ref()
    }

    pub fn epoch(&self) -> Option<u64> {
        self.inner.epoch
    }

    /// The same error with a different message prefix, keeping kind and details.
    pub(crate) fn context(mut self, what: impl fmt::Display) -> Self {
        self.inner.message = format!("{what}: {}", self.inner.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)?;
        if let Some(source) = &self.inner.source {
            let s = source.to_string();
            if !s.is_empty() && !self.inner.message.contains(&s) {
                write!(f, " ({s})")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_includes_source_once() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = Error::store("cannot open /x").with_source(io);
        assert_eq!(e.to_string(), "cannot open /x (denied)");
        assert_eq!(e.kind(), ErrorKind::Store);
    }

    #[test]
    fn kinds_have_stable_names() {
        let all = ErrorKind::ALL;
        let names: std::collections::HashSet<_> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), all.len());
        for k in all {
            assert_eq!(ErrorKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(ErrorKind::from_name("nonsense"), None);
    }
}
