//! Property tests (proptest) of everything that parses outside input: lease records, lease
//! URLs and their options, durations, fencing tokens, and record round trips. Each property
//! runs a few hundred generated cases in `./scripts/test` (`PROPTEST_CASES` raises it); cases
//! that ever failed are kept in `core/tests/properties.proptest-regressions` and replayed
//! first. The negative controls check that the generators reach the inputs that matter: a
//! property that is false must be refuted.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use lease::record::{Holder, Parsed, Record, RecordState, FORMAT};
use lease::{parse_duration, ErrorKind, FencingToken, LeaseUrl, Mode, Scope};

fn holder() -> impl Strategy<Value = Holder> {
    (
        "[0-9a-f]{32}",
        proptest::option::of("[^\\x00-\\x1f]{0,40}"),
        proptest::option::of("[a-z0-9.-]{1,30}"),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(|(id, label, host, pid)| Holder {
            id,
            label,
            host,
            pid,
            user: None,
            client: Some("lease (proptest)".into()),
            process: None,
        })
}

fn record() -> impl Strategy<Value = Record> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
        1u64..86_400_000,
        holder(),
        proptest::option::of(".{0,200}"),
        proptest::option::of("[0-9a-f]{16}"),
    )
        .prop_map(|(epoch, rev, held, ttl_ms, holder, data, write)| Record {
            format: FORMAT,
            epoch,
            rev,
            state: if held {
                RecordState::Held
            } else {
                RecordState::Released
            },
            ttl_ms,
            holder,
            acquired_at: None,
            renewed_at: None,
            data,
            prev: vec![],
            write,
            broken: None,
            preempted: None,
            history: Default::default(),
            attached: None,
        })
}

proptest! {
    #![proptest_config(Config::with_cases(256))]

    /// Any bytes parse to a valid record or a corrupt one, never a panic; a corrupt one never
    /// claims an epoch it cannot have read.
    #[test]
    fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        match Record::parse(Some(&bytes), bytes.len() as u64) {
            Parsed::Valid(r) => prop_assert_eq!(r.format, FORMAT),
            Parsed::Corrupt { reason, .. } => prop_assert!(!reason.is_empty()),
        }
    }

    /// Records written by this library read back as themselves.
    #[test]
    fn records_round_trip(r in record()) {
        let bytes = r.to_bytes();
        prop_assert_eq!(Record::parse(Some(&bytes), bytes.len() as u64), Parsed::Valid(r));
    }

    /// Truncated records are corrupt, never a different valid record.
    #[test]
    fn truncated_records_are_corrupt(r in record(), cut in 1usize..64) {
        let bytes = r.to_bytes();
        let cut = bytes.len().saturating_sub(cut);
        let corrupt = matches!(Record::parse(Some(&bytes[..cut]), cut as u64), Parsed::Corrupt { .. });
        prop_assert!(corrupt, "a truncated record parsed as valid");
    }

    /// Any string is a lease URL or an `Invalid` error, never a panic; a URL that parses
    /// prints (as `LEASE_URL`) as one that parses back and prints the same. (A bare name with
    /// `/` may come back split differently between the store's root and the key — the same
    /// file: see docs/protocol.md on where objects go.) `%` and `?` in keys and directories
    /// print escaped (`%25`, `%3F`) and parse back; `%`, `?` and `/` are generated often.
    #[test]
    fn any_string_is_a_url_or_invalid(s in "([^#\\p{C}]|[%?/]){0,80}") {
        match LeaseUrl::parse(&s) {
            Ok(u) => {
                let printed = u.to_string();
                let again = LeaseUrl::parse(&printed);
                prop_assert!(again.is_ok(), "{} printed as {}, which does not parse", s, printed);
                prop_assert_eq!(again.unwrap().to_string(), printed);
            }
            Err(e) => prop_assert!(matches!(e.kind(), ErrorKind::Invalid | ErrorKind::Store), "{:?}", e.kind()),
        }
    }

    /// S3 URLs with options: parse, print, parse again to the same.
    #[test]
    fn s3_urls_round_trip(
        bucket in "[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]",
        key in "[a-zA-Z0-9_.-]{1,10}(/[a-zA-Z0-9_.-]{1,10}){0,3}",
        region in proptest::option::of("[a-z]{2}-[a-z]{4,9}-[1-9]"),
    ) {
        let mut url = format!("s3://{bucket}/{key}");
        if let Some(r) = &region {
            url.push_str(&format!("?region={r}"));
        }
        if let Ok(u) = LeaseUrl::parse(&url) {
            prop_assert_eq!(&u.key, &key);
            prop_assert_eq!(LeaseUrl::parse(&u.to_string()).unwrap(), u);
        }
    }

    /// Any string is a duration or an `Invalid` error.
    #[test]
    fn any_string_is_a_duration_or_invalid(s in "\\PC{0,20}") {
        if let Err(e) = parse_duration(&s) {
            prop_assert_eq!(e.kind(), ErrorKind::Invalid);
        }
    }

    /// Tokens: any string parses or is `Invalid`; tokens print and parse back.
    #[test]
    fn tokens_round_trip(
        lease in "[a-z0-9:/._#-]{1,40}",
        epoch in any::<u64>(),
        holder in proptest::option::of("[0-9a-f]{1,32}"),
        shared in any::<bool>(),
        scope in prop_oneof![
            Just(None),
            (any::<u64>(), 1u64..1000).prop_map(|(a, n)| Some(Scope::range(a / 2, a / 2 + n).unwrap())),
            proptest::collection::vec("[^/\\p{Cc}.]{1,6}", 1..4)
                .prop_map(|s| Some(Scope::path(&s.join("/")).unwrap())),
        ],
    ) {
        let mut t = FencingToken::new(lease, epoch);
        if let Some(h) = holder {
            t = t.with_holder(h);
        }
        if shared {
            t = t.with_mode(Mode::Shared);
        }
        if let Some(s) = scope {
            t = t.with_scope(s);
        }
        prop_assert_eq!(t.to_string().parse::<FencingToken>().unwrap(), t);
    }

    #[test]
    fn any_string_is_a_token_or_invalid(s in "\\PC{0,60}") {
        if let Err(e) = s.parse::<FencingToken>() {
            prop_assert_eq!(e.kind(), ErrorKind::Invalid);
        }
    }
}

/// A runner on a fixed seed: a negative control that passed by the luck of a random seed would
/// prove nothing.
fn deterministic_runner(cases: u32) -> TestRunner {
    TestRunner::new_with_rng(
        Config::with_cases(cases),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}

/// Negative control: the generators reach what matters. "Every byte string is a valid
/// record" and "no URL parses" are false, and the runner must say so.
#[test]
fn false_properties_are_refuted() {
    let mut runner = deterministic_runner(256);
    let records = runner.run(&record(), |r| {
        let bytes = r.to_bytes();
        let cut = &bytes[..bytes.len() / 2];
        prop_assert!(matches!(
            Record::parse(Some(cut), cut.len() as u64),
            Parsed::Valid(_)
        ));
        Ok(())
    });
    assert!(records.is_err(), "half records were never found corrupt");
    let mut runner = deterministic_runner(256);
    let urls = runner.run(&"[a-z]{1,8}(/[a-z]{1,8}){0,2}", |s| {
        prop_assert!(LeaseUrl::parse(&s).is_err());
        Ok(())
    });
    assert!(urls.is_err(), "no generated name parsed as a lease URL");
}
