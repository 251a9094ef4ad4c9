package lease

// #include <stdlib.h>
// #include "liblease.h"
// enum lease_code lease_go_on_yield(const struct lease *l, uintptr_t handle);
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// YieldRequested is what a holder of a queued lock is told when asked to step aside
// (docs/protocol.md §10, "Yield on request"): who asks, the waiter's id to hand over to ("" when
// none was named) and why. It is not a loss: the lease stays held until released.
type YieldRequested struct {
	By     string
	To     string
	Reason string
}

// yieldBuffer is how many requests YieldRequests keeps for a reader that is behind; the oldest
// go first (a holder is told each request once).
const yieldBuffer = 16

//export goLeaseYield
func goLeaseYield(handle C.uintptr_t, by, to, reason *C.char) {
	// On a liblease runtime thread: never block.
	y := YieldRequested{By: C.GoString(by)}
	if to != nil {
		y.To = C.GoString(to)
	}
	if reason != nil {
		y.Reason = C.GoString(reason)
	}
	cgo.Handle(handle).Value().(*feed[YieldRequested]).send(y, false)
}

// YieldRequests returns a channel that receives each yield request that names this lease's
// grant (Store.AskYield, `lease yield`), once, as the holder learns it: at its next renewal, or
// at once through a wake hint. A request is not a loss: Lost() stays open and the lease stays
// held until released. The channel is closed when the lease is closed. Every call returns the
// same channel.
func (l *Lease) YieldRequests() <-chan YieldRequested {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.yields != nil {
		return l.yields.ch
	}
	l.yields = openFeed[YieldRequested](l.ptr, yieldBuffer, func(p *C.lease, h C.uintptr_t) C.enum_lease_code {
		return C.lease_go_on_yield(p, h)
	})
	return l.yields.ch
}

// YieldAsk is what Store.AskYield asks; every field may be empty.
type YieldAsk struct {
	// To is the waiting participant's id (or an unambiguous prefix of it) to hand over to: the
	// holders in its way are asked. Empty: every holder is asked.
	To string
	// Reason says why (at most 256 bytes).
	Reason string
	// By says who asks (1 to 128 bytes; empty: user@host of this process).
	By string
}

// AskYield asks the holders of the queued lock name to step aside (docs/protocol.md §10,
// "Yield on request"). Each holder asked learns it once (Lease.YieldRequests) and keeps the lease
// until it releases. It returns how many grants the request now names: 0 when nobody holds
// anything in To's way. An error matching ErrInvalid for a plain lease (not a queued lock), an
// unknown or ambiguous To, or a By or Reason out of bounds.
func (s *Store) AskYield(name string, ask YieldAsk) (int, error) {
	cname, err := cString(name, "name")
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cname))
	var cstrs [3]*C.char
	for i, v := range []struct{ text, what string }{{ask.To, "To"}, {ask.Reason, "Reason"}, {ask.By, "By"}} {
		if v.text == "" {
			continue
		}
		if cstrs[i], err = cString(v.text, v.what); err != nil {
			return 0, err
		}
		defer C.free(unsafe.Pointer(cstrs[i]))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return 0, newError(CodeInvalid, "the store is closed")
	}
	var asked C.size_t
	var cerr *C.lease_error
	if err := takeError(C.lease_ask_yield(s.ptr, cname, cstrs[0], cstrs[1], cstrs[2], &asked, &cerr), cerr); err != nil {
		return 0, err
	}
	return int(asked), nil
}
