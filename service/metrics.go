package service

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are stasisd's Prometheus collectors, on their own registry.
type Metrics struct {
	Registry   *prometheus.Registry
	operations *prometheus.CounterVec
	durations  *prometheus.HistogramVec
	last       *lastOperations
}

// newMetrics counts the operations (observe), and at each scrape the
// actors in j by state, where the store stands (store) and the fleet lease
// (lease).
func newMetrics(j *journal.Journal, store func() api.StoreStatus, lease func() api.Lease) *Metrics {
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
	m.last = &lastOperations{byActor: map[string]map[string]lastOperation{}}
	m.Registry.MustRegister(m.operations, m.durations, &actorStates{journal: j, last: m.last}, &storeMetrics{status: store}, &leaseMetrics{lease: lease},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) observe(actor, kind, result string, d time.Duration) {
	m.operations.WithLabelValues(kind, result).Inc()
	m.durations.WithLabelValues(kind).Observe(d.Seconds())
	m.last.record(actor, kind, lastOperation{result: result, seconds: d.Seconds()})
}

// lastOperations holds, per actor and kind, how its last operation of that
// kind ended: the per-actor series of the kinds a dashboard follows.
type lastOperations struct {
	mu      sync.Mutex
	byActor map[string]map[string]lastOperation
}

type lastOperation struct {
	result  string
	seconds float64
}

// perActorKinds are the kinds whose last operation each actor reports:
// what a user waits on (a start, a resume, a wake) and what frees a node.
var perActorKinds = map[string]bool{op.KindRun: true, op.KindResume: true, op.KindSuspend: true, op.KindPause: true}

func (l *lastOperations) record(actor, kind string, last lastOperation) {
	if !perActorKinds[kind] {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byActor[actor] == nil {
		l.byActor[actor] = map[string]lastOperation{}
	}
	l.byActor[actor][kind] = last
}

// of gives the last operations of the actors in ids, and forgets those of
// actors not among them (deleted): the series are bounded by the actors
// this node holds.
func (l *lastOperations) of(ids map[string]bool) map[string]map[string]lastOperation {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]map[string]lastOperation{}
	for actor, kinds := range l.byActor {
		if !ids[actor] {
			delete(l.byActor, actor)
			continue
		}
		out[actor] = maps.Clone(kinds)
	}
	return out
}

// actorStates reads the actors from the journal at each scrape, so that
// no gauge can drift from the truth: their count by state, and per actor
// its state, the operation under way (since when, its deadline) and how
// its last operations of each followed kind ended. The per-actor series
// number a few per actor this node holds.
type actorStates struct {
	journal *journal.Journal
	last    *lastOperations
}

var (
	actorsDesc       = prometheus.NewDesc("stasis_actors", "Actors by state.", []string{"state"}, nil)
	actorStateDesc   = prometheus.NewDesc("stasis_actor_state", "1 for each actor, labelled with its template and its state.", []string{"actor", "template", "state"}, nil)
	actorOpStartDesc = prometheus.NewDesc("stasis_actor_operation_started_timestamp_seconds", "When the operation under way on an actor began (absent when none is).", []string{"actor", "kind", "step"}, nil)
	actorOpDeadDesc  = prometheus.NewDesc("stasis_actor_operation_deadline_timestamp_seconds", "When the operation under way on an actor is cut short and rolled back (absent when none is).", []string{"actor", "kind"}, nil)
	actorLastOpDesc  = prometheus.NewDesc("stasis_actor_last_operation_seconds", "How long an actor's last operation of a kind (run, resume, suspend, pause) took, since stasisd started.", []string{"actor", "kind", "result"}, nil)
	actorMetricDescs = []*prometheus.Desc{actorsDesc, actorStateDesc, actorOpStartDesc, actorOpDeadDesc, actorLastOpDesc}
)

func (c *actorStates) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range actorMetricDescs {
		ch <- d
	}
}

func (c *actorStates) Collect(ch chan<- prometheus.Metric) {
	actors, err := c.journal.Actors(context.Background())
	if err != nil {
		for _, d := range actorMetricDescs {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	counts := map[api.State]int{}
	for _, st := range api.States {
		counts[st] = 0
	}
	ids := map[string]bool{}
	for _, a := range actors {
		counts[api.State(a.State)]++
		ids[a.ID] = true
		ch <- prometheus.MustNewConstMetric(actorStateDesc, prometheus.GaugeValue, 1, a.ID, a.Template, a.State)
		if r := a.Running; r != nil {
			ch <- prometheus.MustNewConstMetric(actorOpStartDesc, prometheus.GaugeValue, unixSeconds(r.StartedAt), a.ID, r.Kind, r.Step)
			if !r.Deadline.IsZero() {
				ch <- prometheus.MustNewConstMetric(actorOpDeadDesc, prometheus.GaugeValue, unixSeconds(r.Deadline), a.ID, r.Kind)
			}
		}
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(actorsDesc, prometheus.GaugeValue, float64(n), string(st))
	}
	for actor, kinds := range c.last.of(ids) {
		for kind, last := range kinds {
			ch <- prometheus.MustNewConstMetric(actorLastOpDesc, prometheus.GaugeValue, last.seconds, actor, kind, last.result)
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

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

// leaseMetrics says at each scrape where the fleet lease stands: when it
// lapses and whether it has (absent while none is held, as on a node of no
// fleet), so that a node whose agent stopped renewing is seen before its
// actors move.
type leaseMetrics struct {
	lease func() api.Lease
}

var (
	leaseExpiryDesc = prometheus.NewDesc("stasis_fleet_lease_expiry_timestamp_seconds", "When this node's fleet lease lapses unless renewed (absent while none is held).", []string{"holder"}, nil)
	leaseLapsedDesc = prometheus.NewDesc("stasis_fleet_lease_lapsed", "1 while this node's fleet lease has lapsed (its fleet actors are fenced), 0 while it holds (absent while none is held).", []string{"holder"}, nil)
)

func (c *leaseMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaseExpiryDesc
	ch <- leaseLapsedDesc
}

func (c *leaseMetrics) Collect(ch chan<- prometheus.Metric) {
	l := c.lease()
	if l.Holder == "" {
		return
	}
	lapsed := 0.0
	if l.Lapsed {
		lapsed = 1
	}
	ch <- prometheus.MustNewConstMetric(leaseExpiryDesc, prometheus.GaugeValue, unixSeconds(l.Until), l.Holder)
	ch <- prometheus.MustNewConstMetric(leaseLapsedDesc, prometheus.GaugeValue, lapsed, l.Holder)
}
