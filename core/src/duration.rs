//! Durations as people write and read them: `500ms`, `30s`, `1.5s`, `5m`, `1h`, `1m30s`, always
//! with a unit, printed in the same short form (what is printed parses back). One place for the
//! CLI, the URL options of every store and the messages. Parsed here rather than by humantime,
//! which reads no fractions (`1.5s`, which `format_duration` prints).

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::error::{Error, Result};

/// Parse a duration: one or more numbers, each with its unit (`us`, `ms`, `s`, `m`, `h`, `d`),
/// such as `500ms`, `30s`, `1.5s`, `5m`, `1h` or `1m30s`: what [`format_duration`] prints.
///
/// A number alone is refused, with the fix in the message: `--ttl 30000` meant milliseconds
/// to its author and would have been 500 minutes as seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    parse_duration_in(s, Duration::ZERO..=Duration::MAX)
}

/// [`parse_duration`] for a value that must lie in `range`: a number without a unit is offered
/// only the units that make it a value in range (`--ttl 30000`: `30000ms` or `30000s`, not
/// `30000m`, past the 24 h a ttl may be). The range itself is checked by whoever takes the
/// value, with its own message.
pub fn parse_duration_in(s: &str, range: RangeInclusive<Duration>) -> Result<Duration> {
    let t = s.trim();
    let bad = || {
        Error::invalid(format!(
            "invalid duration {s:?}: write it like 500ms, 30s, 1.5s, 5m or 1h"
        ))
    };
    if let Some(n) = t.parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0) {
        let fits: Vec<String> = [("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0)]
            .into_iter()
            .filter(|(_, secs)| {
                Duration::try_from_secs_f64(n * secs).is_ok_and(|d| range.contains(&d))
            })
            .map(|(unit, _)| format!("{t}{unit}"))
            .collect();
        let write = match fits.as_slice() {
            [] => format!(
                "write it like 500ms, 30s or 5m, between {} and {}",
                format_duration(*range.start()),
                format_duration(*range.end())
            ),
            [one] => format!("write {one}"),
            [first @ .., last] => format!("write {} or {last}", first.join(", ")),
        };
        return Err(Error::invalid(format!(
            "invalid duration {s:?}: a number needs a unit: {write}"
        )));
    }
    if t.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty()
            || (number.contains('.') && fraction.is_empty())
            || !fraction.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let unit_ns: u128 = match unit {
            "us" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3600 * 1_000_000_000,
            "d" => 86_400 * 1_000_000_000,
            _ => return Err(bad()),
        };
        let whole: u128 = whole.parse().map_err(|_| bad())?;
        let mut ns = whole.checked_mul(unit_ns).ok_or_else(bad)?;
        // The fraction, exactly, to the nanosecond.
        let mut scale = unit_ns;
        for digit in fraction.bytes() {
            scale /= 10;
            ns += u128::from(digit - b'0') * scale;
        }
        let term = u64::try_from(ns / 1_000_000_000)
            .ok()
            .filter(|secs| *secs <= 1_000_000_000_000)
            .map(|secs| Duration::new(secs, (ns % 1_000_000_000) as u32))
            .ok_or_else(bad)?;
        total = total.checked_add(term).ok_or_else(bad)?;
        rest = after;
    }
    Ok(total)
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
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86400));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        for bad in [
            "",
            "abc",
            "-1s",
            "5 parsecs",
            "NaN",
            "-3",
            "1.s",
            ".5s",
            "1x",
            "s",
            "1m1",
            "1e3s",
            "1..5s",
            "1.2.3s",
            "inf",
            "99999999999999999999h",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{bad}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }

    /// `--ttl 30000` meant milliseconds to its author and became 500 minutes: a number alone
    /// is refused, and the message says how to write it.
    #[test]
    fn a_number_without_a_unit_is_refused_with_the_fix_in_the_message() {
        for bare in ["30000", "2.5", "0", " 30 "] {
            let e = parse_duration(bare).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{bare}");
            let n = bare.trim();
            assert!(
                e.message().contains("needs a unit")
                    && e.message().contains(&format!("{n}ms"))
                    && e.message().contains(&format!("{n}s")),
                "{bare}: {e}"
            );
        }
    }

    /// A ttl of `30000` was offered `30000m` and `30000h`, past the 24 h limit (issue 28).
    #[test]
    fn a_number_for_a_bounded_value_is_offered_only_units_in_range() {
        let ttl = Duration::from_millis(100)..=Duration::from_secs(24 * 3600);
        let e = parse_duration_in("30000", ttl.clone()).unwrap_err();
        assert!(e.message().ends_with("write 30000ms or 30000s"), "{e}");
        let e = parse_duration_in("30", ttl.clone()).unwrap_err();
        assert!(e.message().ends_with("write 30s or 30m"), "{e}");
        let e = parse_duration_in("2", ttl.clone()).unwrap_err();
        assert!(e.message().ends_with("write 2s, 2m or 2h"), "{e}");
        let e = parse_duration_in("0", ttl.clone()).unwrap_err();
        assert!(e.message().ends_with("between 100ms and 24h"), "{e}");
        assert_eq!(
            parse_duration_in("1m", ttl).unwrap(),
            Duration::from_secs(60)
        );
    }

    /// Every printed duration reads back as the same duration: one format in and out.
    #[test]
    fn printed_durations_parse_back() {
        for ms in [
            1u64, 20, 250, 999, 1000, 1500, 1234, 2500, 30_000, 59_999, 60_000, 90_000, 300_000,
            3_599_000, 3_600_000, 5_400_000, 86_400_000,
        ] {
            let d = Duration::from_millis(ms);
            let text = format_duration(d);
            assert_eq!(
                parse_duration(&text).unwrap(),
                d,
                "{ms}ms printed as {text}"
            );
        }
        let d = Duration::from_micros(250);
        assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
    }
}
