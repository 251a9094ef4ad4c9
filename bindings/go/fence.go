package lease

// #include <stdlib.h>
// #include "liblease.h"
import "C"

import (
	"errors"
	"math/rand"
	"runtime"
	"time"
	"unsafe"
)

// Fencing the store enforces: see docs/ffi.md, "Fencing", and docs/protocol.md. A Lease and a
// SharedGrant (session.go) have the same fenced calls, with one body each (fencedPut, …).

// Token is a fencing token: a lease (URL), an epoch and the holder it was handed to, written
// LEASE_URL#EPOCH@HOLDER. The holder id tells two holders apart should they ever share an
// epoch, so that fenced writes and gates never admit both. A queued lock's shared or scoped
// grant adds ";shared", ";path=PATH" or ";range=START..END": what a token fences depends on
// them (docs/protocol.md §7).
type Token struct {
	Lease string
	Epoch uint64
	// Holder is the holder id; "" for a token that names none (LEASE_URL#EPOCH, built by hand).
	Holder string
	// Shared is true for a shared grant's token (a reader's, or a permit's).
	Shared bool
	// Scope is the path the grant holds; "" for the whole lock or a byte range.
	Scope string
	// Range is the bytes [Start, End) the grant holds; the zero ByteRange for none.
	Range ByteRange
}

// String is the token as resources receive it: LEASE_URL#EPOCH@HOLDER, or LEASE_URL#EPOCH
// when it names no holder, then ";shared", ";path=PATH" (escaped) or ";range=START..END" when
// the grant is shared or scoped.
func (t Token) String() string {
	s := t.Lease + "#" + uitoa(t.Epoch)
	if t.Holder != "" {
		s += "@" + t.Holder
	}
	if t.Shared {
		s += ";shared"
	}
	switch {
	case t.Scope != "":
		s += ";path=" + escapePath(t.Scope)
	case t.Range != (ByteRange{}):
		s += ";range=" + uitoa(t.Range.Start) + ".." + uitoa(t.Range.End)
	}
	return s
}

// escapePath escapes a path for a token as the core does: every byte but A-Z a-z 0-9 / . _ ~ -
// as %XX.
func escapePath(p string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '/' || c == '.' || c == '_' || c == '~' || c == '-' {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

func uitoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// ParseToken parses LEASE_URL#EPOCH@HOLDER (Lease.Token().String(), or $LEASE_TOKEN of
// `lease run`) or LEASE_URL#EPOCH (then Holder is ""), with ";shared", ";path=PATH" or
// ";range=START..END" after it for a queued lock's shared or scoped grant. It returns an error
// matching ErrInvalid if s is not a token.
func ParseToken(s string) (Token, error) {
	cs, err := cString(s, "token")
	if err != nil {
		return Token{}, err
	}
	defer C.free(unsafe.Pointer(cs))
	var curl, cholder *C.char
	var epoch C.uint64_t
	var cerr *C.lease_error
	if err := takeError(C.lease_token_parse_holder(cs, &curl, &epoch, &cholder, &cerr), cerr); err != nil {
		return Token{}, err
	}
	t := Token{Lease: C.GoString(curl), Epoch: uint64(epoch)}
	C.lease_string_free(curl)
	if cholder != nil {
		t.Holder = C.GoString(cholder)
		C.lease_string_free(cholder)
	}
	var mode C.enum_lease_mode
	var cscope *C.char
	var start, end C.uint64_t
	if err := takeError(C.lease_token_parse_grant(cs, &mode, &cscope, &start, &end, &cerr), cerr); err != nil {
		return Token{}, err
	}
	t.Shared = mode == C.LEASE_MODE_SHARED
	if cscope != nil {
		t.Scope = C.GoString(cscope)
		C.lease_string_free(cscope)
	}
	t.Range = ByteRange{uint64(start), uint64(end)}
	return t, nil
}

// Token is this lease's fencing token (its URL, epoch and holder id), to hand to resources that
// check it.
func (l *Lease) Token() Token {
	return l.token
}

// FencedPut writes data at key (an object in the lease's store, not the lease record) unless a
// holder of this lease with a higher epoch (or another holder with the same epoch) has written
// it: then an error matching ErrFenced whose Epoch is that holder's. Once a writer with epoch E
// has written an object, no writer with a lower epoch can change it. Returns the object's new
// version (its ETag; "" when the write landed but a newer write replaced it before the call
// learned its version). Blocks.
//
// Not a read-modify-write: FencedGet then FencedPut loses the update of a writer of the same
// or a lower epoch that wrote in between. Use FencedPutIf or FencedUpdate for that. A write that
// landed is never reported as ErrFenced; when its outcome cannot be told the error matches
// ErrUnavailable.
func (l *Lease) FencedPut(key string, data []byte) (string, error) {
	return fencedPut(l, key, data, nil)
}

// FencedPutIf writes data at key as FencedPut does, but only if the object is still at
// ifVersion (a FencedObject's Version, or what an earlier fenced put returned), or still absent
// when ifVersion is "". If it changed since, nothing is written and the error matches
// ErrConflict when a writer of this epoch or a lower one changed it (read again, decide again),
// or ErrFenced when a holder with a higher epoch wrote it (stop: a newer holder exists).
// Returns the object's new version. Blocks.
func (l *Lease) FencedPutIf(key string, data []byte, ifVersion string) (string, error) {
	return fencedPutIf(l, key, data, ifVersion)
}

// fencedHolder is what a fenced call runs under: a *Lease or a *SharedGrant. Each fenced
// operation has one body taking it (fencedPut, fencedRead, …); only the C function differs,
// chosen by fences.
type fencedHolder interface {
	// fences read-locks the holder and returns its C handle and the unlock, or an error
	// matching ErrInvalid when it is closed.
	fences() (fences, func(), error)
	// fencedStoreURL is the URL of the store its fenced calls write in (FencedUpdate reads
	// there).
	fencedStoreURL() string
}

// fences is the C handle of a fenced call: a lease's or a shared grant's (one of the two set).
type fences struct {
	lease *C.lease
	grant *C.lease_shared_grant
}

func (l *Lease) fences() (fences, func(), error) {
	l.mu.RLock()
	if l.ptr == nil {
		l.mu.RUnlock()
		return fences{}, nil, newError(CodeInvalid, "the lease is closed")
	}
	return fences{lease: l.ptr}, l.mu.RUnlock, nil
}

func (l *Lease) fencedStoreURL() string { return l.storeURL }

// put is lease_fenced_put (ifVersion nil) or lease_fenced_put_if, or the shared grant's.
func (f fences) put(key *C.char, p *C.uint8_t, n C.size_t, ifVersion *C.char, cver **C.char, cerr **C.lease_error) C.enum_lease_code {
	switch {
	case f.lease != nil && ifVersion == nil:
		return C.lease_fenced_put(f.lease, key, p, n, cver, cerr)
	case f.lease != nil:
		return C.lease_fenced_put_if(f.lease, key, p, n, ifVersion, cver, cerr)
	case ifVersion == nil:
		return C.lease_shared_grant_fenced_put(f.grant, key, p, n, cver, cerr)
	default:
		return C.lease_shared_grant_fenced_put_if(f.grant, key, p, n, ifVersion, cver, cerr)
	}
}

// objectKey is lease_object_key or lease_shared_grant_object_key.
func (f fences) objectKey(key *C.char, out **C.char, cerr **C.lease_error) C.enum_lease_code {
	if f.lease != nil {
		return C.lease_object_key(f.lease, key, out, cerr)
	}
	return C.lease_shared_grant_object_key(f.grant, key, out, cerr)
}

// delete is lease_fenced_delete or lease_shared_grant_fenced_delete.
func (f fences) delete(key *C.char, deleted *C.int, cerr **C.lease_error) C.enum_lease_code {
	if f.lease != nil {
		return C.lease_fenced_delete(f.lease, key, deleted, cerr)
	}
	return C.lease_shared_grant_fenced_delete(f.grant, key, deleted, cerr)
}

// read is lease_fenced_read or lease_shared_grant_fenced_read.
func (f fences) read(key *C.char, obj **C.lease_object, cerr **C.lease_error) C.enum_lease_code {
	if f.lease != nil {
		return C.lease_fenced_read(f.lease, key, obj, cerr)
	}
	return C.lease_shared_grant_fenced_read(f.grant, key, obj, cerr)
}

// fencedPutIf is the body of Lease.FencedPutIf and SharedGrant.FencedPutIf.
func fencedPutIf(h fencedHolder, key string, data []byte, ifVersion string) (string, error) {
	cver, err := cString(ifVersion, "ifVersion")
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(cver))
	return fencedPut(h, key, data, cver)
}

// fencedPut is the body of FencedPut (ifVersion nil) and FencedPutIf, of a Lease and of a
// SharedGrant.
func fencedPut(h fencedHolder, key string, data []byte, ifVersion *C.char) (string, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(ckey))
	var p *C.uint8_t
	if len(data) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&data[0]))
	}
	f, unlock, err := h.fences()
	if err != nil {
		return "", err
	}
	defer unlock()
	var cver *C.char
	var cerr *C.lease_error
	code := f.put(ckey, p, C.size_t(len(data)), ifVersion, &cver, &cerr)
	runtime.KeepAlive(data)
	if err := takeError(code, cerr); err != nil {
		return "", err
	}
	v := C.GoString(cver)
	C.lease_string_free(cver)
	return v, nil
}

// How FencedUpdate retries a conflict: at most this many attempts, pausing between them for a
// random time up to a bound that doubles from the first to the last (so contenders spread out).
const (
	updateAttempts   = 32
	updateFirstPause = 10 * time.Millisecond
	updateMaxPause   = time.Second
)

// ObjectKey is where the fenced calls of this lease put key: its key in the store, from the
// store's root. A key is read like a relative path from the lease's own directory, on every
// store: "x" and "./x" beside the lease, "jobs/x" below it, "../x" one level up (never above
// the store's root: ErrInvalid), "/x" from the store's root. Store.FencedGet, which has no
// lease, reads keys from the store's root: pass it "/" + ObjectKey(key) to read what FencedPut
// wrote.
func (l *Lease) ObjectKey(key string) (string, error) {
	return objectKey(l, key)
}

// objectKey is the body of Lease.ObjectKey and SharedGrant.ObjectKey.
func objectKey(h fencedHolder, key string) (string, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(ckey))
	f, unlock, err := h.fences()
	if err != nil {
		return "", err
	}
	defer unlock()
	var out *C.char
	var cerr *C.lease_error
	if err := takeError(f.objectKey(ckey, &out, &cerr), cerr); err != nil {
		return "", err
	}
	placed := C.GoString(out)
	C.lease_string_free(out)
	return placed, nil
}

// FencedUpdate reads, modifies and writes key without losing anyone's update: it reads the
// object (FencedGet; old is nil when there is none), calls f with it, and writes what f returns
// with FencedPutIf conditioned on the version read. When another writer got there first
// (ErrConflict) it pauses briefly, reads again and calls f again, up to 32 times (then the
// last ErrConflict is returned). f may thus run several times; only its last result is written,
// at most once. Any other error is returned at once: ErrFenced (a newer holder exists), or
// ErrUnavailable, which after a write was sent can mean its outcome is unknown (it may have
// landed, and been replaced since): FencedUpdate never retries that, so an update is never
// applied twice; read the object to find out. Returns the object's new version. Blocks.
func (l *Lease) FencedUpdate(key string, f func(old *FencedObject) []byte) (string, error) {
	return fencedUpdate(l, key, f)
}

// fencedUpdate is the body of Lease.FencedUpdate and SharedGrant.FencedUpdate.
func fencedUpdate(h fencedHolder, key string, f func(old *FencedObject) []byte) (string, error) {
	// Reads go through a store handle of our own: the lease outlives the *Store it came from,
	// and handles of one URL share one client, so this costs no connection.
	s, err := Open(h.fencedStoreURL())
	if err != nil {
		return "", err
	}
	defer s.Close()
	// The store reads from its root; the holder's writes place key beside the lock.
	placed, err := objectKey(h, key)
	if err != nil {
		return "", err
	}
	bound := updateFirstPause
	for attempt := 1; ; attempt++ {
		old, err := s.FencedGet("/" + placed)
		if err != nil {
			return "", err
		}
		version := ""
		if old != nil {
			version = old.Version
		}
		v, err := fencedPutIf(h, key, f(old), version)
		if err == nil || !errors.Is(err, ErrConflict) || attempt == updateAttempts {
			return v, err
		}
		time.Sleep(bound/2 + time.Duration(rand.Int63n(int64(bound/2)+1)))
		bound = min(bound*2, updateMaxPause)
	}
}

// FencedDelete deletes key unless a holder with a higher epoch has written it (ErrFenced). It
// reports whether there was an object to delete. Needs a store with conditional deletes (file,
// memory, and S3 URLs with conditional_delete=true); elsewhere it returns ErrStore.
func (l *Lease) FencedDelete(key string) (bool, error) {
	return fencedDelete(l, key)
}

// fencedDelete is the body of Lease.FencedDelete and SharedGrant.FencedDelete.
func fencedDelete(h fencedHolder, key string) (bool, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return false, err
	}
	defer C.free(unsafe.Pointer(ckey))
	f, unlock, err := h.fences()
	if err != nil {
		return false, err
	}
	defer unlock()
	var deleted C.int
	var cerr *C.lease_error
	if err := takeError(f.delete(ckey, &deleted, &cerr), cerr); err != nil {
		return false, err
	}
	return deleted != 0, nil
}

// FencedObject is an object read with the stamp of the fenced write that wrote it.
type FencedObject struct {
	Data []byte
	// Epoch of the writer; 0 if no fenced write wrote it.
	Epoch uint64
	// Lease (URL) the writer held; "" if no fenced write wrote it.
	Lease string
	// Holder is the writer's holder id (its Token's Holder); "" if no fenced write wrote it.
	Holder string
	// Version is the object's version (its ETag): pass it to FencedPutIf to write only if the
	// object has not changed since this read.
	Version string
}

// FencedGet reads the object at key, from the store's root ("x", "./x" and "/x" are the same
// object; for what a lease's FencedPut(key) wrote, read "/" + lease.ObjectKey(key)); nil (and
// no error) if there is none.
func (s *Store) FencedGet(key string) (*FencedObject, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(ckey))
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, newError(CodeInvalid, "the store is closed")
	}
	var obj *C.lease_object
	var cerr *C.lease_error
	if err := takeError(C.lease_fenced_get(s.ptr, ckey, &obj, &cerr), cerr); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, nil
	}
	return objectOf(obj), nil
}

// objectOf copies a lease_object (or NULL) into Go and frees it.
func objectOf(obj *C.lease_object) *FencedObject {
	if obj == nil {
		return nil
	}
	defer C.lease_object_free(obj)
	var n C.size_t
	data := C.lease_object_data(obj, &n)
	o := &FencedObject{
		Data:    C.GoBytes(unsafe.Pointer(data), C.int(n)),
		Epoch:   uint64(C.lease_object_epoch(obj)),
		Version: C.GoString(C.lease_object_version(obj)),
	}
	if l := C.lease_object_lease(obj); l != nil {
		o.Lease = C.GoString(l)
	}
	if h := C.lease_object_holder(obj); h != nil {
		o.Holder = C.GoString(h)
	}
	return o
}

// FencedRead reads key (placed as FencedPut places it) and fences it with this lease's token:
// from then on no holder whose grant ended before this one began can change it, so a reader (a
// shared grant) sees its data stay while it holds, whatever a stale writer does. The first read
// of an object under a grant writes it back unchanged with this token in its metadata (1 GET +
// 1 PUT); reading it again costs 1 GET. Where nothing is, it leaves an empty marker that fenced
// reads see as absent (nil). An error matching ErrFenced means a later conflicting grant wrote
// or fenced it (this grant has ended). Blocks.
func (l *Lease) FencedRead(key string) (*FencedObject, error) {
	return fencedRead(l, key)
}

// fencedRead is the body of Lease.FencedRead and SharedGrant.FencedRead.
func fencedRead(h fencedHolder, key string) (*FencedObject, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(ckey))
	f, unlock, err := h.fences()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var obj *C.lease_object
	var cerr *C.lease_error
	if err := takeError(f.read(ckey, &obj, &cerr), cerr); err != nil {
		return nil, err
	}
	return objectOf(obj), nil
}

// FencingGate admits or rejects fencing tokens by the highest epoch seen per resource, for
// resources outside the store (a database row, an HTTP API). Safe for concurrent use.
type FencingGate struct {
	ptr *C.lease_gate
}

// NewFencingGate is a gate kept in memory: it protects one process.
func NewFencingGate() (*FencingGate, error) {
	rt, err := theRuntime()
	if err != nil {
		return nil, err
	}
	var g *C.lease_gate
	var cerr *C.lease_error
	if err := takeError(C.lease_gate_new(rt, &g, &cerr), cerr); err != nil {
		return nil, err
	}
	return newGate(g), nil
}

// FencingGate is a gate kept in this store, one small object per resource under prefix, so
// every process that opens the same store and prefix shares it.
func (s *Store) FencingGate(prefix string) (*FencingGate, error) {
	cprefix, err := cString(prefix, "prefix")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cprefix))
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, newError(CodeInvalid, "the store is closed")
	}
	var g *C.lease_gate
	var cerr *C.lease_error
	if err := takeError(C.lease_gate_open(s.ptr, cprefix, &g, &cerr), cerr); err != nil {
		return nil, err
	}
	return newGate(g), nil
}

func newGate(g *C.lease_gate) *FencingGate {
	gate := &FencingGate{ptr: g}
	runtime.SetFinalizer(gate, func(g *FencingGate) { C.lease_gate_free(g.ptr) })
	return gate
}

// Admit admits token (a Token's String: LEASE_URL#EPOCH@HOLDER, or LEASE_URL#EPOCH) for
// resource if its epoch is above the highest admitted so far for that resource, or equal to it
// and of the same holder; otherwise it returns an error matching ErrFenced (Epoch: the highest
// seen). Two holders are never both admitted with one epoch, and a token of another lease than
// the resource's is refused too; a malformed token gives ErrInvalid.
func (g *FencingGate) Admit(resource, token string) error {
	cres, err := cString(resource, "resource")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cres))
	ctok, err := cString(token, "token")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(ctok))
	var cerr *C.lease_error
	err = takeError(C.lease_gate_admit(g.ptr, cres, ctok, &cerr), cerr)
	runtime.KeepAlive(g)
	return err
}
