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
	"sync"
	"testing"
	"time"
)

// dataKey is a key from the store's root (a leading '/'): a lease's fenced calls read a key
// from the lease's directory, Store.FencedGet from the store's root, and this names one object
// for both.
func dataKey(what string) string {
	return fmt.Sprintf("/%s-data/%s-%d", runID, what, rand.Int63())
}

// `lease break` waits out the broken holder (TryAcquire finds the lease held until ttl + grace
// after the break); a fenced write after the takeover returns ErrFenced with the newer epoch;
// the newer holder's data stays.
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
		// The break waits it out: ttl + grace (1 s) (+ 1 s on S3).
		zombie, err := s.Acquire(ctx, name, &Options{Label: "zombie", TTL: 2 * time.Second})
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
			obj.Version != v1 || obj.Lease != zombie.Token().Lease || obj.Holder == "" ||
			obj.Holder != zombie.Token().Holder {
			t.Fatalf("FencedGet: %+v, %v (token %+v)", obj, err, zombie.Token())
		}

		breakLease(t, leaseURL(sc.url, name))
		// The zombie has not acknowledged the break (it is not released): it is waited out.
		_, err = s.TryAcquire(ctx, name, nil)
		expectErr(t, err, ErrHeld)
		wait, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		newer, err := s.Acquire(wait, name, &Options{Label: "newer"})
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
		if sc.conditionalDeletes() {
			_, err = zombie.FencedDelete(key)
			expectErr(t, err, ErrFenced)
		}
		obj, err = s.FencedGet(key)
		if err != nil || obj == nil || string(obj.Data) != "newer holder" || obj.Epoch != newer.Epoch() {
			t.Fatalf("after the zombie's write: %+v, %v", obj, err)
		}
		expectErr(t, zombie.Release(), ErrLost)

		// The holder deletes its own object; again finds nothing. Where deletes are not
		// conditional, fenced deletes are refused rather than done unfenced.
		if !sc.conditionalDeletes() {
			_, err := newer.FencedDelete(key)
			expectErr(t, err, ErrStore)
		} else if ok, err := newer.FencedDelete(key); err != nil || !ok {
			t.Fatalf("FencedDelete: %v, %v", ok, err)
		} else if ok, err := newer.FencedDelete(key); err != nil || ok {
			t.Fatalf("second FencedDelete: %v, %v", ok, err)
		}
		if _, err := newer.FencedPut(key, nil); err != nil { // empty is fine
			t.Fatal(err)
		}
		if obj, err := s.FencedGet(key); err != nil || obj == nil || len(obj.Data) != 0 {
			t.Fatalf("empty object: %+v, %v", obj, err)
		}
		_, err = newer.FencedPut("/"+name, []byte("x")) // the lease record is not a data object
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
		for _, bad := range []string{"not a token", "x#-1", "\xff#1", "x\x00#1", "x#3@"} {
			expectErr(t, mem.Admit("orders/42", bad), ErrInvalid)
		}
		// Two holders with one epoch are never both admitted.
		twin := Token{Lease: "memory://t/k", Epoch: 9, Holder: "aaaa"}
		for _, g := range []*FencingGate{mem, mem, a} {
			if err := g.Admit("twins", twin.String()); err != nil {
				t.Fatal(err)
			}
		}
		other := twin
		other.Holder = "bbbb"
		expectErr(t, mem.Admit("twins", other.String()), ErrFenced)
		expectErr(t, b.Admit("twins", other.String()), ErrFenced)
	})
}

// Tokens: URL#EPOCH@HOLDER (what a lease hands out) and URL#EPOCH (built by hand) both parse
// and print back as they were; a lease's token names its holder and round-trips.
func TestToken(t *testing.T) {
	tok, err := ParseToken("s3://b/locks/a#b#7")
	if err != nil || tok.Lease != "s3://b/locks/a#b" || tok.Epoch != 7 || tok.Holder != "" {
		t.Fatalf("%+v, %v", tok, err)
	}
	if tok.String() != "s3://b/locks/a#b#7" {
		t.Fatal(tok.String())
	}
	const full = "s3://b/locks/a#b#1767225600000@3f2a9c"
	tok, err = ParseToken(full)
	if err != nil || tok != (Token{Lease: "s3://b/locks/a#b", Epoch: 1767225600000, Holder: "3f2a9c"}) {
		t.Fatalf("%+v, %v", tok, err)
	}
	if tok.String() != full {
		t.Fatal(tok.String())
	}
	for _, bad := range []string{"", "x", "x#", "#3", "x#-1", "x#1e3", "x#99999999999999999999999", "a\x00#1",
		"x#3@", "x#3@a b", "x#@ab", "x#3@a@b", "x#3@é"} {
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
	if tok.Epoch != l.Epoch() || !strings.HasPrefix(tok.Lease, "file://") || tok.Holder == "" ||
		!strings.HasSuffix(tok.String(), "@"+tok.Holder) {
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
	for _, key := range []string{"", "\xff", "a//b", "../../x", "k\x00"} {
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

// Version-conditional fenced writes: a write conditioned on a version that another writer of
// the same epoch replaced is ErrConflict and writes nothing; "must be absent" on an existing
// object is ErrConflict; once a newer holder has written, it is ErrFenced (with the newer
// epoch), even with the current version.
func TestFencedPutIf(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		ctx := context.Background()
		s := open(t, sc.url)
		name := uniqueName(t, "put-if")
		key := dataKey("counter")
		a, err := s.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		read := func() *FencedObject {
			t.Helper()
			obj, err := s.FencedGet(key)
			if err != nil || obj == nil {
				t.Fatalf("FencedGet: %+v, %v", obj, err)
			}
			return obj
		}

		// Create only if absent, once.
		v1, err := a.FencedPutIf(key, []byte("1"), "")
		if err != nil || v1 == "" {
			t.Fatalf("create: %q, %v", v1, err)
		}
		_, err = a.FencedPutIf(key, []byte("9"), "")
		expectErr(t, err, ErrConflict)

		// A reads the counter; B (another goroutine of the same holder) reads it too and
		// writes 2 first. A's write of its own 2, conditioned on what it read, is refused.
		seenA, seenB := read(), read()
		if string(seenA.Data) != "1" || seenA.Version != v1 || seenB.Version != v1 {
			t.Fatalf("read %+v, %+v; v1 %q", seenA, seenB, v1)
		}
		v2, err := a.FencedPutIf(key, []byte("2"), seenB.Version)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.FencedPutIf(key, []byte("2"), seenA.Version)
		e := expectErr(t, err, ErrConflict)
		if errors.Is(err, ErrFenced) || e.Code != CodeConflict {
			t.Fatalf("conflict %+v", e)
		}
		_, err = a.FencedPutIf(key, []byte("x"), `"nope"`)
		expectErr(t, err, ErrConflict)
		if now := read(); string(now.Data) != "2" || now.Version != v2 {
			t.Fatalf("after the refused writes: %+v", now)
		}
		// Read again, decide again.
		v3, err := a.FencedPutIf(key, []byte("3"), read().Version)
		if err != nil {
			t.Fatal(err)
		}

		// A newer holder reads 3 and writes 4: A is fenced, with the version it read before
		// or the current one.
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Epoch() <= a.Epoch() {
			t.Fatalf("epoch %d after %d", b.Epoch(), a.Epoch())
		}
		if now := read(); string(now.Data) != "3" || now.Version != v3 {
			t.Fatalf("before the newer holder's write: %+v", now)
		}
		v4, err := b.FencedPutIf(key, []byte("4"), v3)
		if err != nil {
			t.Fatal(err)
		}
		for _, stale := range []string{v3, v4, ""} {
			_, err = a.FencedPutIf(key, []byte("5"), stale)
			if e := expectErr(t, err, ErrFenced); e.Epoch != b.Epoch() {
				t.Fatalf("fenced error epoch %d, want %d", e.Epoch, b.Epoch())
			}
		}
		if now := read(); string(now.Data) != "4" || now.Version != v4 || now.Epoch != b.Epoch() {
			t.Fatalf("after the old holder's writes: %+v", now)
		}
		_, err = a.FencedUpdate(key, func(*FencedObject) []byte { return []byte("6") })
		expectErr(t, err, ErrFenced)

		// Bad input.
		_, err = b.FencedPutIf(key, []byte("x"), "v\x00")
		expectErr(t, err, ErrInvalid)
		_, err = b.FencedPutIf("a//b", []byte("x"), "")
		expectErr(t, err, ErrInvalid)
		_, err = b.FencedPutIf("/"+name, []byte("x"), "") // the lease record, from the root
		expectErr(t, err, ErrInvalid)
	})
}

// FencedUpdate from 8 goroutines of one holder, then from the next holder, each update adding
// its id to a list, checked against the final list: no acknowledged update lost or applied
// twice, none reported ErrConflict or ErrFenced applied, none applied twice (ErrUnavailable:
// outcome unknown, applied at most once).
func TestFencedUpdate(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		const workers = 8
		rounds := 10
		if sc.kind != "file" {
			rounds = 4
		}
		ctx := context.Background()
		s := open(t, sc.url)
		name := uniqueName(t, "update")
		key := dataKey("update-list")
		appendOp := func(op string) func(old *FencedObject) []byte {
			return func(old *FencedObject) []byte {
				if old == nil || len(old.Data) == 0 {
					return []byte(op)
				}
				return []byte(string(old.Data) + "," + op)
			}
		}
		var mu sync.Mutex
		outcomes := map[string]error{}
		update := func(l *Lease, op string) {
			_, err := l.FencedUpdate(key, appendOp(op))
			mu.Lock()
			outcomes[op] = err
			mu.Unlock()
		}
		l, err := s.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					update(l, fmt.Sprintf("g%d-%d", w, i))
				}
			}(w)
		}
		wg.Wait()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		next, err := s.Acquire(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		update(next, "next")
		if outcomes["next"] != nil {
			t.Fatalf("the next holder's update: %v", outcomes["next"])
		}

		obj, err := s.FencedGet(key)
		if err != nil || obj == nil || obj.Epoch != next.Epoch() {
			t.Fatalf("FencedGet: %+v, %v", obj, err)
		}
		times := map[string]int{}
		for _, op := range strings.Split(string(obj.Data), ",") {
			times[op]++
		}
		acked, unknown, unknownLanded := 0, 0, 0
		for op, err := range outcomes {
			switch {
			case err == nil && times[op] == 1:
				acked++
			case (errors.Is(err, ErrConflict) || errors.Is(err, ErrFenced)) && times[op] == 0:
			case errors.Is(err, ErrUnavailable) && times[op] <= 1:
				unknown++
				unknownLanded += times[op]
			default:
				t.Errorf("update %s: %v, and found %d times", op, err, times[op])
			}
			delete(times, op)
		}
		if len(times) != 0 {
			t.Errorf("updates nobody made: %v", times)
		}
		t.Logf("%d acknowledged, %d outcome unknown (%d of them landed), of %d", acked, unknown, unknownLanded, len(outcomes))
		if acked == 0 {
			t.Fatal("no update was acknowledged")
		}
	})
}

// A relative key lands beside the lease (its name is RUNID/NAME), ObjectKey says where, and
// FencedUpdate reads it there: the placement rule of every store (issue 16).
func TestRelativeKeysLandBesideTheLease(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		s := open(t, sc.url)
		l, err := s.Acquire(context.Background(), uniqueName(t, "beside"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		key := fmt.Sprintf("counter-%d", rand.Int63())
		placed, err := l.ObjectKey("./" + key)
		if err != nil || placed != runID+"/"+key {
			t.Fatalf("ObjectKey: %q, %v (want %q)", placed, err, runID+"/"+key)
		}
		if _, err := l.ObjectKey("../../x"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("ObjectKey above the root: %v", err)
		}
		for i := 0; i < 2; i++ {
			_, err := l.FencedUpdate(key, func(old *FencedObject) []byte {
				if old == nil {
					return []byte("1")
				}
				return []byte(fmt.Sprint(len(old.Data) + 1))
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		obj, err := s.FencedGet("/" + placed)
		if err != nil || obj == nil || string(obj.Data) != "2" {
			t.Fatalf("FencedGet(%q): %+v, %v", placed, obj, err)
		}
		if obj, err := s.FencedGet(key); err != nil || obj != nil {
			t.Fatalf("nothing at the store's root: %+v, %v", obj, err)
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	})
}
