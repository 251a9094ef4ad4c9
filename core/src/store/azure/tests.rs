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
        "az://a/c",
        &opts(&[
            (
                "azure_storage_endpoint",
                "http://127.0.0.1:10000/devstoreaccount1/",
            ),
            ("use_emulator", "true"),
            ("conditional_delete", "false"),
        ]),
    )
    .unwrap();
    assert_eq!(
        s.endpoint.as_deref(),
        Some("http://127.0.0.1:10000/devstoreaccount1")
    );
    assert!(s.use_emulator && !s.conditional_delete);
    for (pairs, needle) in [
        (vec![("bogus", "1")], "bogus"),
        (vec![("account_key", "x")], "account_key"),
        (vec![("sas_token", "x")], "sas_token"),
        (vec![("endpoint", "ftp://x")], "ftp://x"),
        (vec![("use_emulator", "maybe")], "maybe"),
    ] {
        let e = AzureStore::open("acct", "cont", &opts(&pairs)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{pairs:?}: {e}");
        assert!(e.message().contains(needle), "{pairs:?}: {e}");
    }
    let store = AzureStore::open("acct", "cont", &opts(&[("timeout", "3s")])).unwrap();
    assert_eq!(store.url(), "az://acct/cont?timeout=3s");
    assert!(store.capabilities().conditional_delete);
    assert_eq!(store.min_write_interval(), Duration::ZERO);
}

#[test]
fn metadata_names() {
    assert_eq!(meta_name_to_azure("lease-epoch").unwrap(), "lease_epoch");
    assert_eq!(meta_name_from_azure("Lease_Epoch"), "lease-epoch");
    assert!(meta_name_to_azure("1abc").is_err());
}

fn status(op: Op, status: u16, code: &str) -> Failure {
    classify_status(ClassifyInput {
        op,
        status,
        code,
        message: "",
        what: "cannot x az://a/c/k on E",
        container: "c",
        credentials: "the creds",
    })
}

#[test]
fn classification_follows_the_protocol() {
    use ErrorKind::*;
    assert!(matches!(status(Op::Get, 304, ""), Failure::NotModified));
    assert!(matches!(
        status(Op::Get, 404, "BlobNotFound"),
        Failure::NotFound
    ));
    for (op, st, code) in [
        (Op::Create, 409, "BlobAlreadyExists"),
        (Op::Create, 412, "ConditionNotMet"),
        (Op::Update, 412, "ConditionNotMet"),
        (Op::Update, 404, "BlobNotFound"),
        (Op::Delete, 412, "ConditionNotMet"),
        (Op::Delete, 404, "BlobNotFound"),
    ] {
        assert!(
            matches!(status(op, st, code), Failure::ConditionFailed),
            "{op:?} {st} {code}"
        );
    }
    let kind = |f: Failure| match f {
        Failure::Error(e) => {
            assert!(e.message().contains("az://a/c/k on E"), "{e}");
            Some(e.kind())
        }
        _ => None,
    };
    for (op, st, code, want) in [
        (Op::Update, 503, "ServerBusy", Unavailable),
        (Op::Update, 500, "OperationTimedOut", Unavailable),
        (Op::Get, 429, "", Unavailable),
        (Op::Update, 412, "LeaseIdMissing", Store),
        (Op::Create, 409, "LeaseIdMissing", Store),
        (Op::Update, 409, "BlobAlreadyExists", Store),
        (Op::Get, 404, "ContainerNotFound", Store),
        (Op::Update, 404, "ContainerNotFound", Store),
        (Op::Get, 403, "AuthorizationPermissionMismatch", Store),
        (Op::Get, 403, "AuthenticationFailed", Store),
        (Op::Get, 401, "", Store),
        (Op::Update, 400, "InvalidMetadata", Store),
    ] {
        assert_eq!(kind(status(op, st, code)), Some(want), "{op:?} {st} {code}");
    }
    let Failure::Error(e) = status(Op::Update, 412, "LeaseIdMissing") else {
        panic!()
    };
    assert!(e.message().contains("Azure blob lease"), "{e}");
}

#[test]
fn error_messages_from_bodies() {
    let body = "<?xml version=\"1.0\"?><Error><Code>BlobNotFound</Code><Message>The \
                specified blob does not exist.\nRequestId:x\nTime:y</Message></Error>";
    assert_eq!(error_message(body), "The specified blob does not exist.");
    assert_eq!(error_message("nothing"), "");
}

/// Azure's answer to a request whose date is more than 15 minutes off: the reason is in
/// `<AuthenticationErrorDetail>`, the `<Message>` is generic (issue 29).
#[test]
fn a_request_date_too_far_from_the_service_says_fix_the_clock() {
    let body =
        "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed\
                </Code><Message>Server failed to authenticate the request. Make sure the value \
                of Authorization header is formed correctly including the signature.\n\
                RequestId:x\nTime:2026-11-25T10:00:00.0000000Z</Message>\
                <AuthenticationErrorDetail>Request date header too old: 'Wed, 25 Nov 2026 09:40:00 \
                GMT'</AuthenticationErrorDetail></Error>";
    let message = error_message(body);
    assert!(
        message.contains("(Request date header too old: 'Wed"),
        "{message}"
    );
    let classify = |message: &str| match classify_status(ClassifyInput {
        op: Op::Get,
        status: 403,
        code: "AuthenticationFailed",
        message,
        what: "cannot read az://a/c/k on E",
        container: "c",
        credentials: "the creds",
    }) {
        Failure::Error(e) => e.message().to_string(),
        other => panic!("{other:?}"),
    };
    assert!(classify(&message).contains("fix this machine's clock"));
    // A bad signature still points at the credentials.
    let bad_key = error_message(
        "<Error><Code>AuthenticationFailed</Code><Message>Server failed to authenticate the \
         request.</Message><AuthenticationErrorDetail>The MAC signature found in the HTTP \
         request 'x' is not the same as any computed signature.</AuthenticationErrorDetail></Error>",
    );
    assert!(classify(&bad_key).contains("check the creds"), "{bad_key}");
}
