use std::time::Duration;

use super::text::encode_snapshot;
use super::*;

/// The registry and its label cap are the process's: these tests take turns, and the one that
/// fills the cap forgets everything when it is done (else the others' names land in `_other`).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Distinct names per test: the registry is the process's, shared by parallel tests.
fn count(s: &Snapshot, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.value(name, labels)
}

#[test]
fn counters_histograms_and_the_text_format() {
    let _turn = serial();
    acquisition(
        "t/text",
        Outcome::Acquired,
        Duration::from_millis(30),
        Some(Duration::from_secs(2)),
    );
    acquisition("t/text", Outcome::Held, Duration::ZERO, None);
    renewal_landed("t/text", Duration::from_secs(20));
    renewal_failed("t/text");
    tenure_ended(
        "t/text",
        Duration::from_secs(90),
        Some(&LostReason::Expired),
    );
    request("memory", "update", "412", Duration::from_millis(1), 300, 0);
    let s = snapshot();
    let l = |o| [("lease", "t/text"), ("outcome", o)];
    assert_eq!(count(&s, "lease_acquisitions_total", &l("acquired")), 1.0);
    assert_eq!(count(&s, "lease_acquisitions_total", &l("held")), 1.0);
    assert_eq!(count(&s, "lease_renewals_total", &l("landed")), 1.0);
    assert_eq!(count(&s, "lease_renewals_total", &l("failed")), 1.0);
    assert_eq!(
        count(
            &s,
            "lease_losses_total",
            &[("lease", "t/text"), ("reason", "expired")]
        ),
        1.0
    );
    let Some(Sample {
        value: Value::Histogram {
            buckets,
            sum,
            count,
        },
        ..
    }) = s.sample("lease_handover_seconds", &[("lease", "t/text")])
    else {
        panic!("no hand-over histogram")
    };
    assert_eq!((*sum, *count), (2.0, 1));
    // Cumulative: nothing up to 1 s, one from 2.5 s on.
    assert_eq!(buckets.iter().find(|(le, _)| *le == 1.0).unwrap().1, 0);
    assert_eq!(buckets.iter().find(|(le, _)| *le == 2.5).unwrap().1, 1);

    let text = encode_snapshot(s);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE lease_acquisitions counter\n"),
        "{text}"
    );
    assert!(
        text.contains("lease_acquisitions_total{lease=\"t/text\",outcome=\"acquired\"} 1"),
        "{text}"
    );
    assert!(
        // The encoder puts `le` first; the order of labels means nothing to Prometheus.
        text.contains("lease_handover_seconds_bucket{le=\"2.5\",lease=\"t/text\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("lease_handover_seconds_bucket{le=\"+Inf\",lease=\"t/text\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("lease_handover_seconds_sum{lease=\"t/text\"} 2.0\n"),
        "{text}"
    );
}

#[test]
fn label_values_are_escaped() {
    let _turn = serial();
    acquisition(
        "t/quote\"back\\slash\nline",
        Outcome::Acquired,
        Duration::ZERO,
        None,
    );
    let text = encode_text();
    assert!(
        text.contains(r#"lease="t/quote\"back\\slash\nline""#),
        "{text}"
    );
}

#[test]
fn a_process_with_many_leases_exports_a_bounded_number_of_names() {
    let _turn = serial();
    // The limit is the process's; other tests admit a few names of their own meanwhile.
    set_lease_label_limit(DEFAULT_LEASE_LABELS);
    for i in 0..10_000 {
        acquisition(
            &format!("t/many/{i}"),
            Outcome::Acquired,
            Duration::ZERO,
            None,
        );
    }
    let s = snapshot();
    let f = s.family("lease_acquisitions_total").unwrap();
    let names: std::collections::HashSet<&str> = f
        .samples
        .iter()
        .flat_map(|s| s.labels.iter().filter(|(k, _)| *k == "lease"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(names.len() <= DEFAULT_LEASE_LABELS + 1, "{}", names.len());
    assert!(names.contains(OTHER_LEASE));
    let total: f64 = f
        .samples
        .iter()
        .filter(|s| {
            s.labels
                .iter()
                .any(|(k, v)| *k == "lease" && (v.starts_with("t/many/") || v == OTHER_LEASE))
        })
        .map(|s| match s.value {
            Value::Number(v) => v,
            _ => 0.0,
        })
        .sum();
    assert!(total >= 10_000.0, "every acquisition is counted: {total}");
    reset();
}

#[test]
fn request_costs_follow_the_price_list() {
    let _turn = serial();
    let before = snapshot().value("lease_store_cost_dollars_total", &[("store", "s3")]);
    for _ in 0..1000 {
        request("s3", "update", "200", Duration::ZERO, 500, 0);
        request("s3", "get", "304", Duration::ZERO, 0, 0);
        request("s3", "get", "error", Duration::ZERO, 0, 0); // no answer: not billed
    }
    let after = snapshot().value("lease_store_cost_dollars_total", &[("store", "s3")]);
    let spent = after - before;
    assert!((spent - (0.005 + 0.0004)).abs() < 1e-9, "{spent}");
}

/// The counting wrapper must not change what a store says of itself: a default of the `Store`
/// trait that it did not forward turned the file store's dead-holder rule off (cli/tests/
/// waiting.rs waited a killed holder out) and made the file and memory stores' answers look
/// like a gateway's (takeovers confirmed by an extra stamp).
#[tokio::test]
async fn the_counted_store_says_what_the_store_says_of_itself() {
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<crate::store::DynStore> = vec![
        std::sync::Arc::new(crate::store::file::FileStore::open(dir.path()).unwrap()),
        std::sync::Arc::new(crate::store::memory::MemoryStore::named("t/counted")),
    ];
    for raw in stores {
        let counted = instrumented::Instrumented::wrap(raw.clone());
        assert_eq!(
            (
                counted.url(),
                format!("{:?}", counted.capabilities()),
                counted.min_write_interval(),
                counted.dead_holder_rule(),
                counted.answers_carry_store_clock(),
                counted.in_process(),
                counted.watch("k").is_some(),
            ),
            (
                raw.url(),
                format!("{:?}", raw.capabilities()),
                raw.min_write_interval(),
                raw.dead_holder_rule(),
                raw.answers_carry_store_clock(),
                raw.in_process(),
                raw.watch("k").is_some(),
            ),
            "{}",
            raw.url()
        );
        // Wrapped once: a store already counted (the process's, from `StoreUrl::open`) is not
        // counted twice by the client built on it.
        let again = instrumented::Instrumented::wrap(counted.clone());
        assert!(std::sync::Arc::ptr_eq(&again, &counted));
    }
}
