package lease

// Health states, metrics and tenure history (issue 25; docs/protocol.md §3, §4).

// #include "liblease.h"
// enum lease_code lease_go_on_health(const struct lease *l, uintptr_t handle);
import "C"

import (
	"encoding/json"
	"runtime/cgo"
	"time"
)

// Health is how a held lease is doing.
type Health int

const (
	// HealthHealthy: renewals are landing.
	HealthHealthy Health = iota
	// HealthLate: a renewal failed or is slow; the deadline is still far.
	HealthLate
	// HealthUnknown: no renewal landed and the deadline is near: act only through fenced writes.
	HealthUnknown
	// HealthLost: no longer held (lost, expired or released).
	HealthLost
)

func (h Health) String() string {
	switch h {
	case HealthHealthy:
		return "healthy"
	case HealthLate:
		return "late"
	case HealthUnknown:
		return "unknown"
	default:
		return "lost"
	}
}

// HealthEvent is one change of a held lease's health: the new state, the time left and, for
// a loss, why ("expired", "taken_over", "broken", "preempted", "vanished", "overwritten";
// a queued lock's grant: "session_deleted", "removed", "lock_replaced").
type HealthEvent struct {
	Health    Health
	Remaining time.Duration
	Reason    string
}

// healthBuffer is how many changes HealthChanges keeps for a reader that is behind; the
// oldest go first (a lease changes health at most a few times per renewal interval).
const healthBuffer = 64

//export goLeaseHealth
func goLeaseHealth(handle C.uintptr_t, health C.int, remainingMs C.uint64_t, reason *C.char) {
	// On a liblease runtime thread: never block.
	e := HealthEvent{Health: Health(health), Remaining: time.Duration(remainingMs) * time.Millisecond}
	if reason != nil {
		e.Reason = C.GoString(reason)
	}
	cgo.Handle(handle).Value().(*feed[HealthEvent]).send(e, e.Health == HealthLost)
}

// Health is the lease's health now.
func (l *Lease) Health() Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ptr == nil {
		return HealthLost
	}
	return Health(C.lease_health_now(l.ptr))
}

// HealthChanges returns a channel that receives the current health at once, then each change
// (healthy → late → unknown → lost, or back to healthy when a renewal lands), in order. It is
// closed after a loss, or when the lease is closed; a release ends the changes without a
// loss. Every call returns the same channel.
func (l *Lease) HealthChanges() <-chan HealthEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.health != nil {
		return l.health.ch
	}
	l.health = openFeed[HealthEvent](l.ptr, healthBuffer, func(p *C.lease, h C.uintptr_t) C.enum_lease_code {
		return C.lease_go_on_health(p, h)
	})
	return l.health.ch
}

// Tenure is one past tenure of a lease (Status.History): who held it, from when to when, and
// how it ended: "released", "expired" (taken over after its deadline), "broken" (by an
// operator, By) or "deleted" (the record was deleted while held).
type Tenure struct {
	Epoch      uint64 `json:"epoch"`
	Holder     Holder `json:"holder"`
	AcquiredAt string `json:"acquired_at"`
	EndedAt    string `json:"ended_at"`
	End        string `json:"end"`
	By         string `json:"by"`
}

// MetricFamily is one family of Metrics: counters end in _total; units are seconds, bytes
// and dollars.
type MetricFamily struct {
	Name    string         `json:"name"`
	Help    string         `json:"help"`
	Type    string         `json:"type"` // "counter", "gauge" or "histogram"
	Samples []MetricSample `json:"samples"`
}

// MetricSample is one labelled value: Value for a counter or a gauge; Buckets (upper bound,
// cumulative count), Sum and Count for a histogram.
type MetricSample struct {
	Labels  map[string]string `json:"labels"`
	Value   float64           `json:"value"`
	Buckets [][2]float64      `json:"buckets"`
	Sum     float64           `json:"sum"`
	Count   uint64            `json:"count"`
}

// Metrics returns this process's lease metrics (the numbers every language shares);
// bindings/go/prometheus hands them to client_golang.
func Metrics() ([]MetricFamily, error) {
	var cjson *C.char
	if code := C.lease_metrics_json(&cjson); code != C.LEASE_OK {
		return nil, newError(Code(code), "cannot read the metrics")
	}
	raw := C.GoString(cjson)
	C.lease_string_free(cjson)
	var out []MetricFamily
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, newError(CodeInternal, "cannot parse the metrics liblease returned: "+err.Error())
	}
	return out, nil
}

// MetricsText returns this process's lease metrics in the Prometheus (OpenMetrics) text format.
func MetricsText() (string, error) {
	var ctext *C.char
	if code := C.lease_metrics_text(&ctext); code != C.LEASE_OK {
		return "", newError(Code(code), "cannot read the metrics")
	}
	text := C.GoString(ctext)
	C.lease_string_free(ctext)
	return text, nil
}
