package lease

// #include <stdlib.h>
// #include "liblease.h"
import "C"

import (
	"context"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// SessionOptions say how a shared session is opened (OpenSession). The zero value means the
// defaults.
type SessionOptions struct {
	// TTL is the session's TTL, which every grant held through it has (100 ms to 24 h; default
	// 30 s): the session renews every TTL/3; once its process is gone, others remove its
	// grants TTL + grace after its last renewal.
	TTL time.Duration
	// Label is shown to people by Status (at most 256 bytes).
	Label string
	// Prefix is where the session's record goes: PREFIX.lease-sessions/SID ("": the store's
	// root; else a prefix ending in "/").
	Prefix string
}

// Session is a shared session (docs/protocol.md §10, "Shared sessions: one heartbeat for many
// grants"): one record in the store, renewed by one task, for any number of queued-lock grants
// acquired through it (Session.Acquire), etcd's concurrency.Session for object storage. Safe
// for concurrent use: many goroutines may acquire through one session at once.
//
//	session, err := lease.OpenSession(ctx, "s3://bucket?region=eu-west-1", lease.SessionOptions{TTL: 30 * time.Second})
//	defer session.Close()           // releases every grant still held, then the session
//	g, err := session.Acquire(ctx, "jobs/7", nil)
//	defer g.Close()                 // releases this grant alone
type Session struct {
	mu  sync.RWMutex
	ptr *C.lease_session
	// storeURL is the URL of the store it was opened on (its grants' FencedUpdate reads there).
	storeURL string
	sid      string
	key      string
	url      string
	ttl      time.Duration
}

// OpenSession opens a shared session on the store at url (s3://BUCKET?options, file:///DIR,
// memory://NAMESPACE): its first record is written before it returns. ctx is checked before
// the call, which then runs to its end. The session lives until Close, or until it is lost
// (LostReason); a *Session collected without Close is closed then.
func OpenSession(ctx context.Context, url string, opts SessionOptions) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	store, err := Open(url)
	if err != nil {
		return nil, err
	}
	// The session keeps what it needs of the store (its client and runtime).
	defer store.Close()
	return store.OpenSession(ctx, opts)
}

// OpenSession opens a shared session on the store (see the package function OpenSession).
func (s *Store) OpenSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	if opts.TTL < 0 {
		return nil, newError(CodeInvalid, "the session's TTL must not be negative")
	}
	copts := C.lease_session_options_default()
	if opts.TTL > 0 {
		copts.ttl_ms = C.uint64_t(opts.TTL.Milliseconds())
	}
	if opts.Label != "" {
		p, err := cString(opts.Label, "label")
		if err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(p))
		copts.label = p
	}
	if opts.Prefix != "" {
		p, err := cString(opts.Prefix, "prefix")
		if err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(p))
		copts.prefix = p
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, newError(CodeInvalid, "the store is closed")
	}
	var ptr *C.lease_session
	var cerr *C.lease_error
	if err := takeError(C.lease_session_open(s.ptr, &copts, &ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	session := &Session{
		ptr:      ptr,
		storeURL: s.url,
		sid:      C.GoString(C.lease_session_sid(ptr)),
		key:      C.GoString(C.lease_session_key(ptr)),
		url:      C.GoString(C.lease_session_url(ptr)),
		ttl:      time.Duration(C.lease_session_ttl_ms(ptr)) * time.Millisecond,
	}
	// Closing blocks: a finalizer must not hold up the others.
	runtime.SetFinalizer(session, func(s *Session) { go func() { _ = s.Close() }() })
	return session, nil
}

// SID is the session's id, which its grants' IDs begin with.
func (s *Session) SID() string { return s.sid }

// Key is the session record's key in its store (PREFIX.lease-sessions/SID).
func (s *Session) Key() string { return s.key }

// URL is the session record's URL.
func (s *Session) URL() string { return s.url }

// TTL is the session's TTL, which every grant held through it has.
func (s *Session) TTL() time.Duration { return s.ttl }

// Alive reports whether the session is believed (its last landed renewal less than a TTL ago)
// and not closed.
func (s *Session) Alive() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ptr != nil && C.lease_session_alive(s.ptr) != 0
}

// Attached is how many grants and waiting requests are attached to the session.
func (s *Session) Attached() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return 0
	}
	return int(C.lease_session_attached(s.ptr))
}

// LostReason says why the session was lost ("" while it is not).
func (s *Session) LostReason() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return ""
	}
	return takeString(C.lease_session_lost_reason(s.ptr))
}

// takeString is a string the library returned (NULL: ""), freed.
func takeString(p *C.char) string {
	if p == nil {
		return ""
	}
	defer C.lease_string_free(p)
	return C.GoString(p)
}

// Acquire acquires a grant of the queued lock lock through the session: lock is its key in the
// session's store ("jobs/7") or its URL there. It waits while others hold the lock until ctx
// is done, as Store.Acquire does: an error matching ErrTimeout when ctx's deadline passes,
// ErrCancelled when ctx is cancelled; either way the request leaves the lock's queue and the
// session. opts as for Store.Acquire (always queued: Queue changes nothing), except TTL (the
// session's applies: an error matching ErrInvalid) and Data (not kept on a shared session:
// ErrInvalid). A lock of another store, or a closed session: ErrInvalid; a lost session:
// ErrLost.
func (s *Session) Acquire(ctx context.Context, lock string, opts *Options) (*SharedGrant, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	if opts != nil && opts.TTL != 0 {
		return nil, newError(CodeInvalid, "Session.Acquire takes no TTL: the session's TTL "+
			"applies to every grant held through it (a checker judges a grant by its session's "+
			"record); open the session with the TTL wanted (SessionOptions.TTL)")
	}
	clock, err := cString(lock, "lock")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(clock))
	copts, freeOpts, err := cOptions(opts)
	defer freeOpts()
	if err != nil {
		return nil, err
	}
	byDeadline := setWait(ctx, &copts, false)
	stopCancel, err := cancelWhenDone(ctx, &copts, nil)
	if err != nil {
		return nil, err
	}
	defer stopCancel()

	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, newError(CodeInvalid, "the shared session is closed: open another "+
			"(OpenSession) to acquire more")
	}
	var ptr *C.lease_shared_grant
	var cerr *C.lease_error
	code := C.lease_session_acquire(s.ptr, clock, &copts, &ptr, &cerr)
	if err := takeError(code, cerr); err != nil {
		// A Close meanwhile ends it in liblease (the core's close ends the acquisitions
		// waiting through the session): ErrInvalid, "closed while this acquisition waited".
		return nil, waitError(ctx, err, byDeadline)
	}
	return newSharedGrant(ptr, s)
}

// AcquireOnProcessSession acquires the queued lock at url through the process's shared session
// for its store and TTL (docs/protocol.md §10, "The API": Per-process default): one session
// record and one renewal task for every grant this process holds or waits for this way on that
// store with that TTL, opened on first use at the store's root (.lease-sessions/SID), released
// and deleted by itself one TTL after nothing is attached to it, and opened afresh by the next
// acquisition. Nothing to open or close: the process's sessions are liblease's.
//
// url is the lock's URL, as Open(store).Acquire's store and name together
// ("s3://bucket/jobs/7?region=…", "file:///var/locks/jobs/7"): the same store in one process
// always reaches the same session. opts as for Store.Acquire, queued implied (Queue need not be
// set): TTL chooses the session (one per TTL; default 30 s), Data is refused (ErrInvalid: not
// kept on a shared session), Label is the request's (the session is the process's). It waits
// until ctx is done as Store.Acquire does (ErrTimeout at ctx's deadline, ErrCancelled when ctx
// is cancelled; either way the request leaves the lock's queue and the session).
//
// The grant is the type Session.Acquire returns (its Session is nil): Token URL#EPOCH@SID.N,
// fenced calls, Release, Close, LostReason.
//
//	g, err := lease.AcquireOnProcessSession(ctx, "s3://bucket/jobs/7?region=eu-west-1", nil)
//	defer g.Close() // releases it; the session goes by itself one TTL after its last grant
func AcquireOnProcessSession(ctx context.Context, url string, opts *Options) (*SharedGrant, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	// The process's client name is the first runtime's: "go".
	if _, err := theRuntime(); err != nil {
		return nil, err
	}
	curl, err := cString(url, "url")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(curl))
	copts, freeOpts, err := cOptions(opts)
	defer freeOpts()
	if err != nil {
		return nil, err
	}
	byDeadline := setWait(ctx, &copts, false)
	stopCancel, err := cancelWhenDone(ctx, &copts, nil)
	if err != nil {
		return nil, err
	}
	defer stopCancel()
	var ptr *C.lease_shared_grant
	var cerr *C.lease_error
	code := C.lease_acquire_on_process_session(curl, &copts, &ptr, &cerr)
	if err := takeError(code, cerr); err != nil {
		return nil, waitError(ctx, err, byDeadline)
	}
	return newSharedGrant(ptr, nil)
}

// newSharedGrant wraps a grant liblease returned, through session (nil: the process's).
func newSharedGrant(ptr *C.lease_shared_grant, s *Session) (*SharedGrant, error) {
	token, err := ParseToken(C.GoString(C.lease_shared_grant_token(ptr)))
	if err != nil {
		C.lease_shared_grant_free(ptr)
		return nil, err
	}
	g := &SharedGrant{
		ptr:      ptr,
		session:  s,
		token:    token,
		epoch:    uint64(C.lease_shared_grant_epoch(ptr)),
		key:      C.GoString(C.lease_shared_grant_key(ptr)),
		url:      C.GoString(C.lease_shared_grant_url(ptr)),
		id:       C.GoString(C.lease_shared_grant_id(ptr)),
		storeURL: C.GoString(C.lease_shared_grant_store_url(ptr)),
		mode:     ModeExclusive,
	}
	if C.lease_shared_grant_mode(ptr) == C.LEASE_MODE_SHARED {
		g.mode = ModeShared
	}
	// A grant never closed is released when collected (as a dropped Rust SharedGrant is).
	runtime.SetFinalizer(g, func(g *SharedGrant) { go func() { _ = g.Close() }() })
	return g, nil
}

// Close closes the session: an Acquire still waiting through it returns an error matching
// ErrInvalid, every grant still attached is released (so the next waiters are granted), then
// the session's record is released and deleted. Its grants are no longer held
// (their Close is still harmless). Closing twice is harmless.
func (s *Session) Close() error {
	// The Acquires still waiting (each holds the read lock) are ended by the close, made
	// under the read lock too; the session is freed once they have returned.
	var err error
	s.mu.RLock()
	if s.ptr != nil {
		var cerr *C.lease_error
		err = takeError(C.lease_session_close(s.ptr, &cerr), cerr)
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr != nil {
		C.lease_session_free(s.ptr)
		s.ptr = nil
	}
	runtime.SetFinalizer(s, nil)
	return err
}

// SharedGrant is a grant of a queued lock held through a Session: kept by the session's
// renewals (no heartbeat of its own). Safe for concurrent use.
type SharedGrant struct {
	mu  sync.RWMutex
	ptr *C.lease_shared_grant
	// The session lives while one of its grants does (nil: the process's session).
	session *Session
	token   Token
	epoch   uint64
	key     string
	url     string
	id      string
	// storeURL is the URL of the lock's store.
	storeURL string
	mode     Mode
	// Why it was lost, kept by Close.
	lostReason, lostKind string
}

// Epoch is the grant's fencing epoch: strictly increasing per lock.
func (g *SharedGrant) Epoch() uint64 { return g.epoch }

// Token is the grant's fencing token, as Lease.Token: its String() is URL#EPOCH@SID.N, its
// Holder the grant's entry id SID.N (two grants of one session are two holders).
func (g *SharedGrant) Token() Token { return g.token }

// Mode is what was granted: ModeExclusive or ModeShared.
func (g *SharedGrant) Mode() Mode { return g.mode }

// Key is the lock's key in the session's store.
func (g *SharedGrant) Key() string { return g.key }

// URL is the lock's URL.
func (g *SharedGrant) URL() string { return g.url }

// ID is the grant's entry id in the lock's record, SID.N.
func (g *SharedGrant) ID() string { return g.id }

// Session is the session the grant is held through; nil for a grant of the process's session
// (AcquireOnProcessSession), whose session is liblease's (its SID begins the grant's ID).
func (g *SharedGrant) Session() *Session { return g.session }

// StoreURL is the URL of the lock's store (for a file URL, the lock's directory): where its
// session's record is (.lease-sessions/SID) and where Store.FencedGet reads what the grant's
// fenced calls wrote.
func (g *SharedGrant) StoreURL() string { return g.storeURL }

// Held reports whether the grant is held: its session believed, and a read of the lock's
// record sent less than a TTL ago showed it. False once lost, released or closed.
func (g *SharedGrant) Held() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.ptr != nil && C.lease_shared_grant_held(g.ptr) != 0
}

// LostReason says why the grant was lost (its own loss, or its session's); "" while it is not.
func (g *SharedGrant) LostReason() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.ptr == nil {
		return g.lostReason
	}
	return takeString(C.lease_shared_grant_lost_reason(g.ptr))
}

// LostKind is the kind of the grant's loss, a stable name ("session_deleted", "expired",
// "removed", "lock_replaced", …); "" while it is not lost.
func (g *SharedGrant) LostKind() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.ptr == nil {
		return g.lostKind
	}
	return takeString(C.lease_shared_grant_lost_kind(g.ptr))
}

// EnsureHeld returns nil while the grant is held; otherwise an error matching ErrLost that
// says why (lost, released or closed). Call it before each step that needs the lock.
func (g *SharedGrant) EnsureHeld() error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.ptr == nil {
		return newError(CodeLost, "the grant is closed")
	}
	var cerr *C.lease_error
	return takeError(C.lease_shared_grant_ensure_held(g.ptr, &cerr), cerr)
}

// Release releases the grant alone: it is no longer held from now on, its leave grants the
// next waiter, and the session's other grants stay held. Releasing twice is harmless. It
// returns an error matching ErrLost if the grant was lost before it was released: whatever was
// done under it may have overlapped with another holder.
func (g *SharedGrant) Release() error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.ptr == nil {
		return nil
	}
	var cerr *C.lease_error
	return takeError(C.lease_shared_grant_release(g.ptr, &cerr), cerr)
}

// Close releases the grant (as Release, returning its error) and frees it. Closing twice is
// harmless.
func (g *SharedGrant) Close() error {
	err := g.Release()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ptr != nil {
		g.lostReason = takeString(C.lease_shared_grant_lost_reason(g.ptr))
		g.lostKind = takeString(C.lease_shared_grant_lost_kind(g.ptr))
		C.lease_shared_grant_free(g.ptr)
		g.ptr = nil
	}
	runtime.SetFinalizer(g, nil)
	return err
}

// Fenced operations (docs/ffi.md, "Fencing"): a grant's, under its token (URL#EPOCH@SID.N), as a
// Lease's under its own, with the same bodies (fence.go).

func (g *SharedGrant) fences() (fences, func(), error) {
	g.mu.RLock()
	if g.ptr == nil {
		g.mu.RUnlock()
		return fences{}, nil, newError(CodeInvalid, "the grant is closed")
	}
	return fences{grant: g.ptr}, g.mu.RUnlock, nil
}

func (g *SharedGrant) fencedStoreURL() string {
	if g.session != nil {
		return g.session.storeURL
	}
	return g.storeURL
}

// FencedPut writes data at key as Lease.FencedPut does, under the grant's token: the object is
// stamped with the grant's lock, epoch and holder (its ID), and once a holder of the lock with
// a higher epoch (or another holder with the same epoch) has written it, the write is refused
// with an error matching ErrFenced whose Epoch is that holder's: after the grant's session was
// cut off and another took the lock, its writes land nowhere. Exclusive grants only (a grant
// in shared mode reads with FencedRead: ErrInvalid). Returns the object's new version. Blocks.
func (g *SharedGrant) FencedPut(key string, data []byte) (string, error) {
	return fencedPut(g, key, data, nil)
}

// FencedPutIf writes data at key as FencedPut does, but only if the object is still at
// ifVersion, or still absent when ifVersion is "" (as Lease.FencedPutIf): ErrConflict when a
// writer of this epoch or a lower one changed it, ErrFenced when a holder with a higher epoch
// wrote it. Returns the object's new version. Blocks.
func (g *SharedGrant) FencedPutIf(key string, data []byte, ifVersion string) (string, error) {
	return fencedPutIf(g, key, data, ifVersion)
}

// FencedUpdate reads, modifies and writes key under the grant without losing anyone's update,
// as Lease.FencedUpdate does (f may run several times; ErrConflict is retried up to 32 times;
// ErrFenced and ErrUnavailable are returned at once). Returns the object's new version. Blocks.
func (g *SharedGrant) FencedUpdate(key string, f func(old *FencedObject) []byte) (string, error) {
	return fencedUpdate(g, key, f)
}

// FencedRead reads key and fences it with the grant's token, as Lease.FencedRead does: from
// then on no holder whose grant ended before this one began can change it. nil when there is
// no object; ErrFenced when a later conflicting grant wrote or fenced it. Blocks.
func (g *SharedGrant) FencedRead(key string) (*FencedObject, error) {
	return fencedRead(g, key)
}

// FencedDelete deletes key unless a holder with a higher epoch has written it (ErrFenced), as
// Lease.FencedDelete does; it reports whether there was an object to delete. Needs a store
// with conditional deletes (file, memory, and S3 URLs with conditional_delete=true); elsewhere
// it returns ErrStore.
func (g *SharedGrant) FencedDelete(key string) (bool, error) {
	return fencedDelete(g, key)
}

// ObjectKey is where the grant's fenced calls put key: its key in the store, from the store's
// root, read as Lease.ObjectKey reads it, from the lock's directory. Store.FencedGet reads keys
// from the store's root: pass it "/" + ObjectKey(key) to read what FencedPut wrote.
func (g *SharedGrant) ObjectKey(key string) (string, error) {
	return objectKey(g, key)
}
