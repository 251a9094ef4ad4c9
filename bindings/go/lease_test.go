package lease

// The Go binding's tests, mirroring the C tests (ffi/tests/c/test_lease.c) by name, on the file
// store and on the servers of scripts/stores.sh ($LEASE_TEST_S3_MOTO, $LEASE_TEST_GCS_FAKE,
// $LEASE_TEST_AZURE_AZURITE). Run them through
// scripts/test-ffi.sh, which builds liblease and sets PKG_CONFIG_PATH, LEASE_BIN and the S3 URL.
// With CI=true a missing S3 server or LEASE_BIN fails the tests that need them; elsewhere they
// are skipped, loudly.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func inCI() bool { return strings.EqualFold(os.Getenv("CI"), "true") }

func missing(t *testing.T, what string) {
	t.Helper()
	msg := what + " is not set: run these tests through scripts/test-ffi.sh"
	if inCI() {
		t.Fatalf("%s (CI=true: it must be)", msg)
	}
	fmt.Fprintf(os.Stderr, "\n!!! SKIPPING: %s\n", msg)
	t.Skip("!!! " + msg)
}

type storeCase struct {
	kind string
	url  string
}

// The test servers of scripts/stores.sh: store kind and the variable holding its URL. The
// binding has no code of its own for any of them (the core's URL registry opens them all).
var servers = []struct{ kind, env string }{
	{"moto", "LEASE_TEST_S3_MOTO"},
	{"gcs", "LEASE_TEST_GCS_FAKE"},
	{"azure", "LEASE_TEST_AZURE_AZURITE"},
}

// forEachStore runs f on a fresh file store and on each test server (moto S3,
// fake-gcs-server, Azurite).
func forEachStore(t *testing.T, f func(t *testing.T, sc storeCase)) {
	t.Run("file", func(t *testing.T) { f(t, storeCase{"file", "file://" + t.TempDir()}) })
	for _, server := range servers {
		t.Run(server.kind, func(t *testing.T) {
			u := os.Getenv(server.env)
			if u == "" {
				missing(t, server.env)
			}
			f(t, storeCase{server.kind, u})
		})
	}
}

// conditionalDeletes: whether fenced deletes work on the store (fake-gcs-server ignores
// ifGenerationMatch on delete, so a custom GCS endpoint leaves them off: docs/stores.md).
func (sc storeCase) conditionalDeletes() bool { return sc.kind != "gcs" }

var runID = fmt.Sprintf("go-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000_007)

// uniqueName is a lease name no other test or run uses.
func uniqueName(t *testing.T, what string) string {
	return fmt.Sprintf("%s/%s-%d", runID, what, rand.Int63())
}

// leaseURL is the URL of lease name in the store at base: the name goes before the query.
func leaseURL(base, name string) string {
	head, query, hasQuery := strings.Cut(base, "?")
	u := strings.TrimRight(head, "/") + "/" + name
	if hasQuery {
		u += "?" + query
	}
	return u
}

func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(url)
	if err != nil {
		t.Fatalf("Open(%q): %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func expectErr(t *testing.T, err error, want error) *Error {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want one matching %v", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Message == "" {
		t.Fatalf("error %v is not an *Error with a message", err)
	}
	return e
}

func leaseBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("LEASE_BIN")
	if bin == "" {
		missing(t, "LEASE_BIN (the lease CLI)")
	}
	return bin
}

func breakLease(t *testing.T, url string) {
	t.Helper()
	out, err := exec.Command(leaseBin(t), "break", url, "--yes").CombinedOutput()
	if err != nil {
		t.Fatalf("lease break %s: %v\n%s", url, err, out)
	}
}

// Acquire, inspect, renew, release (twice), re-acquire at a higher epoch; try-once and bounded
// waits against a holder; Close without Release releases.
func TestLifeCycle(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		ctx := context.Background()
		s := open(t, sc.url)
		name := uniqueName(t, "life")
		st, err := s.Status(name)
		if err != nil || st.State != "free" {
			t.Fatalf("status of a new lease: %+v, %v", st, err)
		}
		opts := &Options{TTL: 1500 * time.Millisecond, Label: "go-life-cycle", Data: "10.0.0.7:8080"}
		before := uint64(time.Now().UnixMilli())
		l, err := s.TryAcquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		// A new record's first epoch is the clock in ms (never re-issued if the record is
		// deleted): epochs compare with each other, not with 1.
		epoch := l.Epoch()
		if epoch < before {
			t.Fatalf("epoch %d of a new record, below the clock's %d ms", epoch, before)
		}
		if r := l.Remaining(); r <= 0 || r > 1500*time.Millisecond {
			t.Fatalf("remaining %v", r)
		}
		if err := l.EnsureHeld(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		expectErr(t, l.EnsureHeld(time.Minute), ErrLost) // more than the ttl
		st, err = s.Status(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != "held" || st.Epoch != epoch || st.Holder == nil || st.Holder.Label != "go-life-cycle" ||
			!strings.HasSuffix(st.Holder.Client, "(go)") || st.Data != "10.0.0.7:8080" || st.TTL != 1500*time.Millisecond {
			t.Fatalf("status while held: %+v holder %+v", st, st.Holder)
		}

		// Someone else: try once -> held; a deadline -> timeout (and DeadlineExceeded).
		_, err = s.TryAcquire(ctx, name, nil)
		expectErr(t, err, ErrHeld)
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = s.Acquire(dctx, name, nil)
		cancel()
		expectErr(t, err, ErrTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v does not match context.DeadlineExceeded", err)
		}

		// Background renewal keeps it past its ttl.
		time.Sleep(2500 * time.Millisecond)
		if err := l.EnsureHeld(time.Millisecond); err != nil {
			t.Fatalf("after 2.5 s with a 1.5 s ttl: %v", err)
		}
		select {
		case <-l.Lost():
			t.Fatalf("lost: %s", l.LostReason())
		default:
		}

		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(); err != nil { // idempotent
			t.Fatal(err)
		}
		if l.Remaining() != 0 || l.Epoch() != epoch {
			t.Fatalf("after release: remaining %v epoch %d", l.Remaining(), l.Epoch())
		}
		e := expectErr(t, l.EnsureHeld(0), ErrLost)
		if !strings.Contains(e.Message, "released") {
			t.Fatalf("message %q", e.Message)
		}
		if st, _ := s.Status(name); st == nil || st.State != "released" {
			t.Fatalf("status after release: %+v", st)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}

		// Re-acquire: a higher epoch; Close without Release releases.
		l2, err := s.Acquire(ctx, name, opts)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Epoch() != epoch+1 {
			t.Fatalf("epoch %d after %d", l2.Epoch(), epoch)
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l2.Close(); err != nil { // twice is harmless
			t.Fatal(err)
		}
		if st, _ := s.Status(name); st == nil || st.State != "released" || st.Epoch != epoch+1 {
			t.Fatalf("status after close: %+v", st)
		}
		select {
		case <-l.Lost():
			t.Fatal("a released lease reported lost")
		case <-l2.Lost():
			t.Fatal("a closed lease reported lost")
		default:
		}
	})
}

// 8 goroutines contend for one lease: no lost increment, epochs strictly increasing.
// Issue 28: a held lease's TTL and data change with SetTTL and SetData; an Owner does not wait
// for what it holds itself (goroutines without an Owner wait, as with sync.Mutex).
func TestChangesAndOwners(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		ctx := context.Background()
		s := open(t, sc.url)
		name := uniqueName(t, "change")
		l, err := s.Acquire(ctx, name, &Options{TTL: 30 * time.Second, Data: "10.0.0.1:80", Owner: "job 7"})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		left, err := l.SetTTL(ctx, time.Minute)
		if err != nil || left <= 59*time.Second || left > time.Minute {
			t.Fatalf("SetTTL: %v, %v", left, err)
		}
		if _, err := l.SetData(ctx, "10.0.0.2:80"); err != nil {
			t.Fatal(err)
		}
		st, err := s.Status(name)
		if err != nil || st.TTL != time.Minute || st.Data != "10.0.0.2:80" {
			t.Fatalf("status after the changes: %+v, %v", st, err)
		}
		if _, err := l.SetData(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Status(name); st.Data != "" {
			t.Fatalf("data not removed: %+v", st)
		}
		_, err = l.SetTTL(ctx, 10*time.Millisecond)
		expectErr(t, err, ErrInvalid)

		// The same Owner fails at once with ErrHeld (a wait would end with ErrTimeout at the
		// deadline); no Owner waits (here until the deadline).
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = s.Acquire(dctx, name, &Options{Owner: "job 7"})
		cancel()
		e := expectErr(t, err, ErrHeld)
		if !strings.Contains(e.Message, "would wait for itself") {
			t.Fatalf("not told why: %v", e)
		}
		dctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = s.Acquire(dctx, name, nil)
		cancel()
		expectErr(t, err, ErrTimeout)

		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		_, err = l.SetTTL(ctx, time.Minute)
		expectErr(t, err, ErrLost)
	})
}

func TestContention(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		const workers = 8
		rounds := 10
		if sc.kind != "file" {
			rounds = 4
		}
		name := uniqueName(t, "contended")
		var (
			holders    atomic.Int32
			counter    atomic.Int64 // loaded and stored separately: a second holder would lose an increment
			firstEpoch atomic.Uint64
			lastEpoch  atomic.Uint64
			failures   atomic.Int32
			wg         sync.WaitGroup
		)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := Open(sc.url) // each worker its own handle on the one store
				if err != nil {
					t.Error(err)
					failures.Add(1)
					return
				}
				defer s.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				for i := 0; i < rounds; i++ {
					l, err := s.Acquire(ctx, name, &Options{TTL: 10 * time.Second})
					if err != nil {
						t.Error(err)
						failures.Add(1)
						return
					}
					if holders.Add(1) != 1 {
						t.Error("two holders at once")
						failures.Add(1)
					}
					if e := l.Epoch(); e <= lastEpoch.Load() {
						t.Errorf("epoch %d after %d", e, lastEpoch.Load())
						failures.Add(1)
					} else {
						firstEpoch.CompareAndSwap(0, e)
						lastEpoch.Store(e)
					}
					seen := counter.Load()
					time.Sleep(time.Millisecond)
					counter.Store(seen + 1)
					holders.Add(-1)
					if err := l.Close(); err != nil {
						t.Error(err)
						failures.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if failures.Load() != 0 {
			t.Fatalf("%d failures", failures.Load())
		}
		if got := counter.Load(); got != int64(workers*rounds) {
			t.Fatalf("counter %d, want %d", got, workers*rounds)
		}
		// One new epoch per acquisition (epochs start at the clock in ms: compare relative ones).
		if lastEpoch.Load()-firstEpoch.Load() < uint64(workers*rounds-1) {
			t.Fatalf("epochs from %d to %d for %d acquisitions", firstEpoch.Load(), lastEpoch.Load(), workers*rounds)
		}
	})
}

// Many goroutines read one lease while another releases and closes it.
func TestSharedHandle(t *testing.T) {
	s := open(t, "file://"+t.TempDir())
	l, err := s.Acquire(context.Background(), uniqueName(t, "shared"), nil)
	if err != nil {
		t.Fatal(err)
	}
	epoch := l.Epoch()
	var stop atomic.Bool
	var bad atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if l.Epoch() != epoch {
					bad.Add(1)
				}
				left := l.Remaining()
				if err := l.EnsureHeld(0); err != nil && !errors.Is(err, ErrLost) {
					bad.Add(1)
				} else if err == nil && left < 0 {
					bad.Add(1)
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d bad reads", bad.Load())
	}
	if l.Remaining() != 0 {
		t.Fatal("remaining after close")
	}
}

// Cancelling the context of a waiting Acquire returns within 100 ms (the bound; the
// measured time is logged). An already-cancelled context returns at once.
func TestCancel(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		s := open(t, sc.url)
		name := uniqueName(t, "cancel")
		held, err := s.Acquire(context.Background(), name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()

		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			err error
			at  time.Time
		}
		res := make(chan result, 1)
		go func() {
			_, err := s.Acquire(ctx, name, nil)
			res <- result{err, time.Now()}
		}()
		time.Sleep(300 * time.Millisecond) // let it start waiting
		select {
		case r := <-res:
			t.Fatalf("returned before the cancel: %v", r.err)
		default:
		}
		t0 := time.Now()
		cancel()
		var r result
		select {
		case r = <-res:
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled Acquire did not return within 10 s")
		}
		took := r.at.Sub(t0)
		t.Logf("cancelled Acquire returned after %v", took)
		expectErr(t, r.err, ErrCancelled)
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("%v does not match context.Canceled", r.err)
		}
		if took > 100*time.Millisecond {
			t.Fatalf("a cancelled Acquire took %v to return (issue 4: within 100 ms)", took)
		}

		// Already cancelled: at once, even for a free lease.
		_, err = s.Acquire(ctx, uniqueName(t, "free"), nil)
		expectErr(t, err, ErrCancelled)
	})
}

// An unreachable store (a closed port on 127.0.0.1): Acquire with context.Background() returns
// ErrUnavailable once the store has not answered for the TTL (at least 10 s), instead of hanging
// silently (issue 16).
func TestAcquireOnAnUnreachableStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := open(t, fmt.Sprintf("gs://bucket?endpoint=http://127.0.0.1:%d&anonymous=true", port))
	start := time.Now()
	res := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), "job", &Options{TTL: 3 * time.Second})
		res <- err
	}()
	select {
	case err = <-res:
	case <-time.After(60 * time.Second):
		t.Fatal("Acquire on an unreachable store was still waiting after 60 s")
	}
	took := time.Since(start)
	expectErr(t, err, ErrUnavailable)
	if took < 9900*time.Millisecond || took > 20*time.Second {
		t.Fatalf("Acquire gave up after %v, expected about 10 s (the default unavailable timeout)", took)
	}
}

// Lost() closes after `lease break`; EnsureHeld and Release then fail with ErrLost.
func TestLostAfterBreak(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		leaseBin(t)
		s := open(t, sc.url)
		name := uniqueName(t, "broken")
		l, err := s.Acquire(context.Background(), name, &Options{TTL: 1200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		epoch := l.Epoch()
		breakLease(t, leaseURL(sc.url, name))
		// Broken, and waiting out the broken holder (until ttl + grace after the break, or
		// until it releases): nobody may take it yet.
		if st, err := s.Status(name); err != nil || st.State != "broken" || st.Epoch <= epoch || st.ExpiresIn <= 0 {
			t.Fatalf("status after the break: %+v, %v", st, err)
		}
		select {
		case <-l.Lost():
		case <-time.After(20 * time.Second): // bounded; a renewal notices within ttl/3
			t.Fatal("Lost() did not close within 20 s of the break")
		}
		if !strings.Contains(l.LostReason(), "broken") {
			t.Fatalf("reason %q", l.LostReason())
		}
		if l.Remaining() != 0 {
			t.Fatal("remaining after loss")
		}
		expectErr(t, l.EnsureHeld(0), ErrLost)
		// Releasing the lost lease acknowledges the break: the next holder need not wait.
		expectErr(t, l.Release(), ErrLost)
		if st, err := s.Status(name); err != nil || st.State != "released" {
			t.Fatalf("status after the broken holder released: %+v, %v", st, err)
		}
		if l.Epoch() != epoch {
			t.Fatal("epoch changed")
		}
		next, err := s.Acquire(context.Background(), name, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		if next.Epoch() < epoch+2 {
			t.Fatalf("epoch %d after a break of %d", next.Epoch(), epoch)
		}
	})
}

// Issue 23: Preempt: PreemptEveryEffectFenced takes a live holder's lease at once (with a try
// that may not wait), at a higher epoch; the holder learns it at its next renewal, reason
// "preempted". Mirrors python/tests/test_lease.py's
// test_preempt_takes_a_live_lease_at_once_and_the_holder_loses_it_as_preempted.
func TestPreemptTakesALiveLeaseAtOnceAndTheHolderLosesItAsPreempted(t *testing.T) {
	// A plain lease, and a queued lock's grant (docs/protocol.md §10, "Preemption of a queued
	// lock").
	for _, queued := range []bool{false, true} {
		t.Run(fmt.Sprintf("queued=%v", queued), func(t *testing.T) { preemptALiveHolder(t, queued) })
	}
}

func preemptALiveHolder(t *testing.T, queued bool) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		s := open(t, sc.url)
		name := uniqueName(t, "preempt")
		ctx := context.Background()
		holder, err := s.Acquire(ctx, name, &Options{TTL: 3 * time.Second, Label: "old", Queue: queued})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		health := holder.HealthChanges()
		// Without the mode: held.
		_, err = s.TryAcquire(ctx, name, &Options{TTL: 3 * time.Second, Queue: queued})
		expectErr(t, err, ErrHeld)
		// With it: at once, though it may not wait.
		taker, err := s.TryAcquire(ctx, name, &Options{TTL: 3 * time.Second, Label: "new", Queue: queued, Preempt: PreemptEveryEffectFenced})
		if err != nil {
			t.Fatal(err)
		}
		defer taker.Close()
		if taker.Epoch() <= holder.Epoch() {
			t.Fatalf("epochs %d then %d", holder.Epoch(), taker.Epoch())
		}
		st, err := s.Status(name)
		if err != nil {
			t.Fatal(err)
		}
		if queued {
			if len(st.Holders) != 1 || st.Holders[0].Holder.Label != "new" || st.Holders[0].Token != taker.Epoch() {
				t.Fatalf("status after the preemption: %+v", st)
			}
		} else if st.Holder == nil || st.Holder.Label != "new" || st.Epoch != taker.Epoch() {
			t.Fatalf("status after the preemption: %+v", st)
		}
		// The old holder learns it at its next renewal (every ttl/3).
		select {
		case <-holder.Lost():
		case <-time.After(30 * time.Second): // bounded, not measured
			t.Fatal("the preempted holder did not learn it")
		}
		reason := ""
		for reason == "" {
			select {
			case e, ok := <-health:
				if !ok {
					t.Fatal("HealthChanges closed without a lost event")
				}
				if e.Health == HealthLost {
					reason = e.Reason
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no lost health event")
			}
		}
		if reason != "preempted" || !strings.Contains(holder.LostReason(), "preempted") {
			t.Fatalf("reason %q, LostReason %q", reason, holder.LostReason())
		}
		expectErr(t, holder.Release(), ErrLost)
		if err := taker.Release(); err != nil {
			t.Fatal(err)
		}
	})
}

// acquireKeepingOnlyLost acquires name and returns only the lease's Lost() channel: the *Lease
// itself becomes unreachable when this returns (noinline: it must not live on in the caller's
// frame).
//
//go:noinline
func acquireKeepingOnlyLost(t *testing.T, s *Store, name string) (<-chan struct{}, uint64) {
	t.Helper()
	l, err := s.Acquire(context.Background(), name, &Options{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return l.Lost(), l.Epoch()
}

// Issue 11 item 11: a *Lease collected by the GC was released by its finalizer while Lost()
// stayed open, so a worker selecting on Lost() went on working after another had acquired.
// Lost() must close (and the event be logged) before anyone else can acquire.
func TestLostClosedWhenCollected(t *testing.T) {
	forEachStore(t, func(t *testing.T, sc storeCase) {
		var logged syncBuffer
		log.SetOutput(&logged)
		defer log.SetOutput(os.Stderr)
		s := open(t, sc.url)
		name := uniqueName(t, "collected")
		lost, epoch := acquireKeepingOnlyLost(t, s, name)

		// A goroutine blocked on the channel, as a worker would be.
		woken := make(chan struct{})
		go func() {
			<-lost
			close(woken)
		}()

		// Collect until the lease is gone: each round, another worker tries to take it, and
		// whenever it can, the first worker's Lost() must already be closed.
		deadline := time.Now().Add(20 * time.Second)
		var next *Lease
		for next == nil {
			if time.Now().After(deadline) {
				t.Fatal("the dropped lease was not released within 20 s of GC rounds")
			}
			runtime.GC()
			time.Sleep(20 * time.Millisecond)
			l, err := s.TryAcquire(context.Background(), name, nil)
			if err != nil {
				expectErr(t, err, ErrHeld)
				continue
			}
			next = l
			select {
			case <-lost:
			default:
				t.Fatalf("epoch %d acquired while the collected epoch %d's Lost() was open", l.Epoch(), epoch)
			}
		}
		defer next.Close()
		select {
		case <-woken:
		case <-time.After(5 * time.Second):
			t.Fatal("the goroutine blocked on Lost() was not woken")
		}
		if msg := logged.String(); !strings.Contains(msg, fmt.Sprintf("epoch %d", epoch)) ||
			!strings.Contains(msg, "garbage collector") {
			t.Fatalf("not logged: %q", msg)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the log package's writes from the finalizer goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bad input of every kind returns ErrInvalid, never a crash.
func TestBadInput(t *testing.T) {
	for _, u := range []string{"", "ftp://bucket", "gs://B", "az://account", "s3://B", "s3://ab", "memory://", "file://relative/dir",
		"bare-name", "\xff\xfe://x", "s3://bucket?x=%zz", "file:///tmp/x\x00y", "\xc3\x28"} {
		if _, err := Open(u); !errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%q): %v", u, err)
		}
	}
	// A mistyped URL is refused with the likely fix (issue 28).
	for u, fix := range map[string]string{"s3:/my-bucket": "s3://my-bucket", "file:/tmp/locks": "file:///tmp/locks"} {
		if _, err := Open(u); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `did you mean "`+fix+`"`) {
			t.Errorf("Open(%q): %v", u, err)
		}
	}
	s := open(t, "file://"+t.TempDir())
	ctx := context.Background()
	for _, name := range []string{"", "\xff", "a//b", "../x", "nul\x00byte"} {
		if _, err := s.TryAcquire(ctx, name, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("TryAcquire(%q): %v", name, err)
		}
		if _, err := s.Status(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("Status(%q): %v", name, err)
		}
	}
	name := uniqueName(t, "bad-input")
	for _, o := range []*Options{
		{TTL: time.Millisecond}, {TTL: 48 * time.Hour}, {TTL: -time.Second}, {Label: "\xff\xfe"},
		{Label: "line\nbreak"}, {Data: "\xc3"}, {Data: "x\x00"},
	} {
		if _, err := s.TryAcquire(ctx, name, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("TryAcquire with %+v: %v", o, err)
		}
	}
	l, err := s.TryAcquire(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Release(); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	expectErr(t, l.EnsureHeld(0), ErrLost)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_, err = s.TryAcquire(ctx, name, nil)
	expectErr(t, err, ErrInvalid)
	_, err = s.Status(name)
	expectErr(t, err, ErrInvalid)
}

// One test per mapping: every code matches its own sentinel and no other.
func TestErrorMapping(t *testing.T) {
	cases := map[Code]error{
		CodeHeld: ErrHeld, CodeTimeout: ErrTimeout, CodeCancelled: ErrCancelled, CodeLost: ErrLost,
		CodeFenced: ErrFenced, CodeConflict: ErrConflict, CodeUnavailable: ErrUnavailable, CodeInvalid: ErrInvalid,
		CodeStore: ErrStore, CodeCorrupt: ErrCorrupt, CodeInternal: ErrInternal, CodePanic: ErrInternal,
		CodeForked: ErrForked, CodeQueueFull: ErrQueueFull, CodeUnsupported: ErrUnsupported,
	}
	all := []error{ErrHeld, ErrTimeout, ErrCancelled, ErrLost, ErrFenced, ErrConflict, ErrUnavailable, ErrInvalid,
		ErrStore, ErrCorrupt, ErrInternal, ErrForked, ErrQueueFull, ErrUnsupported}
	for code, want := range cases {
		var err error = newError(code, "m")
		for _, s := range all {
			if errors.Is(err, s) != (s == want) {
				t.Errorf("%v: errors.Is(%v) = %v", code, s, !(s == want))
			}
		}
		if !strings.HasPrefix(code.String(), "LEASE_") || code.String() == "LEASE_UNKNOWN" {
			t.Errorf("name of %d: %s", int(code), code)
		}
	}
	if CodeUnsupported.String() != "LEASE_UNSUPPORTED" || Code(16).String() != "LEASE_UNKNOWN" {
		t.Error("LEASE_UNSUPPORTED is 15, the last code")
	}
	if Code(99).String() != "LEASE_UNKNOWN" || !errors.Is(newError(Code(99), "m"), ErrInternal) {
		t.Error("an unknown code is internal")
	}
	if CodeOK != 0 || CodeHeld != 1 || CodeFenced != 5 || CodeForked != 12 || CodeConflict != 13 ||
		CodeQueueFull != 14 || CodeUnsupported != 15 {
		t.Error("the codes' numbers are fixed")
	}
	if (&Error{Code: CodeHeld}).Retryable() != true || (&Error{Code: CodeLost}).Retryable() {
		t.Error("Retryable")
	}
	if v := Version(); v == "" || (os.Getenv("LEASE_EXPECTED_VERSION") != "" && v != os.Getenv("LEASE_EXPECTED_VERSION")) {
		t.Errorf("version %q", v)
	}
}
