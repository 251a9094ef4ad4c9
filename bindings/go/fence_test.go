package lease

// Fencing through the Go binding, mirroring the C tests fenced_write_after_break, gate and
// fencing_bad_input, on the file store and moto S3.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
)

func dataKey(what string) string {
	return fmt.Sprintf("%s-data/%s-%d", runID, what, rand.Int63())
}

// A fenced write after `lease break` and a takeover returns ErrFenced with the newer epoch; the
// newer holder's data stays.
func TestFencedWriteAfterBreak(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		leaseBin(t)
		ctx := context.Background()
		s := open(t, sc.url)
		name := uniqueName(t, "fenced")
		key := dataKey("object")
		if obj, err := s.FencedGet(key); err != nil || obj != nil {
			t.Fatalf("FencedGet of a missing key: %+v, %v", obj, err)
		}
		zombie, err := s.Acquire(ctx, name, &Options{Label: "zombie"})
		if err != nil {
			t.Fatal(err)
		}
		defer zombie.Close()
		v1, err := zombie.FencedPut(key, []byte("old holder"))
		if err != nil || v1 == "" {
			t.Fatalf("FencedPut: %q, %v", v1, err)
		}
		obj, err := s.FencedGet(key)
		if err != nil || obj == nil || string(obj.Data) != "old holder" || obj.Epoch != zombie.Epoch() ||
			obj.Version != v1 || obj.Lease != zombie.Token().Lease {
			t.Fatalf("FencedGet: %+v, %v", obj, err)
		}

		breakLease(t, leaseURL(sc.url, name))
		newer, err := s.Acquire(ctx, name, &Options{Label: "newer"})
		if err != nil {
			t.Fatal(err)
		}
		defer newer.Close()
		if newer.Epoch() <= zombie.Epoch() {
			t.Fatalf("epoch %d after %d", newer.Epoch(), zombie.Epoch())
		}
		if _, err := newer.FencedPut(key, []byte("newer holder")); err != nil {
			t.Fatal(err)
		}
		_, err = zombie.FencedPut(key, []byte("ZOMBIE"))
		e := expectErr(t, err, ErrFenced)
		if e.Epoch != newer.Epoch() {
			t.Fatalf("fenced error epoch %d, want %d", e.Epoch, newer.Epoch())
		}
		_, err = zombie.FencedDelete(key)
		expectErr(t, err, ErrFenced)
		obj, err = s.FencedGet(key)
		if err != nil || obj == nil || string(obj.Data) != "newer holder" || obj.Epoch != newer.Epoch() {
			t.Fatalf("after the zombie's write: %+v, %v", obj, err)
		}
		expectErr(t, zombie.Release(), ErrLost)

		// The holder deletes its own object; again finds nothing.
		if ok, err := newer.FencedDelete(key); err != nil || !ok {
			t.Fatalf("FencedDelete: %v, %v", ok, err)
		}
		if ok, err := newer.FencedDelete(key); err != nil || ok {
			t.Fatalf("second FencedDelete: %v, %v", ok, err)
		}
		if _, err := newer.FencedPut(key, nil); err != nil { // empty is fine
			t.Fatal(err)
		}
		if obj, err := s.FencedGet(key); err != nil || obj == nil || len(obj.Data) != 0 {
			t.Fatalf("empty object: %+v, %v", obj, err)
		}
		_, err = newer.FencedPut(name, []byte("x")) // the lease record is not a data object
		expectErr(t, err, ErrInvalid)
	})
}

// Gates admit by the highest epoch per resource; a store-backed gate is shared.
func TestGate(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		ctx := context.Background()
		s := open(t, sc.url)
		name := uniqueName(t, "gated")
		prefix := dataKey("gate")
		mem, err := NewFencingGate()
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.FencingGate(prefix)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.FencingGate(prefix)
		if err != nil {
			t.Fatal(err)
		}
		first, err := s.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		old := first.Token().String()
		for _, g := range []*FencingGate{mem, mem, a} { // the same epoch twice is fine
			if err := g.Admit("orders/42", old); err != nil {
				t.Fatal(err)
			}
		}
		_ = first.Close()
		second, err := s.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		newer := second.Token().String()
		if err := mem.Admit("orders/42", newer); err != nil {
			t.Fatal(err)
		}
		if err := b.Admit("orders/42", newer); err != nil {
			t.Fatal(err)
		}
		e := expectErr(t, mem.Admit("orders/42", old), ErrFenced)
		if e.Epoch != second.Epoch() {
			t.Fatalf("epoch %d, want %d", e.Epoch, second.Epoch())
		}
		if err := mem.Admit("orders/43", old); err != nil { // independent resources
			t.Fatal(err)
		}
		// Gate a never saw the newer token itself: the store object tells it.
		expectErr(t, a.Admit("orders/42", old), ErrFenced)
		for _, bad := range []string{"not a token", "x#-1", "\xff#1", "x\x00#1"} {
			expectErr(t, mem.Admit("orders/42", bad), ErrInvalid)
		}
	})
}

func TestToken(t *testing.T) {
	tok, err := ParseToken("s3://b/locks/a#b#7")
	if err != nil || tok.Lease != "s3://b/locks/a#b" || tok.Epoch != 7 {
		t.Fatalf("%+v, %v", tok, err)
	}
	if tok.String() != "s3://b/locks/a#b#7" {
		t.Fatal(tok.String())
	}
	for _, bad := range []string{"", "x", "x#", "#3", "x#-1", "x#1e3", "x#99999999999999999999999", "a\x00#1"} {
		if _, err := ParseToken(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseToken(%q): %v", bad, err)
		}
	}
	s := open(t, "file://"+t.TempDir())
	l, err := s.Acquire(context.Background(), uniqueName(t, "token"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tok = l.Token()
	if tok.Epoch != l.Epoch() || !strings.HasPrefix(tok.Lease, "file://") {
		t.Fatalf("token %+v", tok)
	}
	if back, err := ParseToken(tok.String()); err != nil || back != tok {
		t.Fatalf("%+v, %v", back, err)
	}
}

func TestFencingBadInput(t *testing.T) {
	s := open(t, "file://"+t.TempDir())
	l, err := s.Acquire(context.Background(), uniqueName(t, "fenced-bad"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", "\xff", "a//b", "../x", "k\x00"} {
		if _, err := l.FencedPut(key, []byte("x")); !errors.Is(err, ErrInvalid) {
			t.Errorf("FencedPut(%q): %v", key, err)
		}
		if _, err := l.FencedDelete(key); !errors.Is(err, ErrInvalid) {
			t.Errorf("FencedDelete(%q): %v", key, err)
		}
		if _, err := s.FencedGet(key); !errors.Is(err, ErrInvalid) {
			t.Errorf("FencedGet(%q): %v", key, err)
		}
	}
	if _, err := s.FencingGate("a//b"); !errors.Is(err, ErrInvalid) {
		t.Errorf("FencingGate: %v", err)
	}
	_ = l.Close()
	if _, err := l.FencedPut(dataKey("closed"), []byte("x")); !errors.Is(err, ErrInvalid) {
		t.Errorf("FencedPut on a closed lease: %v", err)
	}
}

// A custom S3 endpoint is trusted with If-Match on DeleteObject only when the URL says
// conditional_delete=true (MinIO ignores it): without it a fenced delete is refused with
// ErrStore and deletes nothing (docs/stores.md).
func TestFencedDeleteNeedsConditionalDeletes(t *testing.T) {
	base := os.Getenv("LEASE_TEST_S3_MOTO")
	if base == "" {
		missing(t, "LEASE_TEST_S3_MOTO")
	}
	plain := strings.Replace(base, "&conditional_delete=true", "", 1)
	if plain == base {
		t.Fatalf("%s does not say conditional_delete=true", base)
	}
	s := open(t, plain)
	l, err := s.Acquire(context.Background(), uniqueName(t, "plain-delete"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := dataKey("plain-delete")
	if _, err := l.FencedPut(key, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err = l.FencedDelete(key)
	e := expectErr(t, err, ErrStore)
	if !strings.Contains(e.Message, "no conditional delete") {
		t.Fatalf("message %q", e.Message)
	}
	if obj, err := s.FencedGet(key); err != nil || obj == nil {
		t.Fatalf("the object is gone: %+v, %v", obj, err)
	}
}
