//go:build lease_static

package lease

// Linked against liblease.a (liblease-static.pc, written by ffi/install.sh): the binary does
// not need liblease.so at run time.

// #cgo pkg-config: liblease-static
import "C"
