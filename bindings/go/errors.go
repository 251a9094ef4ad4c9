package lease

// #include <stdlib.h>
// #include "liblease.h"
import "C"

import (
	"errors"
	"fmt"
)

// Code is a liblease status code (the numbers of include/liblease.h, fixed and never reused).
type Code int

// The codes of include/liblease.h.
const (
	CodeOK          Code = C.LEASE_OK
	CodeHeld        Code = C.LEASE_HELD
	CodeTimeout     Code = C.LEASE_TIMEOUT
	CodeCancelled   Code = C.LEASE_CANCELLED
	CodeLost        Code = C.LEASE_LOST
	CodeFenced      Code = C.LEASE_FENCED
	CodeUnavailable Code = C.LEASE_UNAVAILABLE
	CodeInvalid     Code = C.LEASE_INVALID
	CodeStore       Code = C.LEASE_STORE
	CodeCorrupt     Code = C.LEASE_CORRUPT
	CodeInternal    Code = C.LEASE_INTERNAL
	CodePanic       Code = C.LEASE_PANIC
	CodeForked      Code = C.LEASE_FORKED
	CodeConflict    Code = C.LEASE_CONFLICT
	CodeQueueFull   Code = C.LEASE_QUEUE_FULL
	CodeUnsupported Code = C.LEASE_UNSUPPORTED
)

// String is the code's C name, e.g. "LEASE_HELD" ("LEASE_UNKNOWN" for a number that is not a code).
func (c Code) String() string {
	return C.GoString(C.lease_code_name(C.int(c)))
}

// Sentinel errors, one per kind: match them with errors.Is. Every error this package returns
// for a failed liblease call is an *Error, which also carries the message.
var (
	// ErrHeld: the lease is held by someone else and the call did not wait (TryAcquire).
	ErrHeld = errors.New("lease: held by another holder")
	// ErrTimeout: the wait ran out (the context's deadline passed).
	ErrTimeout = errors.New("lease: timed out")
	// ErrCancelled: the context was cancelled while waiting.
	ErrCancelled = errors.New("lease: cancelled")
	// ErrLost: the lease was lost (taken over, broken, expired without renewal, deleted), or
	// was released, or has less time left than asked.
	ErrLost = errors.New("lease: lost")
	// ErrFenced: a write carried an epoch lower than one already recorded: a newer holder exists.
	ErrFenced = errors.New("lease: fenced")
	// ErrConflict: a version-conditional write (FencedPutIf) found the object changed since the
	// version the caller read, by a writer of the same or a lower epoch (a higher epoch is
	// ErrFenced); nothing was written. Read it again and decide again (FencedUpdate does).
	ErrConflict = errors.New("lease: changed since read")
	// ErrUnavailable: the store is unavailable or overloaded; the same call may succeed later.
	ErrUnavailable = errors.New("lease: store unavailable")
	// ErrInvalid: bad input (URL, name, option, a string with a NUL byte or invalid UTF-8, a
	// closed handle).
	ErrInvalid = errors.New("lease: invalid argument")
	// ErrStore: a permanent store problem (permissions, missing bucket or directory, credentials).
	ErrStore = errors.New("lease: store error")
	// ErrCorrupt: a stored object could not be understood.
	ErrCorrupt = errors.New("lease: corrupt object")
	// ErrInternal: a bug in the library (LEASE_INTERNAL or LEASE_PANIC).
	ErrInternal = errors.New("lease: internal error")
	// ErrForked: liblease was used in a child process after fork().
	ErrForked = errors.New("lease: used after fork")
	// ErrQueueFull: a queued lock's record has no room for another participant (its size
	// limit is reached); nothing was written. Try again once others have left.
	ErrQueueFull = errors.New("lease: queue full")
	// ErrUnsupported: a stored record was written by a newer version of liblease (a format,
	// mode or feature this one does not know); it is left as it is. Upgrade.
	ErrUnsupported = errors.New("lease: written by a newer version")
)

func sentinel(c Code) error {
	switch c {
	case CodeHeld:
		return ErrHeld
	case CodeTimeout:
		return ErrTimeout
	case CodeCancelled:
		return ErrCancelled
	case CodeLost:
		return ErrLost
	case CodeFenced:
		return ErrFenced
	case CodeConflict:
		return ErrConflict
	case CodeUnavailable:
		return ErrUnavailable
	case CodeInvalid:
		return ErrInvalid
	case CodeStore:
		return ErrStore
	case CodeCorrupt:
		return ErrCorrupt
	case CodeForked:
		return ErrForked
	case CodeQueueFull:
		return ErrQueueFull
	case CodeUnsupported:
		return ErrUnsupported
	default: // CodeInternal, CodePanic, and codes added after this binding
		return ErrInternal
	}
}

// Error is a failed liblease call: its code and a one-line message (for people, not API).
// errors.Is(err, ErrHeld) and the like match by code; a context error that ended a wait is
// wrapped too, so errors.Is(err, context.DeadlineExceeded) holds for a timed-out Acquire.
type Error struct {
	Code    Code
	Message string
	// Epoch is the epoch the error is about, when known, else 0. For ErrFenced it is the
	// epoch of the newer holder whose write (or admitted token) refused this one.
	Epoch uint64
	cause error
}

func (e *Error) Error() string {
	return fmt.Sprintf("lease: %s (%s)", e.Message, e.Code)
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	return target == sentinel(e.Code)
}

// Unwrap returns the context error that ended a wait, if any.
func (e *Error) Unwrap() error {
	return e.cause
}

// Retryable reports whether the same call may succeed later without any change by the caller.
func (e *Error) Retryable() bool {
	return e.Code == CodeUnavailable || e.Code == CodeHeld || e.Code == CodeTimeout
}

func newError(c Code, msg string) *Error {
	return &Error{Code: c, Message: msg}
}

// takeError turns a code and its error object into an *Error, freeing the object.
func takeError(code C.enum_lease_code, cerr *C.lease_error) error {
	if code == C.LEASE_OK {
		return nil
	}
	msg := C.GoString(C.lease_error_message(cerr))
	epoch := uint64(C.lease_error_epoch(cerr))
	C.lease_error_free(cerr)
	if msg == "" {
		msg = Code(code).String()
	}
	e := newError(Code(code), msg)
	e.Epoch = epoch
	return e
}
