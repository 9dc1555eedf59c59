//go:build kubebench

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/procfs"
	"github.com/stasis-run/stasis/kube/agent"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestFleetAtScale is the fleet at scale (scripts/bench-kube.sh), as users
// run it: STASIS_FLEET_ACTORS (100) counter actors created at once on
// three nodes with the default 15 s lease; the API server's requests at
// rest; node-a drained while its agent hangs at a
// release point picked at random (STASIS_FLEET_FAILPOINT to choose one),
// the controller SIGKILLed and started again as soon as the agent hangs;
// then node-c's stasisd SIGKILLed; each component's CPU over each phase.
// It fails when an actor whose state was stored comes back with less than
// it had, and prints the figures.
func TestFleetAtScale(t *testing.T) {
	n := 100
	if v := os.Getenv("STASIS_FLEET_ACTORS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("STASIS_FLEET_ACTORS=%q: want a positive number", v)
		}
	}
	points := []string{agent.FailpointSuspended, agent.FailpointRecorded, agent.FailpointUnbound}
	point := points[rand.IntN(len(points))]
	if v := os.Getenv("STASIS_FLEET_FAILPOINT"); v != "" {
		if !slices.Contains(points, v) {
			t.Fatalf("STASIS_FLEET_FAILPOINT=%q: want one of %v", v, points)
		}
		point = v
	}
	f := newFleetLease(t, "15s")
	ctx := context.Background()
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		f.addNode(name)
	}
	f.template("counter")
	start, placeCPU := time.Now(), f.meterCPU()
	for i := range n {
		a := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("b%03d", i)}, Spec: stasisv1alpha1.ActorSpec{Template: "counter"}}
		if err := f.cp.kube.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	f.awaitAll(n, func(a stasisv1alpha1.Actor) bool { return running(a.Status) }, 20*time.Minute)
	placed, placeCPUs := time.Since(start), placeCPU.percent()

	rest := f.atRest(30 * time.Second)

	// node-a drained under a hung agent, the controller killed meanwhile.
	nodeA := f.nodes["node-a"]
	onA := f.boundTo("node-a")
	want := map[string]string{}
	for _, id := range onA {
		want[id] = f.counter(id, "incr")
	}
	nodeA.agent.kill()
	nodeA.agent.env = []string{"STASIS_KUBE_FAILPOINT=" + point}
	nodeA.agent.start()
	waitForLong(t, "node-a's agent to serve again", time.Minute, func() bool { return nodeA.agent.logHas("agent serving") })
	start, drainCPU := time.Now(), f.meterCPU()
	f.drain("node-a", true)
	waitForLong(t, "node-a's agent to hang at "+point, 5*time.Minute, func() bool { return nodeA.agent.logHas(point) })
	hungAfter := time.Since(start)
	drainCPU.look()
	f.controller.kill()
	f.controller.start()
	f.awaitAll(n, func(a stasisv1alpha1.Actor) bool { return running(a.Status) && a.Status.Node != "node-a" }, 20*time.Minute)
	drained, drainCPUs := time.Since(start), drainCPU.percent()
	var stored, fromTemplate []string
	for _, id := range onA {
		got := f.counter(id, "get")
		copyA, err := nodeA.d.api.InspectActor(ctx, id)
		if err == nil && copyA.State == api.Suspended && copyA.Snapshot != nil && copyA.Snapshot.Stored != "" {
			stored = append(stored, id)
			if got != want[id] {
				t.Errorf("%s: stasisd on node-a stored its suspend (%s) before the agent hung, yet its counter is %s elsewhere, want %s", id, copyA.Snapshot.Stored, got, want[id])
			}
			continue
		}
		// Its release was never handed to stasisd (its eviction came after
		// the agent hung): it starts from what the store holds of it,
		// here nothing, so from its template (what a lost node loses).
		fromTemplate = append(fromTemplate, id)
		if got != want[id] && got != "0" {
			t.Errorf("%s: counter %s elsewhere; want %s or, started from its template, 0", id, got, want[id])
		}
	}
	nodeA.agent.signal(syscall.SIGCONT)
	waitForLong(t, "node-a to remove its copies", 5*time.Minute, func() bool {
		local, err := nodeA.d.api.ListActors(ctx)
		return err == nil && len(local) == 0
	})
	f.drain("node-a", false)

	// node-c's stasisd killed: the node is lost and its actors resume
	// elsewhere.
	nodeC := f.nodes["node-c"]
	onC := f.boundTo("node-c")
	start, lostCPU := time.Now(), f.meterCPU()
	if err := nodeC.d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-nodeC.d.exited
	nodeC.d.cmd = nil
	f.awaitAll(n, func(a stasisv1alpha1.Actor) bool { return running(a.Status) && a.Status.Node != "node-c" }, 20*time.Minute)
	lostC, lostCPUs := time.Since(start), lostCPU.percent()

	res := map[string]any{"actors": n, "nodes": 3, "lease": f.lease, "placeAllS": placed.Seconds(),
		"restRequestsPerS": rest.requestsPerS, "restRequests": rest.byKind, "restCPUPercent": rest.cpu,
		"failpoint": point, "drainedActors": len(onA), "agentHungAfterS": hungAfter.Seconds(), "drainS": drained.Seconds(),
		"keptFromStore": len(stored), "fromTemplate": len(fromTemplate), "lostNodeActors": len(onC), "lostNodeRecoveryS": lostC.Seconds(),
		"placeCPUPercent": placeCPUs, "drainCPUPercent": drainCPUs, "lostNodeCPUPercent": lostCPUs}
	data, _ := json.Marshal(res)
	t.Logf("RESULT %s", data)
	fmt.Printf("| actors | nodes | lease | place all | requests/s at rest | drained (hung at %s) | agent hung after | all running elsewhere (controller killed at the hang) | state kept from the store / started from template | node-c's stasisd killed: actors | all running elsewhere |\n", point)
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Printf("| %d | 3 | %s | %.1f s | %.1f | %d | %.1f s | %.1f s | %d / %d | %d | %.1f s |\n", n, f.lease, placed.Seconds(), rest.requestsPerS,
		len(onA), hungAfter.Seconds(), drained.Seconds(), len(stored), len(fromTemplate), len(onC), lostC.Seconds())
	fmt.Printf("\nAt rest, %s: requests by verb and resource (per second):\n\n| request | per second |\n|---|---|\n", rest.window)
	for _, k := range sortedByValue(rest.byKind) {
		fmt.Printf("| %s | %.2f |\n", k, rest.byKind[k])
	}
	fmt.Printf("\nCPU of each component, in percent of one core, over each phase (a process killed in a phase counts until just before it was):\n\n")
	fmt.Printf("| component | placing %d (%.0f s) | at rest (%s) | the drain, agent hung, controller killed (%.0f s) | node-c's stasisd killed (%.0f s) |\n|---|---|---|---|---|\n",
		n, placed.Seconds(), rest.window, drained.Seconds(), lostC.Seconds())
	for _, k := range sortedByValue(placeCPUs) {
		fmt.Printf("| %s | %.1f %% | %.1f %% | %.1f %% | %.1f %% |\n", k, placeCPUs[k], rest.cpu[k], drainCPUs[k], lostCPUs[k])
	}
}

// restFigures are what the fleet costs while nothing changes.
type restFigures struct {
	window       time.Duration
	requestsPerS float64
	// byKind is requests per second by verb and resource.
	byKind map[string]float64
	// cpu is each component's CPU, in percent of one core.
	cpu map[string]float64
}

// atRest measures, over window with nothing asked of the fleet, the
// requests the API server served (its apiserver_request_total, watches
// left out: they are long-lived) and the CPU of each component.
func (f *fleetEnv) atRest(window time.Duration) restFigures {
	f.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", f.cp.kubeconfig)
	if err != nil {
		f.t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	requests := func() map[string]float64 {
		raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err != nil {
			f.t.Fatal(err)
		}
		return requestTotals(raw)
	}
	req0, cpu := requests(), f.meterCPU()
	time.Sleep(window) // a measuring window, not a wait for anything
	req1, elapsed := requests(), time.Since(cpu.t0)
	r := restFigures{window: window, byKind: map[string]float64{}, cpu: cpu.percent()}
	for k, v := range req1 {
		if d := (v - req0[k]) / elapsed.Seconds(); d > 0 {
			r.byKind[k] = d
			r.requestsPerS += d
		}
	}
	return r
}

// cpuMeter adds up the CPU of each component of the fleet over a phase of
// the run, process by process: one started during the phase counts from
// its start, one killed during it up to the last look (look just before a
// kill).
type cpuMeter struct {
	f  *fleetEnv
	t0 time.Time
	// start and last are each process's ticks at the phase's start and
	// at the last look; component names it at the last look.
	start, last map[int]uint64
	component   map[int]string
}

func (f *fleetEnv) meterCPU() *cpuMeter {
	m := &cpuMeter{f: f, t0: time.Now(), last: map[int]uint64{}, component: map[int]string{}}
	m.look()
	m.start = maps.Clone(m.last)
	return m
}

// look reads the ticks of the fleet's processes now.
func (m *cpuMeter) look() {
	procs, err := procfs.List("/proc")
	if err != nil {
		m.f.t.Fatal(err)
	}
	names := map[int]string{}
	if c := m.f.controller.cmd; c != nil {
		names[c.Process.Pid] = "controller"
	}
	for name, node := range m.f.nodes {
		if c := node.agent.cmd; c != nil {
			names[c.Process.Pid] = "agent " + name
		}
		if c := node.d.cmd; c != nil {
			names[c.Process.Pid] = "stasisd " + name
		}
	}
	for _, p := range procs {
		name := names[p.PID]
		switch {
		case name != "":
		case p.Comm == "kube-apiserver" || p.Comm == "etcd":
			name = p.Comm
		case strings.HasPrefix(p.Comm, "runsc"):
			name = "runsc (every sandbox, gofer and wait)"
		default:
			continue
		}
		m.last[p.PID], m.component[p.PID] = p.CPUTicks, name
	}
}

// percent looks once more and gives each component's CPU since the start,
// in percent of one core.
func (m *cpuMeter) percent() map[string]float64 {
	m.look()
	elapsed := time.Since(m.t0).Seconds()
	out := map[string]float64{}
	for pid, ticks := range m.last {
		out[m.component[pid]] += float64(ticks-min(ticks, m.start[pid])) / ticksPerS / elapsed * 100
	}
	return out
}

// ticksPerS is USER_HZ, the unit of /proc's CPU times.
const ticksPerS = 100

// requestTotals sums the API server's apiserver_request_total by verb and
// resource, watches left out.
func requestTotals(metrics []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "apiserver_request_total{"), "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(val, `"`)
		}
		if l["verb"] == "WATCH" {
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

func sortedByValue(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	return keys
}

// awaitAll waits until n actors satisfy cond.
func (f *fleetEnv) awaitAll(n int, cond func(stasisv1alpha1.Actor) bool, limit time.Duration) {
	f.t.Helper()
	waitForLong(f.t, fmt.Sprintf("%d actors", n), limit, func() bool {
		var list stasisv1alpha1.ActorList
		if err := f.cp.kube.List(context.Background(), &list, client.InNamespace("default")); err != nil {
			return false
		}
		ok := 0
		for _, a := range list.Items {
			if cond(a) {
				ok++
			}
		}
		return ok == n
	})
}
