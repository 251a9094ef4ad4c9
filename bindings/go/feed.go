package lease

// #include "liblease.h"
import "C"

import (
	"runtime/cgo"
	"sync"
)

// feed is a channel that a liblease callback fills from a runtime thread (HealthChanges,
// YieldRequests): a send never blocks (the oldest value goes when the reader is behind), and
// the channel is closed once, after a last value or by the lease's Close.
type feed[T any] struct {
	mu     sync.Mutex
	ch     chan T
	closed bool
	handle cgo.Handle
}

// openFeed makes a feed of `buffer` values and registers it with the lease at ptr through
// `register` (the C callback's registration); for a closed lease (nil), or a registration
// refused, its channel is closed at once.
func openFeed[T any](ptr *C.lease, buffer int, register func(*C.lease, C.uintptr_t) C.enum_lease_code) *feed[T] {
	f := &feed[T]{ch: make(chan T, buffer)}
	if ptr == nil {
		f.closed = true
		close(f.ch)
		return f
	}
	f.handle = cgo.NewHandle(f)
	if register(ptr, C.uintptr_t(f.handle)) != C.LEASE_OK {
		f.closed = true
		close(f.ch)
	}
	return f
}

// send delivers v without blocking (dropping the oldest value when the buffer is full); `last`
// closes the channel after it.
func (f *feed[T]) send(v T, last bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	for {
		select {
		case f.ch <- v:
			if last {
				f.closed = true
				close(f.ch)
			}
			return
		default:
			select {
			case <-f.ch:
			default:
			}
		}
	}
}

// end closes the channel (the lease was closed: nothing more comes).
func (f *feed[T]) end() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.ch)
	}
	f.mu.Unlock()
	if f.handle != 0 {
		f.handle.Delete()
	}
}
