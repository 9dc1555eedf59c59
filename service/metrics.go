package service

import (
	"context"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are stasisd's Prometheus collectors, on their own registry.
type Metrics struct {
	Registry   *prometheus.Registry
	operations *prometheus.CounterVec
	durations  *prometheus.HistogramVec
}

// newMetrics counts the operations (observe), and at each scrape the
// actors in j by state and where the store stands (store).
func newMetrics(j *journal.Journal, store func() api.StoreStatus) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stasis_operations_total", Help: "Operations on actors that ended, by kind and result (done or failed).",
		}, []string{"kind", "result"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stasis_operation_duration_seconds", Help: "How long operations on actors took, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"kind"}),
	}
	m.Registry.MustRegister(m.operations, m.durations, &actorStates{journal: j}, &storeMetrics{status: store},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) observe(kind, result string, d time.Duration) {
	m.operations.WithLabelValues(kind, result).Inc()
	m.durations.WithLabelValues(kind).Observe(d.Seconds())
}

// actorStates counts actors by state from the journal at each scrape, so
// the gauge can never drift from the truth.
type actorStates struct{ journal *journal.Journal }

var actorsDesc = prometheus.NewDesc("stasis_actors", "Actors by state.", []string{"state"}, nil)

func (c *actorStates) Describe(ch chan<- *prometheus.Desc) { ch <- actorsDesc }

func (c *actorStates) Collect(ch chan<- prometheus.Metric) {
	actors, err := c.journal.Actors(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(actorsDesc, err)
		return
	}
	counts := map[api.State]int{}
	for _, st := range api.States {
		counts[st] = 0
	}
	for _, a := range actors {
		counts[api.State(a.State)]++
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(actorsDesc, prometheus.GaugeValue, float64(n), string(st))
	}
}

// storeMetrics says at each scrape whether the store is in reach and what
// its backend did about failures, so that an operator sees a flaky link
// before it fails an operation.
type storeMetrics struct{ status func() api.StoreStatus }

var (
	storeUpDesc      = prometheus.NewDesc("stasis_store_up", "1 while the snapshot store is open, 0 while it is out of reach (absent without a store).", []string{"store"}, nil)
	storeRetriesDesc = prometheus.NewDesc("stasis_store_retries_total", "Store calls tried again after a transient failure.", []string{"store"}, nil)
	storeResumedDesc = prometheus.NewDesc("stasis_store_resumed_reads_total", "Store reads broken in the middle (a reset, a stall) and resumed where they stopped.", []string{"store"}, nil)
	storeStallsDesc  = prometheus.NewDesc("stasis_store_stalls_total", "Store reads cancelled for making no progress.", []string{"store"}, nil)
	storeRereadDesc  = prometheus.NewDesc("stasis_store_reread_bytes_total", "Bytes asked for again by resumed reads.", []string{"store"}, nil)
)

func (c *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{storeUpDesc, storeRetriesDesc, storeResumedDesc, storeStallsDesc, storeRereadDesc} {
		ch <- d
	}
}

func (c *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	if !st.Configured {
		return
	}
	up := 0.0
	if st.Available {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, up, st.Location)
	for d, v := range map[*prometheus.Desc]int64{storeRetriesDesc: st.Retries, storeResumedDesc: st.ResumedReads, storeStallsDesc: st.Stalls, storeRereadDesc: st.BytesReread} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), st.Location)
	}
}
