package prometheus

import (
	"context"
	"strings"
	"testing"
	"time"

	lease "github.com/lease-dev/lease/bindings/go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestTheCollectorServesTheLeaseMetrics(t *testing.T) {
	s, err := lease.Open("file://" + t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 3; i++ {
		l, err := s.Acquire(context.Background(), "p", &lease.Options{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector())
	want := `
# HELP lease_acquisitions_total Acquisitions ended, by outcome (acquired, held, timeout, unavailable, cancelled, failed).
# TYPE lease_acquisitions_total counter
lease_acquisitions_total{lease="p",outcome="acquired"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "lease_acquisitions_total"); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "lease_hold_seconds")
	if err != nil || n != 1 {
		t.Fatalf("lease_hold_seconds: %d series, %v", n, err)
	}
}
