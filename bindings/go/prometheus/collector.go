// Package prometheus hands the lease metrics to client_golang (a module of its own, so that
// only the programs that want Prometheus depend on it):
//
//	prometheus.MustRegister(leaseprom.NewCollector())
//
// Every scrape reads lease.Metrics() (the numbers the core keeps for every language) and
// yields them as constant metrics with the names and labels `lease run --metrics` serves.
package prometheus

import (
	"sort"

	lease "github.com/lease-dev/lease/bindings/go"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector of this process's lease metrics.
type Collector struct{}

// NewCollector returns a Collector to register with a prometheus.Registerer.
func NewCollector() *Collector { return &Collector{} }

// Describe sends nothing: the lease metrics' label values come and go (an unchecked collector).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends every lease metric as it is now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	families, err := lease.Metrics()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("lease_metrics_error", err.Error(), nil, nil), err)
		return
	}
	for _, f := range families {
		for _, s := range f.Samples {
			names := make([]string, 0, len(s.Labels))
			for k := range s.Labels {
				names = append(names, k)
			}
			sort.Strings(names)
			values := make([]string, len(names))
			for i, k := range names {
				values[i] = s.Labels[k]
			}
			name := f.Name
			switch f.Type {
			case "counter":
				desc := prometheus.NewDesc(name, f.Help, names, nil)
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, s.Value, values...)
			case "gauge":
				desc := prometheus.NewDesc(name, f.Help, names, nil)
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, s.Value, values...)
			case "histogram":
				desc := prometheus.NewDesc(name, f.Help, names, nil)
				buckets := make(map[float64]uint64, len(s.Buckets))
				for _, b := range s.Buckets {
					buckets[b[0]] = uint64(b[1])
				}
				ch <- prometheus.MustNewConstHistogram(desc, s.Count, s.Sum, buckets, values...)
			}
		}
	}
}
