//go:build !lease_static

package lease

// Linked against the shared liblease found by pkg-config (liblease.pc, written by
// ffi/install.sh; it carries an rpath, so the program finds liblease.so at run time).
// Build with -tags lease_static for a self-contained binary.

// #cgo pkg-config: liblease
import "C"
