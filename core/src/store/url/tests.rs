use super::*;
use crate::ErrorKind;

/// A bare name with `?` (or `%`) printed as `LEASE_URL` parses back to the same lease
/// (it printed as `file:///…/a?b`, read back as key `a` with an option `b`).
#[test]
fn keys_with_question_marks_and_percents_print_back() {
    for name in ["a?b", "a%3Fb", "100%", "q?x=1&y", "dir/a?b"] {
        let l = LeaseUrl::parse(name).unwrap();
        let printed = l.to_string();
        let again = LeaseUrl::parse(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
        // (A bare name with `/` comes back with its directory in the store's root: the
        // same file.)
        assert_eq!(
            again.key,
            name.rsplit('/').next().unwrap(),
            "{name}: {printed}"
        );
        assert_eq!(again.to_string(), printed);
    }
    let l = LeaseUrl::parse("s3://bkt/a%3Fb%25c?region=r").unwrap();
    assert_eq!(l.key, "a?b%c");
    assert_eq!(l.to_string(), "s3://bkt/a%3Fb%25c?region=r");
    let l = LeaseUrl::parse("file:///tmp/d%3Fir/k").unwrap();
    assert_eq!(l.to_string(), "file:///tmp/d%3Fir/k");
}

/// Option values with `&`, `=` or `%` (an Azure SAS token, say) print escaped and parse
/// back to the same options (they printed raw, splitting into other options).
#[test]
fn option_values_with_query_characters_print_back() {
    let url = "az://acct/cont/k?sas_token=sv%3D2020%26sig%3Da%2Fb%25";
    let l = LeaseUrl::parse(url).unwrap();
    let StoreUrl::Azure { options, .. } = &l.store else {
        panic!("{:?}", l.store)
    };
    assert_eq!(options[0].1, "sv=2020&sig=a/b%");
    let printed = l.to_string();
    assert_eq!(LeaseUrl::parse(&printed).unwrap(), l, "{printed}");
    for bad in [
        "s3://bkt/k%",
        "s3://bkt/k%4",
        "s3://bkt/k%zz",
        "s3://bkt/k?region=%G1",
    ] {
        let e = LeaseUrl::parse(bad).unwrap_err();
        assert!(e.message().contains("bad %-escape"), "{bad}: {e}");
    }
}

#[test]
fn parses_every_form() {
    let l = LeaseUrl::parse(
        "s3://my-bucket/locks/gc?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A9000",
    )
    .unwrap();
    assert_eq!(l.key, "locks/gc");
    assert_eq!(
        l.store,
        StoreUrl::S3 {
            bucket: "my-bucket".into(),
            options: vec![
                ("endpoint".into(), "http://127.0.0.1:9000".into()),
                ("region".into(), "eu-west-1".into())
            ]
        }
    );
    let l = LeaseUrl::parse("file:///var/lib/app/locks/gc").unwrap();
    assert_eq!(
        l.store,
        StoreUrl::File {
            root: "/var/lib/app/locks".into()
        }
    );
    assert_eq!(l.key, "gc");
    assert_eq!(l.to_string(), "file:///var/lib/app/locks/gc");
    let l = LeaseUrl::parse("/tmp/x/../y/lock%20file").unwrap();
    assert_eq!(
        l.store,
        StoreUrl::File {
            root: "/tmp/y".into()
        }
    );
    assert_eq!(l.key, "lock%20file");
    let l = LeaseUrl::parse("file:///tmp/lock%20file").unwrap();
    assert_eq!(l.key, "lock file");
    let l = LeaseUrl::parse("memory://test/a/b").unwrap();
    assert_eq!(
        l.store,
        StoreUrl::Memory {
            namespace: "test".into()
        }
    );
    assert_eq!(l.key, "a/b");
    assert_eq!(l.to_string(), "memory://test/a/b");
    let l = LeaseUrl::parse("nightly-gc").unwrap();
    assert_eq!(l.store, StoreUrl::DefaultFile);
    assert_eq!(LeaseUrl::parse("jobs/gc").unwrap().key, "jobs/gc");
}

#[test]
fn rejects_bad_urls_with_the_url_in_the_message() {
    for bad in [
        "",
        "gs://B/x",
        "gs://b/x",
        "gs://ab/x",
        "gs://-bucket/x",
        "gs://bucket",
        "az://account/container",
        "az://Account/container/x",
        "az://account/Container/x",
        "az://account/con--tainer/x",
        "azure://ab/container/x",
        "ftp://host/x",
        "s3://B/x",
        "s3://bucket",
        "s3://bucket/",
        "s3://ab/x",
        "file://relative/x",
        "file:///",
        "memory://",
        "memory://ns",
        "memory:///x",
        "memory://ns/x?opt=1",
        "s3://bucket/a//b",
        "s3://bucket/x%zz",
        "s3://bucket/x%ff",
        "a\u{0}b",
        "/",
    ] {
        let e = LeaseUrl::parse(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{bad:?}: {e}");
        if !bad.is_empty() && !bad.contains('\0') {
            assert!(
                e.message().contains(bad) || e.message().contains("lease name"),
                "{bad:?}: {e}"
            );
        }
    }
}

#[test]
fn store_urls() {
    assert_eq!(
        StoreUrl::parse("memory://ns").unwrap(),
        StoreUrl::Memory {
            namespace: "ns".into()
        }
    );
    assert_eq!(
        StoreUrl::parse("file:///tmp/d/").unwrap(),
        StoreUrl::File {
            root: "/tmp/d".into()
        }
    );
    assert_eq!(
        StoreUrl::parse("s3://bkt?region=x").unwrap(),
        StoreUrl::S3 {
            bucket: "bkt".into(),
            options: vec![("region".into(), "x".into())]
        }
    );
    assert!(StoreUrl::parse("bucket").is_err());
    assert_eq!(
        StoreUrl::parse("gs://my_bucket.example.com?endpoint=http://h:1").unwrap(),
        StoreUrl::Gcs {
            bucket: "my_bucket.example.com".into(),
            options: vec![("endpoint".into(), "http://h:1".into())]
        }
    );
    let az = StoreUrl::parse("azure://acct1/locks").unwrap();
    assert_eq!(
        az,
        StoreUrl::Azure {
            account: "acct1".into(),
            container: "locks".into(),
            options: vec![]
        }
    );
    // Both spellings are one store, shown as az://.
    assert_eq!(az, StoreUrl::parse("az://acct1/locks/").unwrap());
    assert_eq!(az.to_string(), "az://acct1/locks");
}

#[test]
fn gcs_and_azure_lease_urls() {
    let l = LeaseUrl::parse("gs://bkt/locks/a%20b?anonymous=true").unwrap();
    assert_eq!(l.key, "locks/a b");
    assert_eq!(l.to_string(), "gs://bkt/locks/a b?anonymous=true");
    let l = LeaseUrl::parse("azure://acct1/cont-ainer/jobs/gc").unwrap();
    assert_eq!(l.key, "jobs/gc");
    assert_eq!(l.to_string(), "az://acct1/cont-ainer/jobs/gc");
    assert_eq!(LeaseUrl::parse(&l.to_string()).unwrap(), l);
}

/// A `file://` store whose directory is missing opens (its first write creates it, issue 16);
/// a path through a regular file is an error naming it.
#[test]
fn open_missing_directory_is_deferred_to_the_first_write() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not/yet");
    StoreUrl::File {
        root: missing.clone(),
    }
    .open_new()
    .unwrap();
    assert!(!missing.exists(), "opening created the directory");
    std::fs::write(dir.path().join("plain"), "x").unwrap();
    let through_file = dir.path().join("plain/sub");
    let e = StoreUrl::File {
        root: through_file.clone(),
    }
    .open_new()
    .unwrap_err();
    assert!(e.message().contains("plain"), "{e}");
}

/// The placement rule of fenced keys: a relative path from the lease's directory.
#[test]
fn object_keys_are_relative_to_the_leases_directory() {
    use super::object_key;
    let cases = [
        ("locks/gc", "x", "locks/x"),
        ("locks/gc", "./x", "locks/x"),
        ("locks/gc", "jobs/x", "locks/jobs/x"),
        ("locks/gc", "../x", "x"),
        ("locks/gc", "/x", "x"),
        ("locks/gc", "/a/./b/../c", "a/c"),
        ("gc", "x", "x"),
        ("gc", "./jobs/x", "jobs/x"),
        ("", "x", "x"),
        ("", "/x", "x"),
    ];
    for (lease, key, expected) in cases {
        assert_eq!(
            object_key(lease, key).unwrap(),
            expected,
            "{lease:?} {key:?}"
        );
    }
    for (lease, key) in [
        ("gc", "../x"),
        ("locks/gc", "../../x"),
        ("locks/gc", "/../x"),
        ("", "../x"),
        ("gc", ""),
        ("gc", "/"),
        ("gc", "."),
        ("locks/gc", ".."),
        ("gc", "jobs/"),
        ("gc", "jobs/."),
        ("gc", "a//b"),
    ] {
        let e = object_key(lease, key).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{lease:?} {key:?}");
        assert!(e.message().contains(&format!("{key:?}")), "{e}");
    }
}

/// `lease doctor s3://bucket/locks` probes under `locks/`: a user allowed only `locks/*` must
/// not be sent to the bucket's top.
#[test]
fn a_store_url_keeps_its_path() {
    let cases = [
        ("s3://bkt/locks?region=eu-west-1", "locks"),
        ("s3://bkt/locks/jobs/", "locks/jobs"),
        ("s3://bkt", ""),
        ("s3://bkt/?region=eu-west-1", ""),
        ("gs://bkt/a%20b", "a b"),
        ("az://acct1/cont/locks", "locks"),
        ("memory://ns/jobs", "jobs"),
        ("file:///tmp/x/y", ""),
    ];
    for (url, path) in cases {
        let (store, got) = StoreUrl::parse_with_path(url).unwrap();
        assert_eq!(got, path, "{url}");
        if path.is_empty() {
            assert_eq!(store, StoreUrl::parse(url).unwrap(), "{url}");
        } else {
            // Where only the store is wanted, a path is refused, never dropped: keys given
            // with the store would otherwise land at its root, not under the path (issue 16).
            let e = StoreUrl::parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "{url}");
            assert!(
                e.to_string().contains("names a path inside the store"),
                "{e}"
            );
        }
    }
    assert_eq!(
        StoreUrl::parse_with_path("s3://B/x").unwrap_err().kind(),
        ErrorKind::Invalid
    );
}

/// A mistyped URL used to become a bare name, a lock on this machine only (issue 28): it is
/// refused with the likely fix, by every entry point (they all parse names here), also where
/// a store URL is expected (C, Go).
#[test]
fn mistyped_urls_are_refused_with_the_likely_fix() {
    for (typo, fix) in [
        ("s3:/bucket/x", "s3://bucket/x"),
        ("gs:/b/x", "gs://b/x"),
        ("file:/tmp/x", "file:///tmp/x"),
        ("s3//bucket/x", "s3://bucket/x"),
        ("az:acct/cont/x", "az://acct/cont/x"),
    ] {
        let e = LeaseUrl::parse(typo).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{typo}: {e}");
        assert!(
            e.message().contains(&format!("did you mean {fix:?}")),
            "{typo}: {e}"
        );
    }
    let e = LeaseUrl::parse("https:/host/x").unwrap_err();
    assert!(e.message().contains("not a supported scheme"), "{e}");
    let e = StoreUrl::parse("s3:/my-bucket").unwrap_err();
    assert!(
        e.message().contains("did you mean \"s3://my-bucket\""),
        "{e}"
    );
    let e = StoreUrl::parse("file:/tmp/d").unwrap_err();
    assert!(
        e.message().contains("did you mean \"file:///tmp/d\""),
        "{e}"
    );
    // Names with colons that cannot be a scheme are still bare names.
    for name in ["db:migrate", "tenant:42/gc", "jobs/s3:x"] {
        let l = LeaseUrl::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((l.store, l.key.as_str()), (StoreUrl::DefaultFile, name));
    }
}
