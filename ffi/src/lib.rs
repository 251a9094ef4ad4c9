//! liblease: the C ABI of lease.
//!
//! Blocking calls over the async core, driven by one runtime handle that owns every renewal
//! task. The conventions (status codes, error objects, ownership, threads, fork, callbacks) are
//! written down in `docs/ffi.md`; `include/liblease.h` is generated from these modules by
//! cbindgen (`ffi/header`), so their doc comments are the header's documentation. One module
//! per object family (`runtime`, `store`, `cancel`, `held` for acquiring and held leases,
//! `fence`), with `error` (codes and error objects) and `boundary` (what every call goes
//! through) apart.
//!
//! Every `extern "C"` function runs its body inside [`call`](boundary::call) or
//! [`quiet`](boundary::quiet), which catch panics (a panic never unwinds into C: it becomes
//! `LEASE_PANIC` or a neutral value), check that the process has not forked since the library
//! started, and write outputs only on success.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

mod boundary;
mod cancel;
mod error;
mod fence;
mod held;
mod observe;
mod runtime;
mod store;

#[cfg(test)]
mod input_tests;

#[cfg(test)]
mod tests {
    use crate::{boundary::*, error::*};
    use std::ffi::{c_int, CStr};

    use lease_core::ErrorKind;

    #[test]
    fn every_kind_maps_to_its_own_code() {
        let kinds = [
            (ErrorKind::Held, LEASE_HELD),
            (ErrorKind::Timeout, LEASE_TIMEOUT),
            (ErrorKind::Cancelled, LEASE_CANCELLED),
            (ErrorKind::Lost, LEASE_LOST),
            (ErrorKind::Fenced, LEASE_FENCED),
            (ErrorKind::Conflict, LEASE_CONFLICT),
            (ErrorKind::Unavailable, LEASE_UNAVAILABLE),
            (ErrorKind::Invalid, LEASE_INVALID),
            (ErrorKind::Store, LEASE_STORE),
            (ErrorKind::Corrupt, LEASE_CORRUPT),
            (ErrorKind::Internal, LEASE_INTERNAL),
            (ErrorKind::QueueFull, LEASE_QUEUE_FULL),
            (ErrorKind::Unsupported, LEASE_UNSUPPORTED),
        ];
        assert_eq!(kinds.len(), ErrorKind::ALL.len(), "a kind without a code");
        for (kind, code) in kinds {
            assert_eq!(code_of(kind), code, "{kind}");
        }
        // Every kind the core has (not only those listed above) has a code of its own, whose
        // C name ends with the core's stable name of the kind.
        for kind in ErrorKind::ALL {
            let name = code_of(kind).name().to_str().unwrap().to_ascii_lowercase();
            assert_eq!(
                name,
                format!("lease_{}", kind.as_str()),
                "{kind} has no code"
            );
        }
        // The numbers are fixed, never renumbered nor reused; new codes come after the last.
        let fixed = [
            (LEASE_OK, 0),
            (LEASE_HELD, 1),
            (LEASE_TIMEOUT, 2),
            (LEASE_CANCELLED, 3),
            (LEASE_LOST, 4),
            (LEASE_FENCED, 5),
            (LEASE_UNAVAILABLE, 6),
            (LEASE_INVALID, 7),
            (LEASE_STORE, 8),
            (LEASE_CORRUPT, 9),
            (LEASE_INTERNAL, 10),
            (LEASE_PANIC, 11),
            (LEASE_FORKED, 12),
            (LEASE_CONFLICT, 13),
            (LEASE_QUEUE_FULL, 14),
            (LEASE_UNSUPPORTED, 15),
        ];
        for (code, n) in fixed {
            assert_eq!(code as c_int, n, "{:?}", code.name());
            assert_eq!(lease_code::from_int(n), Some(code));
        }
        assert!(lease_code::from_int(16).is_none());
        assert!(lease_code::from_int(-1).is_none());
    }

    #[test]
    fn a_panic_becomes_lease_panic_with_a_message() {
        let mut err: *mut lease_error = std::ptr::null_mut();
        let code = call(&mut err, || panic!("boom"));
        assert_eq!(code, LEASE_PANIC);
        // SAFETY: err was just written by `call`.
        unsafe {
            assert_eq!(lease_error_kind(err), LEASE_PANIC);
            let msg = CStr::from_ptr(lease_error_message(err)).to_str().unwrap();
            assert!(msg.contains("boom"), "{msg}");
            lease_error_free(err);
        }
    }
}
