package lease

// Queued locks (docs/protocol.md §10) through the Go binding: shared readers and a writer in
// arrival order, a semaphore, byte ranges and bad options. On the file store and on moto.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

const queuePoll = 100 * time.Millisecond

// forFileAndMoto runs f on a fresh file store and on moto (S3).
func forFileAndMoto(t *testing.T, f func(t *testing.T, base string)) {
	t.Run("file", func(t *testing.T) { f(t, "file://"+t.TempDir()) })
	t.Run("moto", func(t *testing.T) {
		u := os.Getenv("LEASE_TEST_S3_MOTO")
		if u == "" {
			missing(t, "LEASE_TEST_S3_MOTO")
		}
		f(t, u)
	})
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func labelsOf(ps []Participant) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Holder.Label)
	}
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Two readers hold at once; a writer waits for them; a reader arriving after the writer waits
// for the writer; tokens follow the grants.
func TestQueueSharedReadersAndWriter(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "rw")
		ctx := context.Background()
		opt := func(label string, shared bool) *Options {
			return &Options{TTL: 10 * time.Second, Label: label, Shared: shared, Queue: true, PollInterval: queuePoll}
		}
		r1, err := s.Acquire(ctx, name, opt("r1", true))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := s.TryAcquire(ctx, name, opt("r2", true))
		if err != nil {
			t.Fatal(err)
		}
		if g := r1.Grant(); g == nil || g.Mode != ModeShared || g.Token != r1.Epoch() {
			t.Fatalf("r1 grant %+v", g)
		}
		if r2.Epoch() <= r1.Epoch() {
			t.Fatalf("tokens %d then %d", r1.Epoch(), r2.Epoch())
		}
		type got struct {
			l   *Lease
			err error
		}
		wch := make(chan got, 1)
		go func() {
			l, err := s.Acquire(ctx, name, opt("w", false))
			wch <- got{l, err}
		}()
		status := func() *Status {
			st, err := s.Status(name)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		waitUntil(t, "the writer to wait", func() bool { return sameStrings(labelsOf(status().Waiting), []string{"w"}) })
		rch := make(chan got, 1)
		go func() {
			l, err := s.Acquire(ctx, name, opt("r3", true))
			rch <- got{l, err}
		}()
		waitUntil(t, "r3 to wait", func() bool { return sameStrings(labelsOf(status().Waiting), []string{"w", "r3"}) })
		st := status()
		if !sameStrings(labelsOf(st.Holders), []string{"r1", "r2"}) || st.Holders[0].Mode != ModeShared ||
			st.Holders[1].Token != r2.Epoch() || st.Waiting[0].Mode != ModeExclusive || st.Waiting[0].Token != 0 {
			t.Fatalf("status %+v", st)
		}
		if err := r1.Release(); err != nil {
			t.Fatal(err)
		}
		if err := r2.Release(); err != nil {
			t.Fatal(err)
		}
		w := <-wch
		if w.err != nil {
			t.Fatal(w.err)
		}
		if g := w.l.Grant(); g == nil || g.Mode != ModeExclusive || g.Token <= r2.Epoch() {
			t.Fatalf("writer grant %+v after %d", g, r2.Epoch())
		}
		select {
		case r := <-rch:
			t.Fatalf("r3 granted beside the writer: %+v", r)
		case <-time.After(300 * time.Millisecond):
		}
		if err := w.l.Release(); err != nil {
			t.Fatal(err)
		}
		r3 := <-rch
		if r3.err != nil {
			t.Fatal(r3.err)
		}
		if r3.l.Epoch() <= w.l.Epoch() {
			t.Fatalf("r3 token %d not above the writer's %d", r3.l.Epoch(), w.l.Epoch())
		}
		_ = r3.l.Close()
		_ = w.l.Close()
		_ = r1.Close()
		_ = r2.Close()
	})
}

// A holder, then a low- and a high-priority waiter (the low one first): the holder is not
// preempted, and its release grants the high one first; status lists them in that order.
func TestQueuePriority(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "priority")
		ctx := context.Background()
		opt := func(label string, priority int32) *Options {
			return &Options{TTL: 10 * time.Second, Label: label, Queue: true, Priority: priority, PollInterval: queuePoll}
		}
		holder, err := s.Acquire(ctx, name, opt("holder", 0))
		if err != nil {
			t.Fatal(err)
		}
		type got struct {
			label string
			l     *Lease
			err   error
		}
		granted := make(chan got, 2)
		acquire := func(label string, priority int32) {
			l, err := s.Acquire(ctx, name, opt(label, priority))
			granted <- got{label, l, err}
		}
		waiting := func() []string {
			st, err := s.Status(name)
			if err != nil {
				t.Fatal(err)
			}
			return labelsOf(st.Waiting)
		}
		go acquire("low", 0)
		waitUntil(t, "low to wait", func() bool { return sameStrings(waiting(), []string{"low"}) })
		go acquire("high", 5)
		waitUntil(t, "high to wait", func() bool { return sameStrings(waiting(), []string{"high", "low"}) })
		// Each waiter's priority, and how often it was passed over, as the status shows them.
		standing := func() [][2]int64 {
			st, err := s.Status(name)
			if err != nil {
				t.Fatal(err)
			}
			var out [][2]int64
			for _, w := range st.Waiting {
				out = append(out, [2]int64{int64(w.Priority), int64(w.Passed)})
			}
			return out
		}
		if got := standing(); len(got) != 2 || got[0] != [2]int64{5, 0} || got[1] != [2]int64{0, 0} {
			t.Fatalf("waiters' priority and passed: %v", got)
		}
		select {
		case g := <-granted:
			t.Fatalf("%s was granted while the holder holds", g.label)
		default:
		}
		if err := holder.Release(); err != nil {
			t.Fatal(err)
		}
		first := <-granted
		if first.err != nil || first.label != "high" || first.l.Epoch() <= holder.Epoch() {
			t.Fatalf("first granted: %+v (holder's token %d)", first, holder.Epoch())
		}
		if w := waiting(); !sameStrings(w, []string{"low"}) {
			t.Fatalf("waiting after the first grant: %v", w)
		}
		// The high one, joined later, went first: the low one was passed over once.
		if got := standing(); len(got) != 1 || got[0] != [2]int64{0, 1} {
			t.Fatalf("the low waiter's priority and passed after the first grant: %v", got)
		}
		if err := first.l.Release(); err != nil {
			t.Fatal(err)
		}
		second := <-granted
		if second.err != nil || second.label != "low" || second.l.Epoch() <= first.l.Epoch() {
			t.Fatalf("second granted: %+v", second)
		}
		_ = second.l.Close()
		_ = first.l.Close()
		_ = holder.Close()
	})
}

// A semaphore of 2 with 4 goroutines: never more than 2 at once, all served.
func TestQueueSemaphore(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "sem")
		var mu sync.Mutex
		running, most, served := 0, 0, 0
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				l, err := s.Acquire(ctx, name, &Options{TTL: 10 * time.Second, Permits: 2, PollInterval: queuePoll})
				if err != nil {
					errs <- err
					return
				}
				defer l.Close()
				if g := l.Grant(); g == nil || g.Permits != 2 || g.Mode != ModeShared {
					t.Errorf("grant %+v", g)
				}
				mu.Lock()
				running++
				if running > most {
					most = running
				}
				mu.Unlock()
				time.Sleep(200 * time.Millisecond)
				mu.Lock()
				running--
				served++
				mu.Unlock()
				if err := l.Release(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if most != 2 || served != 4 {
			t.Fatalf("at most %d at once (want 2), %d served (want 4)", most, served)
		}
	})
}

// Disjoint byte ranges go together, overlapping ones do not; a plain lease has no grant; bad
// queued-lock options are ErrInvalid.
func TestQueueRangesAndBadOptions(t *testing.T) {
	s := open(t, "file://"+t.TempDir())
	ctx := context.Background()
	name := uniqueName(t, "ranges")
	a, err := s.TryAcquire(ctx, name, &Options{Range: &ByteRange{0, 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := s.TryAcquire(ctx, name, &Options{Range: &ByteRange{100, 200}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if g := b.Grant(); g == nil || g.Range == nil || *g.Range != (ByteRange{100, 200}) {
		t.Fatalf("grant %+v", g)
	}
	_, err = s.TryAcquire(ctx, name, &Options{Range: &ByteRange{50, 150}})
	expectErr(t, err, ErrHeld)
	st, err := s.Status(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 2 || *st.Holders[0].Range != (ByteRange{0, 100}) || len(st.Waiting) != 0 {
		t.Fatalf("status %+v", st)
	}

	plain, err := s.TryAcquire(ctx, uniqueName(t, "plain"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Grant() != nil {
		t.Fatalf("a plain lease has grant %+v", plain.Grant())
	}
	_ = plain.Close()

	for _, o := range []Options{
		{Range: &ByteRange{5, 1}},
		{Range: &ByteRange{5, 0}},
		{Permits: 65537},
		{Scope: "a/../b"},
		{Scope: "a", Range: &ByteRange{0, 1}},
		{Scope: "a\x00b"},
		{Priority: 1_000_000_001},
		{Priority: -1_000_000_001},
	} {
		o := o
		_, err := s.TryAcquire(ctx, uniqueName(t, "bad"), &o)
		expectErr(t, err, ErrInvalid)
	}
}

// Issue 22: holders of disjoint ranges do not fence each other's writes to the object they
// share; readers fence what they read, so a stale writer's write never lands under them; tokens
// say their grant's mode and scope.
func TestQueueFencing(t *testing.T) {
	s := open(t, "file://"+t.TempDir())
	ctx := context.Background()
	name := uniqueName(t, "fence")
	a, err := s.TryAcquire(ctx, name, &Options{Range: &ByteRange{0, 100}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx, name, &Options{Range: &ByteRange{100, 200}})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range []*Lease{a, b, a} {
		if _, err := l.FencedPut("blob", []byte{byte('0' + i)}); err != nil {
			t.Fatalf("write %d: %v", i, err) // the third: not fenced by b's later token
		}
	}
	if tok := a.Token(); tok.Range != (ByteRange{0, 100}) || tok.Shared || !strings.HasSuffix(tok.String(), ";range=0..100") {
		t.Fatalf("token %+v %s", tok, tok)
	}
	_ = a.Close()
	_ = b.Close()

	writer, err := s.TryAcquire(ctx, name, &Options{Queue: true})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if _, err := writer.FencedPut("data", []byte("v0")); err != nil {
		t.Fatal(err)
	}
	// Its grant ends; the handle stays in its hands, as a stopped process's would.
	if err := writer.Release(); err != nil {
		t.Fatal(err)
	}
	reader, err := s.TryAcquire(ctx, name, &Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if got, err := reader.FencedRead("data"); err != nil || string(got.Data) != "v0" {
		t.Fatalf("%+v, %v", got, err)
	}
	if got, err := reader.FencedRead("none"); err != nil || got != nil {
		t.Fatalf("%+v, %v", got, err)
	}
	_, err = writer.FencedPut("data", []byte("v1"))
	expectErr(t, err, ErrFenced)
	_, err = writer.FencedPutIf("none", []byte("x"), "")
	expectErr(t, err, ErrFenced)
	_, err = reader.FencedPut("data", []byte("x"))
	expectErr(t, err, ErrInvalid)
	if tok := reader.Token(); !tok.Shared || !strings.HasSuffix(tok.String(), ";shared") {
		t.Fatalf("token %+v", tok)
	}
	if back, err := ParseToken(reader.Token().String()); err != nil || back != reader.Token() {
		t.Fatalf("%+v, %v", back, err)
	}
	tok, err := ParseToken("s3://b/l#7@ab;path=t/u%20v")
	if err != nil || tok != (Token{Lease: "s3://b/l", Epoch: 7, Holder: "ab", Scope: "t/u v"}) ||
		tok.String() != "s3://b/l#7@ab;path=t/u%20v" {
		t.Fatalf("%+v %s, %v", tok, tok, err)
	}
	_, err = ParseToken("s3://b/l#7@ab;readers")
	expectErr(t, err, ErrInvalid)
}

// waiterWake reads the queued lock's record through the store and returns its one waiter's
// wake field ("" when its entry has none).
func waiterWake(t *testing.T, s *Store, name string) string {
	t.Helper()
	obj, err := s.FencedGet(name)
	if err != nil || obj == nil {
		t.Fatalf("read %s: %v %v", name, obj, err)
	}
	var rec struct {
		Queue []struct {
			Wake *string `json:"wake"`
		} `json:"queue"`
	}
	if err := json.Unmarshal(obj.Data, &rec); err != nil {
		t.Fatalf("record %q: %v", obj.Data, err)
	}
	if len(rec.Queue) != 1 {
		t.Fatalf("expected one waiter in %s", obj.Data)
	}
	if rec.Queue[0].Wake == nil {
		return ""
	}
	return *rec.Queue[0].Wake
}

// Issue 23: Options.WakeHints says where a waiter of a queued lock can be woken. By default
// (and with WakeHintsLoopback or "127.0.0.1") its queue entry carries a loopback address; with
// WakeHintsOff none (it learns of its grant at its next poll); anything else is ErrInvalid.
func TestQueueWakeHints(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "wake")
		ctx := context.Background()
		opt := func(label, hints string) *Options {
			return &Options{TTL: 10 * time.Second, Label: label, Queue: true, PollInterval: queuePoll, WakeHints: hints}
		}
		for _, hints := range []string{"", WakeHintsLoopback, "127.0.0.1", WakeHintsOff} {
			holder, err := s.TryAcquire(ctx, name, opt("h", WakeHintsOff))
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				l   *Lease
				err error
			}
			wch := make(chan got, 1)
			go func() {
				l, err := s.Acquire(ctx, name, opt("w", hints))
				wch <- got{l, err}
			}()
			waitUntil(t, "the waiter to wait", func() bool {
				st, err := s.Status(name)
				return err == nil && sameStrings(labelsOf(st.Waiting), []string{"w"})
			})
			wake := waiterWake(t, s, name)
			// Hand over before judging, so that a failure leaves no waiter behind.
			if err := holder.Close(); err != nil {
				t.Fatal(err)
			}
			w := <-wch
			if w.err != nil {
				t.Fatal(w.err)
			}
			if err := w.l.Close(); err != nil {
				t.Fatal(err)
			}
			if hints == WakeHintsOff && wake != "" {
				t.Fatalf("hints off, yet the waiter's entry has wake %q", wake)
			}
			if hints != WakeHintsOff && !strings.HasPrefix(wake, "udp:127.0.0.1:") {
				t.Fatalf("WakeHints %q: the waiter's entry has wake %q, not a loopback address", hints, wake)
			}
		}
		for _, bad := range []string{"on-demand", "127.0.0", "udp:127.0.0.1:9", "a\x00b"} {
			_, err := s.TryAcquire(ctx, name, opt("x", bad))
			expectErr(t, err, ErrInvalid)
		}
	})
}

// Issue 23, "Yield on request": the holder learns it on YieldRequests, keeps the lock, releases,
// and the waiter named by To gets it. Mirrors python/tests/test_queue.py's
// test_a_yield_request_reaches_the_holder_and_it_hands_over.
func TestAYieldRequestReachesTheHolderAndItHandsOver(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "yield")
		ctx := context.Background()
		opt := func(label string) *Options {
			return &Options{TTL: 10 * time.Second, Label: label, Queue: true, PollInterval: queuePoll}
		}
		holder, err := s.Acquire(ctx, name, opt("holder"))
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		yields := holder.YieldRequests()
		type got struct {
			l   *Lease
			err error
		}
		wch := make(chan got, 1)
		go func() {
			l, err := s.Acquire(ctx, name, opt("waiter"))
			wch <- got{l, err}
		}()
		var waiterID string
		waitUntil(t, "the waiter to wait", func() bool {
			st, err := s.Status(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Waiting) == 1 {
				waiterID = st.Waiting[0].Holder.ID
				return true
			}
			return false
		})
		asked, err := s.AskYield(name, YieldAsk{To: waiterID[:8], Reason: "deploy", By: "op"})
		if err != nil || asked != 1 {
			t.Fatalf("AskYield: %d, %v", asked, err)
		}
		select {
		case y := <-yields:
			if y != (YieldRequested{By: "op", To: waiterID, Reason: "deploy"}) {
				t.Fatalf("told %+v", y)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the holder was not told")
		}
		select {
		case <-holder.Lost():
			t.Fatal("a yield request is not a loss")
		case g := <-wch:
			t.Fatalf("the waiter was granted before the holder released: %+v", g)
		default:
		}
		if err := holder.Release(); err != nil {
			t.Fatal(err)
		}
		g := <-wch
		if g.err != nil {
			t.Fatal(g.err)
		}
		defer g.l.Close()
		if g.l.Epoch() <= holder.Epoch() {
			t.Fatalf("epochs %d then %d", holder.Epoch(), g.l.Epoch())
		}
	})
}

// Issue 23: a waiter acquired with AskYield asks the holder in its way for itself (By and To
// its own id, its YieldReason); the holder releases and the waiter gets the lock. Mirrors
// python/tests/test_queue.py's
// test_a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside.
func TestAWaiterThatAsksToYieldIsHandedTheLockWhenTheHolderStepsAside(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "ask-yield")
		ctx := context.Background()
		holder, err := s.Acquire(ctx, name, &Options{TTL: 10 * time.Second, Label: "holder", Queue: true, PollInterval: queuePoll})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		yields := holder.YieldRequests()
		type got struct {
			l   *Lease
			err error
		}
		wch := make(chan got, 1)
		go func() {
			l, err := s.Acquire(ctx, name, &Options{
				TTL: 10 * time.Second, Label: "waiter", PollInterval: queuePoll,
				AskYield: true, YieldReason: "deploy",
			})
			wch <- got{l, err}
		}()
		var y YieldRequested
		select {
		case y = <-yields:
		case g := <-wch:
			t.Fatalf("the waiter ended before the holder was told: %+v", g)
		case <-time.After(30 * time.Second):
			t.Fatal("the holder was not told")
		}
		st, err := s.Status(name)
		if err != nil {
			t.Fatal(err)
		}
		if !sameStrings(labelsOf(st.Waiting), []string{"waiter"}) {
			t.Fatalf("waiting %+v", st.Waiting)
		}
		waiterID := st.Waiting[0].Holder.ID
		// The waiter asks for itself: it is both who asks and whom to hand the lock to.
		if y != (YieldRequested{By: waiterID, To: waiterID, Reason: "deploy"}) {
			t.Fatalf("told %+v, the waiter is %s", y, waiterID)
		}
		select {
		case <-holder.Lost():
			t.Fatal("a yield request is not a loss")
		case g := <-wch:
			t.Fatalf("the waiter was granted before the holder released: %+v", g)
		default:
		}
		if err := holder.Release(); err != nil {
			t.Fatal(err)
		}
		g := <-wch
		if g.err != nil {
			t.Fatal(g.err)
		}
		defer g.l.Close()
		if g.l.Grant() == nil || g.l.Epoch() <= holder.Epoch() || g.l.Token().Holder != waiterID {
			t.Fatalf("granted %+v (token %+v) after epoch %d", g.l.Grant(), g.l.Token(), holder.Epoch())
		}
	})
}

// Issue 23: bad AskYield, YieldReason and Preempt options fail with ErrInvalid, saying what to
// do. Mirrors python/tests/test_queue.py's test_bad_yield_and_preempt_options.
func TestBadYieldAndPreemptOptions(t *testing.T) {
	s := open(t, "file://"+t.TempDir())
	ctx := context.Background()
	for _, c := range []struct {
		o    Options
		says string
	}{
		{Options{Preempt: "yes"}, "every-effect-fenced"},
		{Options{Preempt: "Never "}, "every-effect-fenced"},
		{Options{Preempt: "true"}, "believing"},
		{Options{Preempt: PreemptEveryEffectFenced, Shared: true}, "only an exclusive request"},
		{Options{YieldReason: "why"}, "set ask_yield"},
		{Options{AskYield: true, YieldReason: strings.Repeat("x", 257)}, "at most 256 bytes"},
	} {
		c := c
		name := uniqueName(t, "bad")
		_, err := s.Acquire(ctx, name, &c.o)
		if e := expectErr(t, err, ErrInvalid); !strings.Contains(e.Message, c.says) {
			t.Fatalf("%+v: %q does not say %q", c.o, e.Message, c.says)
		}
		_, err = s.TryAcquire(ctx, name, &c.o)
		if e := expectErr(t, err, ErrInvalid); !strings.Contains(e.Message, c.says) {
			t.Fatalf("TryAcquire %+v: %q does not say %q", c.o, e.Message, c.says)
		}
		if st, err := s.Status(name); err != nil || st.State != "free" {
			t.Fatalf("status after %+v: %+v, %v", c.o, st, err)
		}
	}
	// A try never waits in the record, so it would ask nobody: refused, not ignored.
	_, err := s.TryAcquire(ctx, uniqueName(t, "try"), &Options{AskYield: true})
	if e := expectErr(t, err, ErrInvalid); !strings.Contains(e.Message, "asks nobody") {
		t.Fatalf("TryAcquire with AskYield: %q does not say \"asks nobody\"", e.Message)
	}
}

func TestAskYieldRefusesABadToAndAPlainLease(t *testing.T) {
	forFileAndMoto(t, func(t *testing.T, base string) {
		s := open(t, base)
		name := uniqueName(t, "yield-bad")
		ctx := context.Background()
		holder, err := s.Acquire(ctx, name, &Options{TTL: 10 * time.Second, Queue: true})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		if _, err := s.AskYield(name, YieldAsk{To: "no-such-waiter"}); !errors.Is(err, ErrInvalid) ||
			!strings.Contains(err.Error(), "no-such-waiter") {
			t.Fatalf("unknown To: %v", err)
		}
		plain := uniqueName(t, "yield-plain")
		p, err := s.Acquire(ctx, plain, &Options{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		// A plain lease is asked through KEY.yield, without To (it has no waiters).
		if _, err := s.AskYield(plain, YieldAsk{To: "x"}); !errors.Is(err, ErrInvalid) ||
			!strings.Contains(err.Error(), "no waiters") {
			t.Fatalf("plain lease with To: %v", err)
		}
		if n, err := s.AskYield(plain, YieldAsk{Reason: "deploy"}); err != nil || n != 1 {
			t.Fatalf("plain lease: %d, %v", n, err)
		}
	})
}
