//! The store's clock: the `Date` header of each response, captured by an interceptor.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_sdk_s3::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use aws_sdk_s3::primitives::{DateTime, DateTimeFormat};

/// Captures the `Date` header of the response to one call: the store's clock.
#[derive(Debug, Clone, Default)]
pub(super) struct DateCapture(Arc<Mutex<Option<String>>>);

impl Intercept for DateCapture {
    fn name(&self) -> &'static str {
        "lease::store::s3::DateCapture"
    }

    fn read_after_transmit(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        // Found by comparing names, not `get("date")`: that parses the name into the `http`
        // crate's uninitialised scratch buffer, whose optimized reads valgrind (the C ABI's
        // memcheck run) reports as jumps on uninitialised bytes.
        let date = context
            .response()
            .headers()
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("date"));
        if let Some((_, date)) = date {
            *self.0.lock().unwrap() = Some(date.to_string());
        }
        Ok(())
    }
}

impl DateCapture {
    pub(super) fn server_now(&self) -> Option<SystemTime> {
        let date = self.0.lock().unwrap().clone()?;
        parse_http_date(&date)
    }
}

/// An HTTP date (`Sun, 22 Nov 2026 08:30:00 GMT`) as a `SystemTime`.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    DateTime::from_str(s.trim(), DateTimeFormat::HttpDate)
        .ok()
        .and_then(|d| SystemTime::try_from(d).ok())
}
