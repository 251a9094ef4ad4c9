//! The backoff and the client's randomness as the decisions see them.

use super::testing::*;
use super::*;
use crate::options::LeaseOptions;

fn pauses(mut b: Backoff, n: usize) -> Vec<Duration> {
    let e = Counter::default();
    (0..n).map(|_| b.next(&e)).collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn backoff_doubles_from_its_start_up_to_its_cap() {
    let b = Backoff::between(ms(10), ms(70));
    assert_eq!(pauses(b, 5), [ms(10), ms(20), ms(40), ms(70), ms(70)]);
}

#[test]
fn a_leases_backoff_starts_at_a_tenth_of_the_renew_interval_up_to_50ms_and_stops_at_half_of_it() {
    // renew 100 ms: from 10 ms up to 50 ms.
    let short = timing_of(LeaseOptions::new(secs(10.0)).renew_interval(ms(100)));
    assert_eq!(
        pauses(Backoff::for_timing(&short), 4),
        [ms(10), ms(20), ms(40), ms(50)]
    );
    // renew 10 s: from 50 ms up to 5 s.
    let long = timing_of(LeaseOptions::new(secs(30.0)).renew_interval(secs(10.0)));
    assert_eq!(
        pauses(Backoff::for_timing(&long), 9),
        [
            ms(50),
            ms(100),
            ms(200),
            ms(400),
            ms(800),
            ms(1600),
            ms(3200),
            ms(5000),
            ms(5000)
        ]
    );
    // renew 5 ms: never below 1 ms, and the cap is never below the start.
    let tiny = timing_of(LeaseOptions::new(ms(100)).renew_interval(ms(5)));
    assert_eq!(
        pauses(Backoff::for_timing(&tiny), 3),
        [ms(1), ms(2), Duration::from_micros(2500)]
    );
    let tinier = timing_of(LeaseOptions::new(ms(100)).renew_interval(ms(1)));
    assert_eq!(pauses(Backoff::for_timing(&tinier), 2), [ms(1), ms(1)]);
}

#[test]
fn the_clients_randomness_is_what_the_decisions_draw() {
    let e: &dyn Entropy = &Rng::seeded(7);
    let reference = Rng::seeded(7);
    let (a, b) = (e.nonce(), e.nonce());
    assert_eq!(
        (a.clone(), b.clone()),
        (reference.nonce(), reference.nonce())
    );
    assert_ne!(a, b, "each write draws its own nonce");
    assert_eq!(a.len(), 16);
    for _ in 0..100 {
        let d = e.jitter(secs(1.0), 0.25);
        assert_eq!(d, reference.jitter(secs(1.0), 0.25));
        assert!(d >= ms(750) && d <= ms(1250), "{d:?}");
    }
}

#[test]
fn jittered_backoff_stays_within_a_quarter_of_each_step() {
    let rng = Rng::seeded(3);
    let mut b = Backoff::between(ms(100), ms(400));
    for step in [100, 200, 400, 400] {
        let d = b.next(&rng);
        assert!(
            d >= ms(step) * 3 / 4 && d <= ms(step) * 5 / 4,
            "{d:?} for {step} ms"
        );
    }
}
