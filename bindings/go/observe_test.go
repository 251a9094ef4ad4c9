package lease

// Health states, metrics and each epoch's history, seen from Go (issue 25): mirrors
// python/tests/test_observe.py.

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// wait is a bound on each wait for an event, never a timing assertion.
const wait = 10 * time.Second

func nextHealth(t *testing.T, ch <-chan HealthEvent) HealthEvent {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("HealthChanges closed early")
		}
		return e
	case <-time.After(wait):
		t.Fatal("no health change within the bound")
	}
	return HealthEvent{}
}

// holdRecordLock takes the file store's sidecar lock of name in dir: every renewal then fails,
// as on an unreachable store. The returned func lets go.
func holdRecordLock(t *testing.T, dir, name string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "."+name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { _ = f.Close() }
}

// heldWithHealth acquires lease "h" (ttl 3 s) on a file store in a new directory and
// subscribes to its health; the lease is closed when the test ends.
func heldWithHealth(t *testing.T) (string, *Lease, <-chan HealthEvent) {
	dir := t.TempDir()
	s := open(t, "file://"+dir)
	l, err := s.Acquire(context.Background(), "h", &Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return dir, l, l.HealthChanges()
}

func TestHealthLateUnknownAndBack(t *testing.T) {
	dir, l, ch := heldWithHealth(t)
	if e := nextHealth(t, ch); e.Health != HealthHealthy || e.Reason != "" {
		t.Fatalf("first: %+v", e)
	}
	unlock := holdRecordLock(t, dir, "h")
	if e := nextHealth(t, ch); e.Health != HealthLate {
		t.Fatalf("want late, got %+v", e)
	}
	e := nextHealth(t, ch)
	// Unknown when kill-after (ttl/3) + margin (ttl/10) is left: 1.3 s of 3 s.
	if e.Health != HealthUnknown || e.Remaining > 1300*time.Millisecond {
		t.Fatalf("want unknown with at most 1.3s left, got %+v", e)
	}
	if err := l.EnsureHeld(0); err != nil {
		t.Fatalf("still held while unknown: %v", err)
	}
	unlock()
	if e := nextHealth(t, ch); e.Health != HealthHealthy {
		t.Fatalf("want healthy again, got %+v", e)
	}
	if l.Health() != HealthHealthy {
		t.Fatal(l.Health())
	}
}

func TestHealthEndsLost(t *testing.T) {
	dir, _, ch := heldWithHealth(t)
	unlock := holdRecordLock(t, dir, "h")
	defer unlock()
	var seen []string
	var last HealthEvent
	for e := range ch {
		seen = append(seen, e.Health.String())
		last = e
	}
	if got := len(seen); got != 4 || seen[0] != "healthy" || seen[1] != "late" || seen[2] != "unknown" || seen[3] != "lost" {
		t.Fatalf("changes %v", seen)
	}
	if last.Reason != "expired" || last.Remaining != 0 {
		t.Fatalf("last %+v", last)
	}
}

func TestMetricsAndHistory(t *testing.T) {
	dir := t.TempDir()
	s := open(t, "file://"+dir)
	ctx := context.Background()
	first, err := s.Acquire(ctx, "observe-m", &Options{TTL: 5 * time.Second, Label: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := s.Acquire(ctx, "observe-m", &Options{TTL: 5 * time.Second, Label: "second"})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	st, err := s.Status("observe-m")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.History) != 1 || st.History[0].End != "released" || st.History[0].Epoch != first.Epoch() || st.History[0].Holder.Label != "first" {
		t.Fatalf("history %+v", st.History)
	}
	families, err := Metrics()
	if err != nil {
		t.Fatal(err)
	}
	var acquired float64
	for _, f := range families {
		if f.Name != "lease_acquisitions_total" {
			continue
		}
		for _, sm := range f.Samples {
			if sm.Labels["lease"] == "observe-m" && sm.Labels["outcome"] == "acquired" {
				acquired = sm.Value
			}
		}
	}
	if acquired != 2 {
		t.Fatalf("lease_acquisitions_total{lease=observe-m,outcome=acquired} = %v, want 2", acquired)
	}
	text, err := MetricsText()
	if err != nil || len(text) == 0 {
		t.Fatalf("MetricsText: %q %v", text, err)
	}
}
