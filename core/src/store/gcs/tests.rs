use super::*;
use crate::ErrorKind;

fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn options_and_aliases() {
    let s = Settings::parse(
        "b",
        &opts(&[
            ("endpoint_url", "http://127.0.0.1:4443/"),
            ("timeout", "2s"),
            ("SKIP_SIGNATURE", "true"),
        ]),
    )
    .unwrap();
    assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:4443"));
    assert_eq!(s.timeout, Duration::from_secs(2));
    assert_eq!(s.anonymous, Some(true));
    for (pairs, needle) in [
        (vec![("bogus", "1")], "bogus"),
        (vec![("endpoint", "ftp://x")], "ftp://x"),
        (vec![("anonymous", "perhaps")], "perhaps"),
        (vec![("timeout", "0s")], "timeout"),
        (vec![("service_account_key", "{}")], "service_account_key"),
        (
            vec![("endpoint", "http://a"), ("endpoint_url", "http://b")],
            "twice",
        ),
    ] {
        let e = GcsStore::open("bucket", &opts(&pairs)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{pairs:?}: {e}");
        assert!(e.message().contains(needle), "{pairs:?}: {e}");
    }
}

#[test]
fn emulator_endpoints_default_to_no_credentials_and_no_conditional_delete() {
    let store = GcsStore::open("b", &opts(&[("endpoint", "http://127.0.0.1:1")])).unwrap();
    assert!(!store.capabilities().conditional_delete);
    assert!(store.inner.endpoint.anonymous_default.is_some());
    // Emulators have no write-rate limit; Google's endpoint does, and a URL may say so.
    assert_eq!(store.min_write_interval(), Duration::ZERO);
    let paced = GcsStore::open(
        "b",
        &opts(&[
            ("endpoint", "http://127.0.0.1:1"),
            ("min_write_interval", "1s"),
        ]),
    )
    .unwrap();
    assert_eq!(paced.min_write_interval(), Duration::from_secs(1));
    let store = GcsStore::open(
        "b",
        &opts(&[
            ("endpoint", "https://storage.googleapis.com"),
            ("conditional_delete", "true"),
        ]),
    )
    .unwrap();
    assert!(store.capabilities().conditional_delete);
    assert!(store.inner.endpoint.anonymous_default.is_none());
    assert_eq!(store.min_write_interval(), MIN_WRITE_INTERVAL);
    assert_eq!(
        store.url(),
        "gs://b?endpoint=https://storage.googleapis.com&conditional_delete=true"
    );
}

fn status(op: Op, status: u16, message: &str) -> Failure {
    classify_status(ClassifyInput {
        op,
        status,
        message,
        what: "cannot x gs://b/k on E",
        bucket: "b",
        key: "k",
        credentials: "the creds",
    })
}

#[test]
fn classification_follows_the_protocol() {
    use ErrorKind::*;
    assert!(matches!(status(Op::Get, 304, ""), Failure::NotModified));
    assert!(matches!(
        status(Op::Get, 404, "No such object: b/k"),
        Failure::NotFound
    ));
    assert!(matches!(
        status(Op::Create, 412, "Precondition Failed"),
        Failure::ConditionFailed
    ));
    assert!(matches!(
        status(Op::Update, 412, ""),
        Failure::ConditionFailed
    ));
    assert!(matches!(
        status(Op::Delete, 404, "No such object: b/k"),
        Failure::ConditionFailed
    ));
    let kind = |f: Failure| match f {
        Failure::Error(e) => {
            assert!(e.message().contains("gs://b/k on E"), "{e}");
            Some(e.kind())
        }
        _ => None,
    };
    for (op, st, msg, want) in [
        (Op::Update, 429, "rate", Unavailable),
        (Op::Create, 503, "", Unavailable),
        (Op::Get, 500, "", Unavailable),
        (Op::Update, 408, "", Unavailable),
        (Op::Get, 401, "Invalid Credentials", Store),
        (Op::Update, 403, "denied", Store),
        (Op::Get, 404, "The specified bucket does not exist.", Store),
        (
            Op::Delete,
            404,
            "The specified bucket does not exist.",
            Store,
        ),
        (Op::Create, 404, "", Store),
        (Op::Update, 400, "Invalid argument", Store),
    ] {
        assert_eq!(kind(status(op, st, msg)), Some(want), "{op:?} {st} {msg}");
    }
    let Failure::Error(e) = status(Op::Update, 403, "denied") else {
        panic!()
    };
    assert!(e.message().contains("storage.objects.delete"), "{e}");
}

#[test]
fn versions_are_generations() {
    assert_eq!(generation_of(&Version::etag("17")), Some(17));
    assert_eq!(
        generation_of(&Version {
            etag: String::new(),
            generation: Some(5)
        }),
        Some(5)
    );
    assert_eq!(generation_of(&Version::etag("\"abc\"")), None);
}
