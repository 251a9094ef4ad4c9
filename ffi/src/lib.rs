//! liblease: the C ABI of lease.
//!
//! Blocking calls over the async core, driven by one runtime handle that owns every renewal
//! task. The conventions (status codes, error objects, ownership, threads, fork, callbacks) are
//! written down in `docs/ffi.md`; `include/liblease.h` is generated from these modules by
//! cbindgen (`ffi/header`), so their doc comments are the header's documentation. One module
//! per object family (`runtime`, `store`, `cancel`, `held` for acquiring and held leases,
//! `session` for shared sessions and their grants, `fence`), with `error` (codes and error
//! objects) and `boundary` (what every call goes through) apart.
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
mod session;
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

    /// An options struct of two layouts: `Old` (the first with `struct_size`), and `New`, which
    /// appended one field. Each is read by a library that knows the other.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Old {
        struct_size: usize,
        a: u64,
    }

    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct New {
        struct_size: usize,
        a: u64,
        added: u64,
    }

    const OLD: usize = std::mem::size_of::<Old>();
    const NEW: usize = std::mem::size_of::<New>();

    fn read<T: Copy>(p: &T, default: T) -> Result<T, (lease_code, String)> {
        // SAFETY: `p` is a live `T`, and for `New` read as `Old` its size covers `struct_size`.
        unsafe { sized_options(p, "opts", default, OLD) }.map_err(|f| (f.code, f.message))
    }

    /// `struct_size` (docs/ffi.md, "Options"): an older program's smaller struct is read up to
    /// its size and the added field keeps its default; a newer program's larger struct is read
    /// when what this library does not know is zero, and refused when it sets it; a size of 0,
    /// below the first layout's, or no size at all is refused, saying to start from the
    /// default.
    #[test]
    fn options_are_read_up_to_the_size_the_caller_was_compiled_with() {
        let new_default = New {
            struct_size: NEW,
            a: 1,
            added: 7,
        };
        // An older program: its struct ends before `added`.
        let old = Old {
            struct_size: OLD,
            a: 5,
        };
        // SAFETY: reading `OLD` bytes of `old` only (its struct_size), as the library would.
        let as_new =
            unsafe { sized_options(&old as *const Old as *const New, "opts", new_default, OLD) };
        assert_eq!(
            as_new.map_err(|f| f.message).unwrap(),
            New {
                struct_size: OLD,
                a: 5,
                added: 7
            }
        );
        // A newer program, read by an older library: the unknown field zero, then set.
        let old_default = Old {
            struct_size: OLD,
            a: 1,
        };
        let newer = New {
            struct_size: NEW,
            a: 5,
            added: 0,
        };
        let read_old = |n: &New| {
            // SAFETY: `n` is a live `New`: `NEW` readable bytes that begin with its size.
            unsafe { sized_options(n as *const New as *const Old, "opts", old_default, OLD) }
                .map_err(|f| (f.code, f.message))
        };
        assert_eq!(
            read_old(&newer).unwrap(),
            Old {
                struct_size: NEW,
                a: 5
            }
        );
        let (code, msg) = read_old(&New { added: 3, ..newer }).unwrap_err();
        assert_eq!(code, LEASE_INVALID);
        assert!(
            msg.contains("does not know") && msg.contains("link the liblease"),
            "{msg}"
        );
        // Sizes that are not a struct's.
        for size in [0, OLD - 1, 1 << 20] {
            let (code, msg) = read(
                &New {
                    struct_size: size,
                    ..newer
                },
                new_default,
            )
            .unwrap_err();
            assert_eq!(code, LEASE_INVALID, "{size}");
            assert!(msg.contains("start from opts_default()"), "{size}: {msg}");
        }
        // NULL: the defaults.
        // SAFETY: NULL is allowed.
        let none = unsafe { sized_options(std::ptr::null::<New>(), "opts", new_default, OLD) };
        assert_eq!(none.map_err(|f| f.message).unwrap(), new_default);
        // The same size: read whole.
        assert_eq!(read(&newer, new_default).unwrap(), newer);
    }
}
