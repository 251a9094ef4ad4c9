//! When a shared session's one confirmation task reads its grants' lock records (issue 24).
//!
//! Each grant is believed until a ttl after the send of the last read that showed it
//! ([`GrantHold::deadline`](crate::protocol::queue::holder::GrantHold::deadline)), and the
//! task reads each once per round, a round per renew interval (`ttl/3`). One read after the
//! other cannot keep that pace on a slow store: on S3, 1,000 grants at about 30 ms a read take
//! 30 s, longer than a ttl of 30 s allows, and every grant's belief would lapse between two
//! reads of its record. So a round's reads:
//! - run concurrently, at most [`READS_IN_FLIGHT`] at once (a bound on the sockets and the
//!   store's request rate one process takes, whatever the number of grants);
//! - start spread evenly over the renew interval ([`read_offset`]), in the order of the
//!   grants' numbers, so the store sees a steady rate rather than a burst each interval and a
//!   grant keeps its place in the round from one round to the next (the gap between two reads
//!   of its record stays about one renew interval); the start times are rounded down to a
//!   [`TICK`], so the task wakes at most ten times a second whatever the number of grants;
//! - and a round starts a renew interval after the one before started, or at once when that
//!   one ran over ([`next_round`]).

use std::time::Duration;

use crate::clock::Instant;

/// The most confirmation reads one shared session has in flight: at 30 ms a read, 64 at once
/// confirm about 2,000 grants a second, so 10,000 grants well inside a renew interval of 10 s.
pub const READS_IN_FLIGHT: usize = 64;

/// The grain of the reads' start times: the reads due within one tick start together.
pub const TICK: Duration = Duration::from_millis(100);

/// How long after its round starts the read of the `i`-th of `count` grants (in the order of
/// their numbers) starts: `i/count` of the renew interval, rounded down to a [`TICK`].
pub fn read_offset(i: usize, count: usize, renew: Duration) -> Duration {
    if count == 0 {
        return Duration::ZERO;
    }
    let nanos = renew.as_nanos() * i.min(count) as u128 / count as u128;
    let ticks = nanos / TICK.as_nanos();
    TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// When the round after one that started at `started` starts, at `now`: a renew interval
/// later, or at once if that has passed (the round ran over).
pub fn next_round(started: Instant, renew: Duration, now: Instant) -> Instant {
    (started + renew).max(now)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // a fixed origin for the instants

    use super::*;

    #[test]
    fn reads_start_evenly_spread_over_the_renew_interval_in_order() {
        let renew = Duration::from_secs(10);
        let offsets: Vec<Duration> = (0..4).map(|i| read_offset(i, 4, renew)).collect();
        assert_eq!(
            offsets,
            [0.0, 2.5, 5.0, 7.5].map(Duration::from_secs_f64).to_vec()
        );
        assert_eq!(read_offset(0, 1, renew), Duration::ZERO);
        assert_eq!(read_offset(0, 0, renew), Duration::ZERO);
        // 10,000 grants: a hundred reads a tick, the last tick's a tick before the next round.
        assert_eq!(read_offset(1, 10_000, renew), Duration::ZERO);
        assert_eq!(read_offset(99, 10_000, renew), Duration::ZERO);
        assert_eq!(read_offset(100, 10_000, renew), TICK);
        assert_eq!(read_offset(9_999, 10_000, renew), renew - TICK);
        let starts: std::collections::BTreeSet<Duration> =
            (0..10_000).map(|i| read_offset(i, 10_000, renew)).collect();
        assert_eq!(starts.len(), 100, "one wake-up a tick");
        // An interval shorter than a tick: every read at the round's start.
        assert_eq!(read_offset(3, 4, Duration::from_millis(80)), Duration::ZERO);
        // Never past the interval, whatever it is asked.
        assert_eq!(read_offset(7, 4, renew), renew);
    }

    #[test]
    fn a_round_starts_a_renew_interval_after_the_last_or_at_once_when_it_ran_over() {
        let t0 = Instant::now();
        let renew = Duration::from_secs(10);
        let early = t0 + Duration::from_secs(4);
        assert_eq!(next_round(t0, renew, early), t0 + renew);
        let late = t0 + Duration::from_secs(13);
        assert_eq!(next_round(t0, renew, late), late);
        assert_eq!(next_round(t0, renew, t0 + renew), t0 + renew);
    }

    #[test]
    fn the_bound_on_reads_in_flight_confirms_ten_thousand_grants_at_s3_speed_within_a_round() {
        // 10,000 grants, 30 ms a read, a renew interval of 10 s (ttl 30 s).
        let reads_per_second = READS_IN_FLIGHT as f64 / 0.030;
        assert!(10_000.0 / reads_per_second < 10.0);
    }
}
