package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/stasis-run/stasis/api"
)

// TestPerActorMetrics: while an operation runs, the actor's series say
// since when and until when it may (its deadline); once it has ended they
// go, and its last operation of the kind says how long it took.
func TestPerActorMetrics(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	release := make(chan struct{})
	e.rt.Hook = func(ctx context.Context, method, _ string) error {
		if method == "Checkpoint" {
			<-release
		}
		return nil
	}
	done := make(chan error, 1)
	before := time.Now()
	go func() {
		_, err := e.svc.Suspend(ctx, api.OpRequest{ID: "a1"})
		done <- err
	}()
	waitForStep(t, e, "a1", "checkpoint")
	series := gather(t, e)
	started, ok := series[`stasis_actor_operation_started_timestamp_seconds{actor="a1",kind="suspend",step="checkpoint"}`]
	if !ok || started < float64(before.Add(-time.Second).Unix()) || started > float64(time.Now().Unix()+1) {
		t.Fatalf("during the suspend: started %v (present %v); the series:\n%s", started, ok, dump(series))
	}
	if deadline := series[`stasis_actor_operation_deadline_timestamp_seconds{actor="a1",kind="suspend"}`]; deadline <= started {
		t.Fatalf("the suspend's deadline %v is not after its start %v", deadline, started)
	}
	if series[`stasis_actor_state{actor="a1",state="SUSPENDING",template="t"}`] != 1 {
		t.Fatalf("a1 is not SUSPENDING in the series:\n%s", dump(series))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	series = gather(t, e)
	for name := range series {
		if strings.HasPrefix(name, "stasis_actor_operation_") {
			t.Fatalf("an operation's series after it ended: %s", name)
		}
	}
	if took, ok := series[`stasis_actor_last_operation_seconds{actor="a1",kind="suspend",result="done"}`]; !ok || took <= 0 {
		t.Fatalf("the last suspend's duration: %v (present %v)\n%s", took, ok, dump(series))
	}
}

// gather reads the service's metrics as "name{labels}" → value, the
// labels in order.
func gather(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	families, err := e.svc.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

func dump(series map[string]float64) string {
	var lines []string
	for name, v := range series {
		if strings.HasPrefix(name, "stasis_actor") {
			lines = append(lines, fmt.Sprintf("%s %g", name, v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestLeaseMetrics: no series without a fleet lease; with one, when it
// lapses and whether it has.
func TestLeaseMetrics(t *testing.T) {
	e := newEnv(t, nil)
	for name := range gather(t, e) {
		if strings.HasPrefix(name, "stasis_fleet_lease") {
			t.Fatalf("a lease series with no lease held: %s", name)
		}
	}
	e.renew(600)
	series := gather(t, e)
	const holder = `{holder="agent on node-a"}`
	if v, ok := series["stasis_fleet_lease_lapsed"+holder]; !ok || v != 0 {
		t.Fatalf("lapsed under a lease that holds: %v (present %v)", v, ok)
	}
	if until := series["stasis_fleet_lease_expiry_timestamp_seconds"+holder]; until < float64(time.Now().Add(500*time.Second).Unix()) {
		t.Fatalf("the lease's expiry %v is not 600 s ahead", until)
	}
	e.lapse()
	if v := gather(t, e)["stasis_fleet_lease_lapsed"+holder]; v != 1 {
		t.Fatalf("lapsed after the lapse: %v", v)
	}
}
