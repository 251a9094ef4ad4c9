package lease

// #include <stdlib.h>
// #include "liblease.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Fencing the store enforces: see docs/ffi.md, "Fencing", and docs/protocol.md.

// Token is a fencing token: a lease (URL) and an epoch, written LEASE_URL#EPOCH.
type Token struct {
	Lease string
	Epoch uint64
}

// String is the token as resources receive it: LEASE_URL#EPOCH.
func (t Token) String() string {
	return t.Lease + "#" + uitoa(t.Epoch)
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

// ParseToken parses LEASE_URL#EPOCH (Lease.Token, or $LEASE_TOKEN of `lease run`). It returns
// an error matching ErrInvalid if s is not a token.
func ParseToken(s string) (Token, error) {
	cs, err := cString(s, "token")
	if err != nil {
		return Token{}, err
	}
	defer C.free(unsafe.Pointer(cs))
	var curl *C.char
	var epoch C.uint64_t
	var cerr *C.lease_error
	if err := takeError(C.lease_token_parse(cs, &curl, &epoch, &cerr), cerr); err != nil {
		return Token{}, err
	}
	t := Token{Lease: C.GoString(curl), Epoch: uint64(epoch)}
	C.lease_string_free(curl)
	return t, nil
}

// Token is this lease's fencing token (its URL and epoch), to hand to resources that check it.
func (l *Lease) Token() Token {
	return l.token
}

// FencedPut writes data at key (an object in the lease's store, not the lease record) unless a
// holder of this lease with a higher epoch has written it: then an error matching ErrFenced
// whose Epoch is that holder's. Once a writer with epoch E has written an object, no writer with
// a lower epoch can change it. Returns the object's new version (its ETag). Blocks.
func (l *Lease) FencedPut(key string, data []byte) (string, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(ckey))
	var p *C.uint8_t
	if len(data) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&data[0]))
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return "", newError(CodeInvalid, "the lease is closed")
	}
	var cver *C.char
	var cerr *C.lease_error
	code := C.lease_fenced_put(l.ptr, ckey, p, C.size_t(len(data)), &cver, &cerr)
	runtime.KeepAlive(data)
	if err := takeError(code, cerr); err != nil {
		return "", err
	}
	v := C.GoString(cver)
	C.lease_string_free(cver)
	return v, nil
}

// FencedDelete deletes key unless a holder with a higher epoch has written it (ErrFenced). It
// reports whether there was an object to delete. Needs a store with conditional deletes (file,
// memory, and S3 URLs with conditional_delete=true); elsewhere it returns ErrStore.
func (l *Lease) FencedDelete(key string) (bool, error) {
	ckey, err := cString(key, "key")
	if err != nil {
		return false, err
	}
	defer C.free(unsafe.Pointer(ckey))
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ptr == nil {
		return false, newError(CodeInvalid, "the lease is closed")
	}
	var deleted C.int
	var cerr *C.lease_error
	if err := takeError(C.lease_fenced_delete(l.ptr, ckey, &deleted, &cerr), cerr); err != nil {
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
	Lease   string
	Version string
}

// FencedGet reads the object at key; nil (and no error) if there is none.
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
	return o, nil
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

// Admit admits token (LEASE_URL#EPOCH, or a Token's String) for resource if its epoch is at
// least the highest admitted so far for that resource; otherwise it returns an error matching
// ErrFenced (Epoch: the highest seen). A token of another lease than the resource's is refused
// too; a malformed token gives ErrInvalid.
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
