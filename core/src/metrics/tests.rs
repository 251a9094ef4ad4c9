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
    request(
        StoreKind::Memory,
        Op::Update,
        Status::PreconditionFailed,
        Duration::from_millis(1),
        300,
        0,
    );
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
        let s3 = StoreKind::S3;
        request(s3, Op::Update, Status::Ok, Duration::ZERO, 500, 0);
        request(s3, Op::Get, Status::NotModified, Duration::ZERO, 0, 0);
        request(s3, Op::Get, Status::Error, Duration::ZERO, 0, 0); // no answer: not billed
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

/// A lease's renewal handle counts where a lookup by name would: under its key, under a new
/// key when the lease's key changes (a grant's), and in the new registry after a reset.
#[test]
fn a_renewal_handle_counts_where_a_lookup_would() {
    let _turn = serial();
    let h = RenewalMetrics::default();
    h.landed("t/handle", Duration::from_secs(5));
    h.failed("t/handle");
    h.landed("t/handle-grant", Duration::from_secs(25));
    let s = snapshot();
    let l = |k, o| [("lease", k), ("outcome", o)];
    assert_eq!(
        count(&s, "lease_renewals_total", &l("t/handle", "landed")),
        1.0
    );
    assert_eq!(
        count(&s, "lease_renewals_total", &l("t/handle", "failed")),
        1.0
    );
    assert_eq!(
        count(&s, "lease_renewals_total", &l("t/handle-grant", "landed")),
        1.0
    );
    assert!(s
        .sample("lease_renewals_total", &l("t/handle-grant", "failed"))
        .is_none());
    let Some(Sample {
        value: Value::Histogram { sum, count: n, .. },
        ..
    }) = s.sample("lease_renewal_slack_seconds", &[("lease", "t/handle")])
    else {
        panic!("no slack histogram")
    };
    assert_eq!((*sum, *n), (5.0, 1));
    reset();
    h.landed("t/handle", Duration::from_secs(5));
    let s = snapshot();
    assert_eq!(
        count(&s, "lease_renewals_total", &l("t/handle", "landed")),
        1.0
    );
    assert!(s
        .sample("lease_renewals_total", &l("t/handle", "failed"))
        .is_none());
}

/// The store's fixed cells (`requests.rs`) count what the registry's maps did: by store kind,
/// request kind and status; latency by store and kind (its count the sum of its buckets, a
/// latency past the last bound only in `+Inf`); bytes by store; cost only for answered
/// requests. Deltas on `az`, which no other unit test uses.
#[test]
fn store_requests_are_counted_in_their_fixed_cells() {
    let _turn = serial();
    let before = snapshot();
    let az = StoreKind::of_url("az://account/container");
    assert_eq!(az, StoreKind::Az);
    request(az, Op::Create, Status::Ok, Duration::from_millis(2), 100, 0);
    request(az, Op::Get, Status::NotFound, Duration::from_secs(60), 0, 7);
    request(az, Op::Get, Status::Error, Duration::from_millis(1), 0, 0);
    let after = snapshot();
    let delta = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let req = |kind, status| {
        delta(
            "lease_store_requests_total",
            &[("store", "az"), ("kind", kind), ("status", status)],
        )
    };
    assert_eq!(
        (req("create", "200"), req("get", "404"), req("get", "error")),
        (1.0, 1.0, 1.0)
    );
    assert_eq!(req("update", "200"), 0.0);
    let bytes = |name| delta(name, &[("store", "az")]);
    assert_eq!(
        (
            bytes("lease_store_sent_bytes_total"),
            bytes("lease_store_received_bytes_total")
        ),
        (100.0, 7.0)
    );
    let cost = bytes("lease_store_cost_dollars_total");
    let billed = prices::price("az", "create") + prices::price("az", "get");
    assert!((cost - billed).abs() < 1e-12, "{cost} against {billed}");
    let Some(Sample {
        value: Value::Histogram { buckets, count, .. },
        ..
    }) = after.sample(
        "lease_store_request_seconds",
        &[("store", "az"), ("kind", "get")],
    )
    else {
        panic!("no latency of az gets")
    };
    let last = buckets.last().unwrap();
    // The 60 s get is past the last bound (10 s): in the count, in no finite bucket.
    assert_eq!((last.0, *count - last.1 >= 1), (10.0, true));
    assert!(after
        .sample(
            "lease_store_request_seconds",
            &[("store", "az"), ("kind", "delete")]
        )
        .is_none());
}
