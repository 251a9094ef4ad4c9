use super::classify::{classify_status, ClassifyInput};
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
            ("aws_endpoint_url", "http://127.0.0.1:9000/"),
            ("AWS_REGION", "eu-west-1"),
            ("virtual_hosted_style_request", "false"),
            ("timeout", "2s"),
        ]),
    )
    .unwrap();
    assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(s.region.as_deref(), Some("eu-west-1"));
    assert_eq!(s.path_style, Some(true));
    assert_eq!(s.timeout, Duration::from_secs(2));
    assert_eq!(s.conditional_delete, None);
    assert!(s.store_clock_rule);
}

#[test]
fn bad_options_are_invalid_and_named() {
    for (pairs, needle) in [
        (vec![("bogus", "1")], "bogus"),
        (vec![("endpoint", "ftp://x")], "ftp://x"),
        (vec![("endpoint", "not a url")], "not a url"),
        (vec![("path_style", "maybe")], "maybe"),
        (vec![("timeout", "0s")], "timeout"),
        (vec![("region", "eu west")], "eu west"),
        (
            vec![("aws_secret_access_key", "x")],
            "aws_secret_access_key",
        ),
        (vec![("region", "a"), ("aws_region", "b")], "twice"),
        (
            vec![
                ("path_style", "true"),
                ("virtual_hosted_style_request", "true"),
            ],
            "not both",
        ),
    ] {
        let pairs: Vec<(&str, &str)> = pairs;
        let e = S3Store::open("bucket", &opts(&pairs)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{pairs:?}: {e}");
        assert!(e.message().contains(needle), "{pairs:?}: {e}");
    }
}

#[test]
fn url_round_trips_through_the_parser() {
    let store = S3Store::open(
        "bkt",
        &opts(&[("endpoint", "http://127.0.0.1:9000"), ("region", "x-1")]),
    )
    .unwrap();
    assert_eq!(
        store.url(),
        "s3://bkt?endpoint=http://127.0.0.1:9000&region=x-1"
    );
    let parsed = crate::StoreUrl::parse(store.url()).unwrap();
    assert_eq!(
        parsed,
        crate::StoreUrl::S3 {
            bucket: "bkt".into(),
            options: opts(&[("endpoint", "http://127.0.0.1:9000"), ("region", "x-1")])
        }
    );
    assert_eq!(
        store.capabilities().clock_resolution,
        Duration::from_secs(1)
    );
}

#[test]
fn http_dates() {
    let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
    assert_eq!(
        t.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
        Duration::from_secs(784_111_777)
    );
    assert!(parse_http_date("yesterday").is_none());
}

fn kind_of(f: &Failure) -> Option<ErrorKind> {
    match f {
        Failure::Error(e) => Some(e.kind()),
        _ => None,
    }
}

fn status(op: Op, conditional: bool, status: u16, code: &str) -> Failure {
    classify_status(ClassifyInput {
        op,
        conditional,
        status,
        code,
        said: format!("HTTP {status} {code}"),
        what: "cannot x s3://b/k on E",
        bucket: "b",
        key: "k",
        bucket_region: None,
        credentials_hint: "the credentials",
    })
}

#[test]
fn classification_follows_the_protocol() {
    use ErrorKind::*;
    assert!(matches!(
        status(Op::Get, false, 304, ""),
        Failure::NotModified
    ));
    assert!(matches!(
        status(Op::Get, false, 404, "NoSuchKey"),
        Failure::NotFound
    ));
    assert!(matches!(
        status(Op::Update, true, 412, "PreconditionFailed"),
        Failure::ConditionFailed
    ));
    assert!(matches!(
        status(Op::Create, true, 412, "PreconditionFailed"),
        Failure::ConditionFailed
    ));
    assert!(matches!(
        status(Op::Update, true, 404, "NoSuchKey"),
        Failure::ConditionFailed
    ));
    assert!(matches!(
        status(Op::Delete, true, 404, "NoSuchKey"),
        Failure::ConditionFailed
    ));
    for (op, st, code, kind) in [
        (Op::Update, 409, "ConditionalRequestConflict", Unavailable),
        (Op::Create, 503, "SlowDown", Unavailable),
        (Op::Get, 500, "InternalError", Unavailable),
        (Op::Update, 429, "", Unavailable),
        (Op::Update, 400, "RequestTimeout", Unavailable),
        (Op::Get, 400, "ThrottlingException", Unavailable),
        (Op::Get, 403, "AccessDenied", Store),
        (Op::Update, 403, "SignatureDoesNotMatch", Store),
        (Op::Get, 404, "NoSuchBucket", Store),
        (Op::Update, 404, "NoSuchBucket", Store),
        (Op::Create, 404, "", Store),
        (Op::Get, 301, "PermanentRedirect", Store),
        (Op::Update, 501, "NotImplemented", Store),
        (Op::Update, 400, "InvalidArgument", Store),
    ] {
        let f = status(op, true, st, code);
        assert_eq!(kind_of(&f), Some(kind), "{op:?} {st} {code}: {f:?}");
        if let Failure::Error(e) = &f {
            assert!(e.message().contains("s3://b/k on E"), "{e}");
        }
    }
    let Failure::Error(e) = status(Op::Update, true, 403, "AccessDenied") else {
        panic!()
    };
    assert!(
        e.message().contains("s3:PutObject") && e.message().contains("arn:aws:s3:::b/k"),
        "{e}"
    );
    let Failure::Error(e) = status(Op::Get, false, 403, "AccessDenied") else {
        panic!()
    };
    assert!(e.message().contains("s3:ListBucket"), "{e}");
}
