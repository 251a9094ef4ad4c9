//! Durations as people write and read them: `500ms`, `30s`, `5m`, `1h` (parsed by humantime),
//! printed in the same short form. One place for the CLI, the URL options of every store and
//! the messages.

use std::time::Duration;

use crate::error::{Error, Result};

/// Parse a duration written as `500ms`, `30s`, `5m`, `1h`, `1m30s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let bad = || {
        Error::invalid(format!(
            "invalid duration {s:?}: write it like 500ms, 30s, 5m or 1h"
        ))
    };
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = t.parse::<f64>() {
        if !secs.is_finite() || !(0.0..=1e12).contains(&secs) {
            return Err(bad());
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(t).map_err(|_| bad())
}

/// `1.5s`, `250ms`, `5m`, `2h`: short and exact enough for messages.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 && !d.is_zero() {
        return format!("{}us", d.as_micros());
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms.is_multiple_of(3_600_000) {
        return format!("{}h", ms / 3_600_000);
    }
    if ms.is_multiple_of(60_000) {
        return format!("{}m", ms / 60_000);
    }
    if ms.is_multiple_of(1000) {
        return format!("{}s", ms / 1000);
    }
    let secs = format!("{:.3}", d.as_secs_f64());
    format!("{}s", secs.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        for bad in ["", "abc", "-1s", "5 parsecs", "NaN", "-3"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }
}
