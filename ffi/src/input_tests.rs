//! Property tests of what C hands the library: arbitrary bytes (invalid UTF-8 included) as
//! store URLs, lease names, object keys and fencing tokens, and arbitrary data buffers. Every
//! call must answer with a code (never `LEASE_PANIC` or `LEASE_INTERNAL`), write its output only
//! on success, give an error object whose code and message are readable on failure, and hand
//! data back byte for byte. The C tests (ffi/tests/c) check NULLs and lifetimes under valgrind
//! and ASan; these reach the inputs no hand-written case does. Cases: `PROPTEST_CASES`
//! (default 256 here).

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::error::*;
use crate::fence::*;
use crate::held::*;
use crate::runtime::*;
use crate::store::*;

/// Bytes a C string can hold: anything but NUL (invalid UTF-8 included).
fn c_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(1u8..=255, 0..max),
        "[^\\x00]{0,40}".prop_map(String::into_bytes),
    ]
}

fn c_string(bytes: &[u8]) -> CString {
    CString::new(bytes.to_vec()).expect("generated without NUL")
}

/// Check a call's answer: `Ok(true)` on success, `Ok(false)` on a well-formed failure (with
/// one of `allowed` as its code). The error object is freed.
fn answer(
    code: lease_code,
    err: *mut lease_error,
    allowed: &[lease_code],
) -> Result<bool, TestCaseError> {
    if code == LEASE_OK {
        prop_assert!(err.is_null(), "an error object on success");
        return Ok(true);
    }
    prop_assert!(allowed.contains(&code), "unexpected code {:?}", code.name());
    prop_assert!(!err.is_null(), "no error object for {:?}", code.name());
    // SAFETY: a live error object written by the call.
    unsafe {
        prop_assert_eq!(lease_error_kind(err), code);
        let msg = lease_error_message(err);
        prop_assert!(!msg.is_null());
        let text = CStr::from_ptr(msg).to_str();
        prop_assert!(text.is_ok_and(|t| !t.is_empty()), "unreadable message");
        lease_error_free(err);
    }
    Ok(false)
}

struct Fixture {
    rt: *mut lease_runtime,
    store: *mut lease_store,
}

impl Fixture {
    fn new(namespace: &str) -> Fixture {
        let mut rt = null_mut();
        let mut store = null_mut();
        let url = CString::new(format!("memory://{namespace}")).unwrap();
        // SAFETY: valid out-pointers; NULL error pointers are allowed.
        unsafe {
            assert_eq!(lease_runtime_new(null(), &mut rt, null_mut()), LEASE_OK);
            assert_eq!(
                lease_store_open(rt, url.as_ptr(), &mut store, null_mut()),
                LEASE_OK
            );
        }
        Fixture { rt, store }
    }

    /// A held lease, acquired with the defaults (released and freed by the caller).
    fn acquire(&self, name: &str) -> *mut lease {
        let name = CString::new(name).unwrap();
        let mut l = null_mut();
        // SAFETY: live store, valid out-pointer.
        let code = unsafe { lease_acquire(self.store, name.as_ptr(), null(), &mut l, null_mut()) };
        assert_eq!(code, LEASE_OK);
        l
    }
}

/// Release and free a lease from [`Fixture::acquire`].
fn release_and_free(l: *mut lease) {
    // SAFETY: a live lease from `acquire`, released and freed once.
    unsafe {
        assert_eq!(lease_release(l, null_mut()), LEASE_OK);
        lease_free(l);
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: both from the calls in `new`, freed once.
        unsafe {
            lease_store_free(self.store);
            lease_runtime_free(self.rt);
        }
    }
}

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    TestRunner::new(Config::with_cases(cases))
}

/// URLs of every scheme with arbitrary bytes after it (opening contacts no server), and raw
/// bytes that are not UTF-8. Bare names are left out: they open the default directory.
fn any_url() -> impl Strategy<Value = Vec<u8>> {
    let scheme = proptest::sample::select(vec![
        "memory://",
        "file:///",
        "s3://",
        "gs://",
        "az://",
        "azure://",
        "ftp://",
        "",
    ]);
    prop_oneof![
        (scheme, c_bytes(60)).prop_map(|(s, rest)| [s.as_bytes(), &rest].concat()),
        proptest::collection::vec(0x80u8..=0xff, 1..8),
    ]
    .prop_filter("not a bare name", |b| {
        b.windows(3).any(|w| w == b"://") || std::str::from_utf8(b).is_err()
    })
}

#[test]
fn store_urls_of_any_bytes_open_or_are_refused_cleanly() {
    let f = Fixture::new("input-tests-urls");
    runner()
        .run(&any_url(), |bytes| {
            let url = c_string(&bytes);
            let mut store: *mut lease_store = null_mut();
            let mut err = null_mut();
            // SAFETY: live runtime, NUL-terminated url, valid out-pointers.
            let code = unsafe { lease_store_open(f.rt, url.as_ptr(), &mut store, &mut err) };
            if answer(code, err, &[LEASE_INVALID, LEASE_STORE])? {
                prop_assert!(!store.is_null());
                // SAFETY: a store just opened.
                unsafe { lease_store_free(store) };
            } else {
                prop_assert!(store.is_null(), "output written on failure");
            }
            if std::str::from_utf8(&bytes).is_err() {
                prop_assert_eq!(code, LEASE_INVALID);
            }
            Ok(())
        })
        .unwrap();
}

/// A store URL names the store alone: a path inside a bucket is refused, never dropped (the
/// keys given with the store would land at the bucket's root, not under the path).
#[test]
fn a_store_url_with_a_path_inside_its_bucket_is_refused() {
    let f = Fixture::new("input-tests-store-path");
    for url in ["s3://bkt/locks?region=eu-west-1", "memory://ns/jobs"] {
        let c = c_string(url.as_bytes());
        let mut store: *mut lease_store = null_mut();
        let mut err = null_mut();
        // SAFETY: live runtime, NUL-terminated url, valid out-pointers.
        let code = unsafe { lease_store_open(f.rt, c.as_ptr(), &mut store, &mut err) };
        assert_eq!(code, LEASE_INVALID, "{url}");
        assert!(store.is_null(), "{url}: output written on failure");
        // SAFETY: the error this call returned.
        unsafe { lease_error_free(err) };
    }
}

#[test]
fn tokens_of_any_bytes_parse_or_are_refused_cleanly() {
    runner()
        .run(&c_bytes(80), |bytes| {
            let token = c_string(&bytes);
            let mut url: *mut c_char = null_mut();
            let mut holder: *mut c_char = null_mut();
            let mut epoch = 0u64;
            let mut err = null_mut();
            // SAFETY: NUL-terminated token, valid out-pointers.
            let code = unsafe {
                lease_token_parse_holder(
                    token.as_ptr(),
                    &mut url,
                    &mut epoch,
                    &mut holder,
                    &mut err,
                )
            };
            let parsed = answer(code, err, &[LEASE_INVALID])?;
            if parsed {
                prop_assert!(!url.is_null());
                // SAFETY: strings written by the call, freed once.
                unsafe {
                    prop_assert!(CStr::from_ptr(url).to_str().is_ok());
                    lease_string_free(url);
                    lease_string_free(holder);
                }
            } else {
                prop_assert!(
                    url.is_null() && holder.is_null(),
                    "output written on failure"
                );
            }
            // The grant's mode and scope: the same verdict, outputs only on success.
            let mut mode = lease_mode::LEASE_MODE_NONE;
            let mut scope: *mut c_char = null_mut();
            let (mut start, mut end) = (7u64, 7u64);
            let mut err = null_mut();
            // SAFETY: NUL-terminated token, valid out-pointers.
            let code = unsafe {
                lease_token_parse_grant(
                    token.as_ptr(),
                    &mut mode,
                    &mut scope,
                    &mut start,
                    &mut end,
                    &mut err,
                )
            };
            prop_assert_eq!(answer(code, err, &[LEASE_INVALID])?, parsed);
            if parsed {
                prop_assert!(mode != lease_mode::LEASE_MODE_NONE);
                prop_assert!(start < end || (start, end) == (0, 0));
                // SAFETY: a string written by the call (or NULL), freed once.
                unsafe {
                    if !scope.is_null() {
                        prop_assert!(CStr::from_ptr(scope).to_str().is_ok());
                    }
                    lease_string_free(scope);
                }
            } else {
                prop_assert!(
                    mode == lease_mode::LEASE_MODE_NONE && scope.is_null() && start == 7,
                    "output written on failure"
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn lease_names_of_any_bytes_are_acquired_or_refused_cleanly() {
    let f = Fixture::new("input-tests-names");
    runner()
        .run(&c_bytes(80), |bytes| {
            let name = c_string(&bytes);
            let mut l: *mut lease = null_mut();
            let mut err = null_mut();
            let mut opts = lease_options_default();
            opts.wait_ms = 0;
            // SAFETY: live store, NUL-terminated name, valid options and out-pointers.
            let code = unsafe { lease_acquire(f.store, name.as_ptr(), &opts, &mut l, &mut err) };
            if answer(code, err, &[LEASE_INVALID])? {
                // SAFETY: a lease just acquired, released and freed once.
                unsafe {
                    prop_assert_eq!(lease_release(l, null_mut()), LEASE_OK);
                    lease_free(l);
                }
            } else {
                prop_assert!(l.is_null(), "output written on failure");
            }
            Ok(())
        })
        .unwrap();
}

/// Any key and any bytes: the write is done or refused cleanly, and what is read back is
/// exactly what was written (an empty buffer may be passed as NULL).
#[test]
fn fenced_keys_and_data_of_any_bytes_round_trip_or_are_refused_cleanly() {
    let f = Fixture::new("input-tests-data");
    let l = f.acquire("writer");
    let data = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..4096),
        Just(Vec::new()),
    ];
    runner()
        .run(
            &(c_bytes(60), data, any::<bool>()),
            |(key, data, null_when_empty)| {
                let key = c_string(&key);
                let ptr = if data.is_empty() && null_when_empty {
                    null()
                } else {
                    data.as_ptr()
                };
                let mut err = null_mut();
                // SAFETY: live lease, NUL-terminated key, `ptr` valid for `data.len()` bytes.
                let code = unsafe {
                    lease_fenced_put(l, key.as_ptr(), ptr, data.len(), null_mut(), &mut err)
                };
                if !answer(code, err, &[LEASE_INVALID])? {
                    return Ok(());
                }
                let mut obj: *mut lease_object = null_mut();
                // SAFETY: live store, the same key, a valid out-pointer.
                let code = unsafe { lease_fenced_get(f.store, key.as_ptr(), &mut obj, null_mut()) };
                prop_assert_eq!(code, LEASE_OK);
                prop_assert!(!obj.is_null(), "a written object is missing");
                // SAFETY: a live object, freed once after its bytes are compared.
                unsafe {
                    let mut len = 0usize;
                    let p = lease_object_data(obj, &mut len);
                    prop_assert!(!p.is_null());
                    prop_assert_eq!(std::slice::from_raw_parts(p, len), &data[..]);
                    lease_object_free(obj);
                }
                // A fenced read of it gives the same bytes.
                let mut obj: *mut lease_object = null_mut();
                // SAFETY: live lease, the same key, a valid out-pointer.
                let code = unsafe { lease_fenced_read(l, key.as_ptr(), &mut obj, null_mut()) };
                prop_assert_eq!(code, LEASE_OK);
                prop_assert!(!obj.is_null(), "a written object is missing");
                // SAFETY: a live object, freed once after its bytes are compared.
                unsafe {
                    let mut len = 0usize;
                    let p = lease_object_data(obj, &mut len);
                    prop_assert_eq!(std::slice::from_raw_parts(p, len), &data[..]);
                    lease_object_free(obj);
                }
                Ok(())
            },
        )
        .unwrap();
    release_and_free(l);
}

/// A NULL buffer with a length is refused, whatever the length.
#[test]
fn a_null_buffer_with_a_length_is_invalid() {
    let f = Fixture::new("input-tests-null");
    let l = f.acquire("writer");
    let key = CString::new("k").unwrap();
    runner()
        .run(&(1usize..=usize::MAX), |len| {
            let mut err = null_mut();
            // SAFETY: live lease; a NULL buffer must be refused before it is read.
            let code =
                unsafe { lease_fenced_put(l, key.as_ptr(), null(), len, null_mut(), &mut err) };
            prop_assert!(!answer(code, err, &[LEASE_INVALID])?);
            Ok(())
        })
        .unwrap();
    release_and_free(l);
}

/// Negative control: the answer check refuses what a broken call could do (output on failure
/// is covered per test; here: a success that also wrote an error, and a failure with a code
/// the call may not give).
#[test]
fn the_answer_check_refutes_broken_answers() {
    let bogus = Box::into_raw(Box::new(lease_error {
        code: LEASE_INTERNAL,
        message: CString::new("x").unwrap(),
        epoch: 0,
    }));
    assert!(answer(LEASE_OK, bogus, &[]).is_err());
    assert!(answer(LEASE_INTERNAL, bogus, &[LEASE_INVALID]).is_err());
    // SAFETY: from Box::into_raw above, freed once.
    unsafe { lease_error_free(bogus) };
}
