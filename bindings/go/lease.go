// Package lease is the Go binding of lease: leases, leader election and fencing on object
// storage (S3 conditional writes, a directory, memory), over the C ABI of liblease.
//
// C and Go workers share the one implementation of the protocol with Rust, Python and Node
// workers, so all of them can contend for the same lease.
//
//	store, err := lease.Open("file:///var/lib/app/locks")
//	l, err := store.Acquire(ctx, "gc", &lease.Options{TTL: 30 * time.Second})
//	if err != nil { ... }            // errors.Is(err, lease.ErrTimeout), ...
//	defer l.Close()                  // releases the lease
//	fmt.Println("leader at epoch", l.Epoch())
//	if err := l.EnsureHeld(5 * time.Second); err != nil { ... } // before each step
//
// Building: the package links liblease through pkg-config. Build and install it first:
//
//	cargo build --release -p lease-ffi
//	ffi/install.sh --prefix $HOME/.local --from target/release
//	export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig
//	go build ./...                   # or: go build -tags lease_static ./...
//
// See docs/ffi.md for the conventions underneath (threads, callbacks, fork).
package lease

// #include <stdlib.h>
// #include "liblease.h"
// enum lease_code lease_go_on_lost(const struct lease *l, uintptr_t handle);
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Version is the version of the liblease this program runs with, e.g. "0.1.0".
func Version() string {
	return C.GoString(C.lease_version())
}

// One runtime per process: its threads renew every lease this process holds.
var (
	rtOnce sync.Once
	rtPtr  *C.lease_runtime
	rtErr  error
)

func theRuntime() (*C.lease_runtime, error) {
	rtOnce.Do(func() {
		opts := C.lease_runtime_options_default()
		name := C.CString("go")
		defer C.free(unsafe.Pointer(name))
		opts.client_name = name
		var cerr *C.lease_error
		code := C.lease_runtime_new(&opts, &rtPtr, &cerr)
		rtErr = takeError(code, cerr)
	})
	return rtPtr, rtErr
}

// cString converts s for C; strings with a NUL byte cannot cross (C would cut them short).
func cString(s, what string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, newError(CodeInvalid, what+" contains a NUL byte")
	}
	return C.CString(s), nil
}

// Store is an open store: s3://BUCKET?options, file:///DIR or memory://NAMESPACE. Safe for
// concurrent use.
type Store struct {
	mu  sync.RWMutex
	ptr *C.lease_store
	url string
}

// Open opens the store at url. It does not contact the store.
func Open(url string) (*Store, error) {
	rt, err := theRuntime()
	if err != nil {
		return nil, err
	}
	curl, err := cString(url, "url")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(curl))
	var ptr *C.lease_store
	var cerr *C.lease_error
	if err := takeError(C.lease_store_open(rt, curl, &ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	s := &Store{ptr: ptr, url: url}
	runtime.SetFinalizer(s, (*Store).Close)
	return s, nil
}

// URL is the URL the store was opened with.
func (s *Store) URL() string { return s.url }

// Close frees the store. Leases acquired from it stay valid. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr != nil {
		C.lease_store_free(s.ptr)
		s.ptr = nil
	}
	runtime.SetFinalizer(s, nil)
	return nil
}

// Options say how a lease is acquired and held. The zero value (or nil) means the defaults.
type Options struct {
	// TTL is how long the lease lasts without renewal (100 ms to 24 h; default 30 s). The
	// holder renews every TTL/3 in the background.
	TTL time.Duration
	// Label is shown to people by Status (at most 256 bytes).
	Label string
	// Data is a small payload stored in the record (at most 16 KiB), e.g. the leader's address.
	Data string
	// PollInterval is how often a waiter re-reads the record (default TTL/10, within 50 ms to 2 s).
	PollInterval time.Duration

	// Queued locks (docs/protocol.md §10), granted in arrival order among conflicting requests;
	// Lease.Grant says what was granted.

	// Shared asks for a shared grant (a reader): it holds beside other shared holders, while an
	// exclusive holder (a writer) holds alone. A waiting writer stops later readers.
	Shared bool
	// Permits makes the lock a semaphore of this many permits (1 to 65,536): a shared holder takes
	// one. Implies Shared. 0: no permits.
	Permits uint32
	// Scope holds only this path of the lock ("tables/users": it conflicts with the paths above
	// and under it, not with its siblings). "": the whole lock.
	Scope string
	// Range holds only the bytes [Start, End) of one object: overlapping ranges conflict.
	Range *ByteRange
	// Queue queues an exclusive request in arrival order (a queued lock) rather than racing for
	// a plain lease. Shared, Permits, Scope and Range always queue.
	Queue bool
	// Priority orders waiters that conflict (-1,000,000,000 to 1,000,000,000; 0 by default,
	// and non-zero queues): the higher is granted first, arrival order within a priority, and
	// a waiter is passed over by at most 8 later ones. A holder is never preempted.
	Priority int32

	// Owner names who in this process asks: acquiring a lease (or a conflicting grant) that the
	// same Owner holds fails at once with an error matching ErrHeld, instead of waiting for
	// itself; leases are not re-entrant. "": nobody in particular, no check (the default:
	// goroutines have no identity, so a goroutine that acquires what it holds waits, as with
	// sync.Mutex, until ctx ends it).
	Owner string

	// WakeHints says where a waiter of a queued lock can be woken by the write that grants it
	// (docs/protocol.md §10, "Wake hints"): WakeHintsLoopback (listen on 127.0.0.1: hints from
	// writers on this host; "" means the same), WakeHintsOff (no address in its queue entry: it
	// learns of its grant at its next poll), or the IP address of an interface to listen on
	// ("10.0.0.5", for writers on other hosts). Anything else fails with an error matching
	// ErrInvalid. A hint only makes the waiter read the record sooner: a firewall that drops it
	// leaves the poll.
	WakeHints string

	// AskYield, once waiting, asks the holders in this request's way to step aside for it
	// (docs/protocol.md §10, "Yield on request"): a queued request. The holders' yield channels
	// (Lease.YieldRequests) get the request, with this waiter's holder id as By and To, and each
	// decides when to release. With TryAcquire, which never waits and so asks nobody: an error
	// matching ErrInvalid.
	AskYield bool
	// YieldReason says why, with AskYield (at most 256 bytes; "": none). A reason without
	// AskYield fails with an error matching ErrInvalid.
	YieldReason string

	// Preempt, set to PreemptEveryEffectFenced, takes a live holder's plain lease at once, with
	// the next epoch, instead of waiting out its deadline (docs/protocol.md §5, "Preemption for
	// fenced workloads"). It asserts that every effect of every holder of this lease goes
	// through fenced writes or a fencing gate: the preempted holder goes on believing it holds
	// until its next renewal (it then loses the lease, reason "preempted"), so any unfenced
	// effect may overlap the new holder's. "" or PreemptNever: wait (the default). Any other
	// value, or a queued request with it, fails with an error matching ErrInvalid.
	Preempt Preempt
}

// Preempt is Options.Preempt: no bool, the one value that preempts names what it asserts.
type Preempt string

const (
	// PreemptNever waits out a live holder (the default; "" means the same).
	PreemptNever Preempt = "never"
	// PreemptEveryEffectFenced asserts that every effect of every holder of the lease is
	// fenced, and takes a live holder's lease at once.
	PreemptEveryEffectFenced Preempt = "every-effect-fenced"
)

// The named choices of Options.WakeHints (an interface's IP address is the fourth).
const (
	WakeHintsLoopback = "loopback"
	WakeHintsOff      = "off"
	// WakeHintsRoute listens on the address this host's default route leaves from.
	WakeHintsRoute = "route"
)

// ByteRange is the bytes [Start, End) of an object (End excluded, above Start).
type ByteRange struct {
	Start, End uint64
}

// Mode is what a queued lock granted: ModeExclusive or ModeShared.
type Mode int

const (
	// ModeExclusive: a writer, alone in its scope.
	ModeExclusive Mode = 1
	// ModeShared: a reader, beside other readers (fenced writes refuse it with ErrInvalid).
	ModeShared Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeShared:
		return "shared"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Grant is what a queued lock granted (Lease.Grant).
type Grant struct {
	Mode Mode
	// Token is the grant's fencing token (the lease's Epoch): strictly increasing per lock
	// across all modes and scopes.
	Token uint64
	// Scope, Range and Permits are those of the request.
	Scope   string
	Range   *ByteRange
	Permits uint32
}

// Acquire acquires the lease name, waiting while someone else holds it until ctx is done: it
// returns an error matching ErrTimeout (and context.DeadlineExceeded) when ctx's deadline
// passes, and ErrCancelled (and context.Canceled) when ctx is cancelled. A store that does not
// answer ends the wait with an error matching ErrUnavailable: at ctx's deadline, or once it has
// not answered for the TTL (at least 10 s), also with context.Background().
func (s *Store) Acquire(ctx context.Context, name string, opts *Options) (*Lease, error) {
	return s.acquire(ctx, name, opts, false)
}

// TryAcquire tries once: it returns an error matching ErrHeld if someone else holds the lease.
func (s *Store) TryAcquire(ctx context.Context, name string, opts *Options) (*Lease, error) {
	return s.acquire(ctx, name, opts, true)
}

func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeTimeout, Message: "the context's deadline passed before the lease was acquired", cause: err}
	}
	return &Error{Code: CodeCancelled, Message: "the context was cancelled before the lease was acquired", cause: err}
}

func (s *Store) acquire(ctx context.Context, name string, opts *Options, try bool) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	cname, err := cString(name, "name")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	copts, freeOpts, err := cOptions(opts)
	defer freeOpts()
	if err != nil {
		return nil, err
	}
	byDeadline := setWait(ctx, &copts, try)
	stopCancel, err := cancelWhenDone(ctx, &copts, nil)
	if err != nil {
		return nil, err
	}
	defer stopCancel()

	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, newError(CodeInvalid, "the store is closed")
	}
	var ptr *C.lease
	var cerr *C.lease_error
	code := C.lease_acquire(s.ptr, cname, &copts, &ptr, &cerr)
	if err := takeError(code, cerr); err != nil {
		return nil, waitError(ctx, err, byDeadline)
	}
	l, err := newLease(ptr, s.url)
	if err == nil && opts != nil {
		if g := l.grant; g != nil {
			g.Scope, g.Permits = opts.Scope, opts.Permits
			if opts.Range != nil {
				r := *opts.Range
				g.Range = &r
			}
		}
	}
	return l, err
}

// cOptions is opts as liblease's lease_options, and a function that frees the C strings it
// points to (call it, also after an error).
func cOptions(opts *Options) (C.lease_options, func(), error) {
	copts := C.lease_options_default()
	var frees []unsafe.Pointer
	free := func() {
		for _, p := range frees {
			C.free(p)
		}
	}
	// text sets *dst to a C copy of s (freed by free); "" leaves it NULL.
	text := func(s, what string, dst **C.char) error {
		if s == "" {
			return nil
		}
		p, err := cString(s, what)
		if err != nil {
			return err
		}
		frees = append(frees, unsafe.Pointer(p))
		*dst = p
		return nil
	}
	if opts != nil {
		if opts.TTL < 0 || opts.PollInterval < 0 {
			return copts, free, newError(CodeInvalid, "TTL and PollInterval must not be negative")
		}
		if opts.TTL > 0 {
			copts.ttl_ms = C.uint64_t(opts.TTL.Milliseconds())
		}
		if opts.PollInterval > 0 {
			copts.poll_interval_ms = C.uint64_t(opts.PollInterval.Milliseconds())
		}
		if err := text(opts.Label, "label", &copts.label); err != nil {
			return copts, free, err
		}
		if err := text(opts.Data, "data", &copts.data); err != nil {
			return copts, free, err
		}
		if opts.Shared {
			copts.shared = 1
		}
		copts.permits = C.uint32_t(opts.Permits)
		if err := text(opts.Scope, "scope", &copts.scope); err != nil {
			return copts, free, err
		}
		if r := opts.Range; r != nil {
			if r.End <= r.Start {
				return copts, free, newError(CodeInvalid, fmt.Sprintf(
					"byte range %d..%d is empty: End must be above Start (End is excluded)", r.Start, r.End))
			}
			copts.range_start = C.uint64_t(r.Start)
			copts.range_end = C.uint64_t(r.End)
		}
		if opts.Queue {
			copts.queue = 1
		}
		copts.priority = C.int32_t(opts.Priority)
		if err := text(opts.Owner, "owner", &copts.owner); err != nil {
			return copts, free, err
		}
		if err := text(opts.WakeHints, "wake hints", &copts.wake_hints); err != nil {
			return copts, free, err
		}
		if opts.AskYield {
			copts.ask_yield = 1
		}
		if err := text(opts.YieldReason, "yield reason", &copts.yield_reason); err != nil {
			return copts, free, err
		}
		if err := text(string(opts.Preempt), "preempt", &copts.preempt); err != nil {
			return copts, free, err
		}
	}
	if copts.owner == nil {
		// Not the calling thread (liblease's default): goroutines move between threads.
		copts.owner = noOwner
	}
	return copts, free, nil
}

// setWait sets copts.wait_ms from ctx's deadline (or 0 to try once); it reports whether the
// deadline set it.
func setWait(ctx context.Context, copts *C.lease_options, try bool) bool {
	switch deadline, ok := ctx.Deadline(); {
	case try:
		copts.wait_ms = 0
	case ok:
		ms := time.Until(deadline).Milliseconds()
		if ms < 0 {
			ms = 0
		}
		copts.wait_ms = C.int64_t(ms)
		return true
	default:
		copts.wait_ms = -1
	}
	return false
}

// cancelWhenDone gives copts a cancel token that a goroutine cancels when ctx is done (or
// when also is closed, if not nil); the function it returns stops that goroutine, waits for it
// and frees the token (call it once the blocking call has returned).
func cancelWhenDone(ctx context.Context, copts *C.lease_options, also <-chan struct{}) (func(), error) {
	done := ctx.Done()
	if done == nil && also == nil {
		return func() {}, nil
	}
	token := C.lease_cancel_token_new()
	if token == nil {
		return nil, newError(CodeForked, "cannot create a cancel token (after fork?)")
	}
	copts.cancel = token
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			C.lease_cancel_token_cancel(token)
		case <-also:
			C.lease_cancel_token_cancel(token)
		case <-stop:
		}
	}()
	return func() {
		close(stop)
		<-finished
		C.lease_cancel_token_free(token)
	}, nil
}

// waitError is err (from a blocking acquire) with ctx's part in it: a cancellation caused by
// ctx's deadline is a timeout, and both unwrap to ctx's error.
func waitError(ctx context.Context, err error, byDeadline bool) error {
	e := err.(*Error)
	switch {
	case e.Code == CodeCancelled && ctx.Err() != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			e.Code = CodeTimeout
		}
		e.cause = ctx.Err()
	case e.Code == CodeTimeout && byDeadline:
		e.cause = context.DeadlineExceeded
	}
	return e
}

// Lease is a held lease, renewed in the background until released, lost or closed. Safe for
// concurrent use.
type Lease struct {
	mu    sync.RWMutex
	ptr   *C.lease
	epoch uint64
	token Token
	// grant is nil for a plain lease.
	grant *Grant
	// storeURL is the URL of the store the lease was acquired in (FencedUpdate reads there).
	storeURL string
	lost     *lostState
	handle   cgo.Handle
	health   *feed[HealthEvent]
	yields   *feed[YieldRequested]
	// A Release returned nil: the holder gave the lease up, so Lost() stays open even when the
	// *Lease is collected afterwards.
	released atomic.Bool
}

// lostState is what Lost() and LostReason() read. It is reachable from the lost callback's
// handle, not from the *Lease: a holder may keep only the channel.
type lostState struct {
	once   sync.Once
	ch     chan struct{}
	mu     sync.Mutex
	reason string
}

// close records reason and closes the channel, the first time only; it reports whether it did.
func (st *lostState) close(reason string) bool {
	closed := false
	st.once.Do(func() {
		st.mu.Lock()
		st.reason = reason
		st.mu.Unlock()
		close(st.ch)
		closed = true
	})
	return closed
}

//export goLeaseLost
func goLeaseLost(handle C.uintptr_t, reason *C.char) {
	// On a liblease runtime thread: only record and signal, never block.
	cgo.Handle(handle).Value().(*lostState).close(C.GoString(reason))
}

func newLease(ptr *C.lease, storeURL string) (*Lease, error) {
	st := &lostState{ch: make(chan struct{})}
	l := &Lease{ptr: ptr, epoch: uint64(C.lease_epoch(ptr)), storeURL: storeURL, lost: st, handle: cgo.NewHandle(st)}
	switch C.lease_grant_mode(ptr) {
	case C.LEASE_MODE_EXCLUSIVE:
		l.grant = &Grant{Mode: ModeExclusive, Token: l.epoch}
	case C.LEASE_MODE_SHARED:
		l.grant = &Grant{Mode: ModeShared, Token: l.epoch}
	}
	var ctok *C.char
	if code := C.lease_token(ptr, &ctok, nil); code == C.LEASE_OK {
		l.token, _ = ParseToken(C.GoString(ctok))
		C.lease_string_free(ctok)
	}
	if code := C.lease_go_on_lost(ptr, C.uintptr_t(l.handle)); code != C.LEASE_OK {
		C.lease_free(ptr)
		l.handle.Delete()
		return nil, newError(Code(code), "cannot register the lost callback")
	}
	// A lease never closed is released when collected (as a Rust Lease is when dropped).
	runtime.SetFinalizer(l, (*Lease).collected)
	return l, nil
}

// collected is the finalizer of a *Lease nobody closed. Its holder may still be waiting on
// Lost() (the channel outlives the *Lease) and working as if it held the lease, so unless the
// lease was released, Lost() is closed, and the event logged, before the release lets anyone
// else acquire. The release itself blocks, so it runs in its own goroutine (a finalizer must
// not hold up the others).
func (l *Lease) collected() {
	if !l.released.Load() {
		const why = "the *Lease was collected by the garbage collector without Release or Close (the collection releases the lease)"
		if l.lost.close(why) {
			log.Printf("lease: %s (epoch %d): %s; its Lost() is closed. Call Close when done with a lease.",
				l.token.Lease, l.epoch, why)
		}
	}
	go func() { _ = l.Close() }()
}

// noOwner is liblease's "nobody in particular" (an empty string), allocated once.
var noOwner = C.CString("")

// SetTTL changes the lease's TTL (100 ms to 24 h): a renewal made at once writes it, and the
// renewals after it follow it (redis-py's extend, with the new TTL whole). Waiters go by the
// record's TTL; while a shorter TTL's write may land, this holder believes no longer than its
// send + the shorter TTL. It returns the time left; an error matching ErrInvalid (out of range;
// a queued lock's grant keeps its TTL) or ErrLost. ctx is checked before the call, which then
// runs to its end (at most the lease's deadline).
func (l *Lease) SetTTL(ctx context.Context, ttl time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxError(err)
	}
	if ttl < 0 {
		return 0, newError(CodeInvalid, "the TTL must not be negative")
	}
	return l.change(func(p *C.lease, left *C.uint64_t, cerr **C.lease_error) C.enum_lease_code {
		return C.lease_set_ttl(p, C.uint64_t(ttl.Milliseconds()), left, cerr)
	})
}

// SetData changes the data stored in the lease's record (etcd's Proclaim; "" removes it, as
// Options.Data "" means none): a renewal made at once writes it. It returns the time left.
func (l *Lease) SetData(ctx context.Context, data string) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxError(err)
	}
	var cdata *C.char
	if data != "" {
		p, err := cString(data, "data")
		if err != nil {
			return 0, err
		}
		defer C.free(unsafe.Pointer(p))
		cdata = p
	}
	return l.change(func(p *C.lease, left *C.uint64_t, cerr **C.lease_error) C.enum_lease_code {
		return C.lease_set_data(p, cdata, left, cerr)
	})
}

// change runs a liblease call that changes the held lease and writes the time left.
func (l *Lease) change(call func(*C.lease, *C.uint64_t, **C.lease_error) C.enum_lease_code) (time.Duration, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return 0, newError(CodeLost, "the lease is closed")
	}
	var left C.uint64_t
	var cerr *C.lease_error
	if err := takeError(call(l.ptr, &left, &cerr), cerr); err != nil {
		return 0, err
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Epoch is the fencing epoch: strictly increasing per lease name, unchanged by renewals and
// release. Hand it (or Token) to resources that check it. The first epoch of a new lease record
// is the clock in milliseconds since 1970 (so a record deleted and made again never re-issues
// an epoch): compare epochs with each other, never with small constants.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Grant is what a queued lock granted (a copy), or nil for a plain lease.
func (l *Lease) Grant() *Grant {
	if l.grant == nil {
		return nil
	}
	g := *l.grant
	if g.Range != nil {
		r := *g.Range
		g.Range = &r
	}
	return &g
}

// Remaining is how long this holder may still rely on the lease: zero once it is lost,
// released or closed.
func (l *Lease) Remaining() time.Duration {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return 0
	}
	return time.Duration(C.lease_remaining_ms(l.ptr)) * time.Millisecond
}

// EnsureHeld returns nil only if the lease is held for at least min more; otherwise an error
// matching ErrLost. Call it before each step that needs the lease. It does not block.
func (l *Lease) EnsureHeld(min time.Duration) error {
	if min < 0 {
		min = 0
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return newError(CodeLost, "the lease is closed")
	}
	var cerr *C.lease_error
	return takeError(C.lease_ensure_held(l.ptr, C.uint64_t(min.Milliseconds()), &cerr), cerr)
}

// Lost is closed when the lease is lost (taken over, broken, expired without renewal,
// deleted), and when the *Lease is collected by the garbage collector without Release or Close
// (the collection releases the lease; Lost is closed first, and the event logged with the
// standard log package), so a goroutine that kept only this channel learns that it no longer
// holds the lease. It is never closed if the lease is released or closed first.
func (l *Lease) Lost() <-chan struct{} { return l.lost.ch }

// LostReason says why the lease was lost ("" while it is not).
func (l *Lease) LostReason() string {
	l.lost.mu.Lock()
	defer l.lost.mu.Unlock()
	return l.lost.reason
}

// Release releases the lease so a waiter can take it at once. Releasing twice is harmless.
// It returns an error matching ErrLost if the lease was lost before it could be released:
// whatever was done under it may have overlapped with another holder.
func (l *Lease) Release() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return nil
	}
	var cerr *C.lease_error
	err := takeError(C.lease_release(l.ptr, &cerr), cerr)
	if err == nil {
		l.released.Store(true)
	}
	return err
}

// Close releases the lease (as Release, returning its error) and frees it. After Close no
// method blocks, Remaining is zero and Lost never closes. Closing twice is harmless.
func (l *Lease) Close() error {
	err := l.Release()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ptr != nil {
		C.lease_free(l.ptr) // after this no lost callback runs: the handle can go
		l.ptr = nil
		l.handle.Delete()
		if l.health != nil {
			l.health.end()
		}
		if l.yields != nil {
			l.yields.end()
		}
	}
	runtime.SetFinalizer(l, nil)
	return err
}

// Holder is who holds (or last held) a lease.
type Holder struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	User   string `json:"user"`
	Client string `json:"client"`
}

// Status is a lease as the store shows it now.
type Status struct {
	URL string
	// State is "free" (no record), "held", "released", "expired" (a waiter may take it over
	// now), "broken" (by `lease break`: nobody may take it until the broken holder's deadline
	// has surely passed, unless that holder releases) or "corrupt".
	State  string
	Epoch  uint64
	Holder *Holder
	TTL    time.Duration
	// ExpiresIn (held or broken leases) is the estimated time until a waiter may take the lease
	// over: ttl + grace + the store clock's resolution after the last write, by the store's
	// clock. The holder's own deadline comes before it.
	ExpiresIn  time.Duration
	Data       string
	AcquiredAt string
	RenewedAt  string
	Detail     string
	// A queued lock's permits (0: none), its holders in the order granted and its waiters in
	// arrival order (both nil for a plain lease).
	Permits uint32
	Holders []Participant
	Waiting []Participant
	// History lists the tenures before the current one, most recent first (at most 10).
	History []Tenure
}

// Participant is a holder or a waiter of a queued lock (Status.Holders, Status.Waiting).
type Participant struct {
	Holder Holder
	Mode   Mode
	// Scope is the path held ("": the whole lock or a range); Range the bytes (nil: none).
	Scope string
	Range *ByteRange
	// Token is the grant's fencing token; 0 while waiting.
	Token uint64
	TTL   time.Duration
	Since string
	Data  string
	// Priority is a waiter's priority among competing waiters (higher goes first); Passed how
	// many later-joined waiters went before it (at 8 it is due and goes next). Both 0 for a
	// grant.
	Priority int32
	Passed   uint32
}

type participantJSON struct {
	Holder Holder `json:"holder"`
	Mode   string `json:"mode"`
	Scope  *struct {
		Path  *string `json:"path"`
		Start uint64  `json:"start"`
		End   uint64  `json:"end"`
	} `json:"scope"`
	Token    uint64 `json:"token"`
	TTLMs    int64  `json:"ttl_ms"`
	Since    string `json:"since"`
	Data     string `json:"data"`
	Priority int32  `json:"priority"`
	Passed   uint32 `json:"passed"`
}

func participants(js []participantJSON) []Participant {
	if js == nil {
		return nil
	}
	out := make([]Participant, 0, len(js))
	for _, j := range js {
		p := Participant{Holder: j.Holder, Mode: ModeExclusive, Token: j.Token,
			TTL: time.Duration(j.TTLMs) * time.Millisecond, Since: j.Since, Data: j.Data,
			Priority: j.Priority, Passed: j.Passed}
		if j.Mode == "shared" {
			p.Mode = ModeShared
		}
		if sc := j.Scope; sc != nil {
			if sc.Path != nil {
				p.Scope = *sc.Path
			} else {
				p.Range = &ByteRange{Start: sc.Start, End: sc.End}
			}
		}
		out = append(out, p)
	}
	return out
}

// Status reads the lease name without writing (read permission suffices).
func (s *Store) Status(name string) (*Status, error) {
	cname, err := cString(name, "name")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, newError(CodeInvalid, "the store is closed")
	}
	var cjson *C.char
	var cerr *C.lease_error
	if err := takeError(C.lease_status(s.ptr, cname, &cjson, &cerr), cerr); err != nil {
		return nil, err
	}
	raw := C.GoString(cjson)
	C.lease_string_free(cjson)
	var j struct {
		URL         string            `json:"url"`
		State       string            `json:"state"`
		Epoch       uint64            `json:"epoch"`
		Holder      *Holder           `json:"holder"`
		TTLMs       int64             `json:"ttl_ms"`
		ExpiresInMs int64             `json:"expires_in_ms"`
		Data        string            `json:"data"`
		AcquiredAt  string            `json:"acquired_at"`
		RenewedAt   string            `json:"renewed_at"`
		Detail      string            `json:"detail"`
		Permits     uint32            `json:"permits"`
		Holders     []participantJSON `json:"holders"`
		Waiting     []participantJSON `json:"waiting"`
		History     []Tenure          `json:"history"`
	}
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return nil, newError(CodeInternal, "cannot parse the status liblease returned: "+err.Error())
	}
	return &Status{
		URL: j.URL, State: j.State, Epoch: j.Epoch, Holder: j.Holder,
		TTL: time.Duration(j.TTLMs) * time.Millisecond, ExpiresIn: time.Duration(j.ExpiresInMs) * time.Millisecond,
		Data: j.Data, AcquiredAt: j.AcquiredAt, RenewedAt: j.RenewedAt, Detail: j.Detail,
		Permits: j.Permits, Holders: participants(j.Holders), Waiting: participants(j.Waiting),
		History: j.History,
	}, nil
}
