package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stasis-run/stasis/api"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/runtime"
)

// TestFleetFencing takes, one at a time, the part of a node that fences its
// actors away, while a monitor samples every node's sandboxes twice a
// second and fails the test on any actor running on two nodes at once.
// Each time the node's actors are started on the other node, and the node,
// once whole again, removes its copies without running them:
//   - its agent stopped (SIGSTOP) for three lease lengths: stasisd's fleet
//     lease lapses and stasisd freezes the actors (FENCED);
//   - its agent killed for three lease lengths, then started again: the
//     same;
//   - its agent cut off from the API server: the same;
//   - its stasisd killed: the agent stops renewing the node's Lease, the
//     actors' status says stasisd does not answer, and the agent freezes
//     their sandboxes with the commands stasisd gave it; the stasisd that
//     starts again finds them frozen (FENCED), not CRASHED;
//   - its agent and stasisd killed together: the fence watchdog stasisd
//     started (stasisd watchdog) freezes the sandboxes when the lease
//     lapses;
//   - its stasisd stopped (SIGSTOP): the same, and the stasisd that is let
//     go fences what the agent froze.
//
// Times to recover (the fault to every actor running on the other node)
// are logged as "RECOVERY" lines for docs/benchmarks.md.
func TestFleetFencing(t *testing.T) {
	const lease = 6 * time.Second
	f := newFleetLease(t, "6s")
	ctx := context.Background()
	proxy := startTCPProxy(t, f.cp.server)
	f.addNode("node-a")
	f.addNodeVia("node-b", proxyConfig(t, f.cp.agentConfig, proxy.addr))
	f.template("counter")
	ids := []string{"x1", "x10", "x2"}
	for _, id := range ids {
		f.createOn(id, "node-b")
	}
	for _, id := range ids {
		f.await(id, "running on node-b", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-b" })
		f.edit(id, func(s *stasisv1alpha1.ActorSpec) { s.Node = "" }) // free to move
	}
	mon := f.watch(ids)
	defer mon.stop()

	other := map[string]string{"node-a": "node-b", "node-b": "node-a"}
	// fault breaks the node the actors run on and returns how to mend it;
	// the actors must then run on the other node, and the node, mended,
	// must remove its copies.
	cases := []struct {
		name  string
		fault func(n *fleetNode) (mend func())
		// check runs while the fault lasts, once the actors run
		// elsewhere.
		check func(n *fleetNode)
	}{
		{"agent stopped (SIGSTOP)", func(n *fleetNode) func() {
			n.agent.signal(syscall.SIGSTOP)
			return func() { n.agent.signal(syscall.SIGCONT) }
		}, func(n *fleetNode) { requireState(t, n, ids, api.Fenced) }},
		{"agent killed", func(n *fleetNode) func() {
			n.agent.kill()
			return n.agent.start
		}, func(n *fleetNode) { requireState(t, n, ids, api.Fenced) }},
		{"API server cut off", func(n *fleetNode) func() {
			proxy.cut()
			return proxy.heal
		}, func(n *fleetNode) { requireState(t, n, ids, api.Fenced) }},
		{"stasisd killed", func(n *fleetNode) func() {
			if err := n.d.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-n.d.exited
			n.d.cmd = nil
			return func() { n.d.start("") }
		}, func(n *fleetNode) {}},
		{"agent and stasisd killed together", func(n *fleetNode) func() {
			// Nothing of Stasis is left on the node but the watchdog
			// stasisd started: it freezes the sandboxes when the lease
			// lapses.
			n.agent.kill()
			if err := n.d.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-n.d.exited
			n.d.cmd = nil
			return func() {
				n.d.start("")
				n.agent.start()
			}
		}, func(n *fleetNode) {}},
		{"stasisd stopped (SIGSTOP)", func(n *fleetNode) func() {
			if err := n.d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := n.d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
		}, func(n *fleetNode) {}},
	}
	var report []string
	for _, c := range cases {
		from := f.actor(ids[0]).Status.Node
		if c.name == "API server cut off" && from != "node-b" {
			t.Fatalf("the actors run on %s; the proxy cuts node-b off", from)
		}
		n, to := f.nodes[from], other[from]
		counts := map[string]string{}
		for _, id := range ids {
			counts[id] = f.counter(id, "incr")
		}
		t.Logf("%s on %s", c.name, from)
		start := time.Now()
		mend := c.fault(n)
		if strings.HasPrefix(c.name, "stasisd") {
			// While stasisd does not answer, the agent says so in the status.
			for _, id := range ids {
				f.await(id, "its status to say that stasisd does not answer", func(s stasisv1alpha1.ActorStatus) bool {
					cond := meta.FindStatusCondition(s.Conditions, stasisv1alpha1.ConditionStasisd)
					return s.Node == to || cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(s.Reason, "does not answer")
				})
			}
		}
		for _, id := range ids {
			f.await(id, "running on "+to, func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == to })
		}
		recovered := time.Since(start)
		fenced := mon.stoppedRunning(from, start)
		c.check(n)
		if rest := lease*3 - time.Since(start); strings.HasPrefix(c.name, "agent") && rest > 0 {
			// The agent stays away three lease lengths in all.
			time.Sleep(rest)
		}
		mend()
		for _, id := range ids {
			waitForLong(t, fmt.Sprintf("%s to remove its copy of %s", from, id), time.Minute, func() bool {
				_, err := n.d.api.InspectActor(ctx, id)
				return err != nil && !strings.Contains(err.Error(), "cannot reach")
			})
			n.d.requireNoSandbox(id)
			// The copy on the other node resumed from the last stored
			// snapshot, or started anew: it runs, and it is the only one.
			if got := f.counter(id, "get"); got == "" {
				t.Fatalf("%s on %s does not count", id, to)
			}
		}
		line := fmt.Sprintf("| %s | %.1f s | %.1f s |", c.name, fenced.Seconds(), recovered.Seconds())
		report = append(report, line)
		t.Logf("RECOVERY %s (counters before: %v)", line, counts)
	}
	if v := mon.stop(); len(v) > 0 {
		t.Fatalf("actors ran on two nodes at once (%d of %d samples):\n%s", len(v), mon.samples, strings.Join(v, "\n"))
	}
	t.Logf("RECOVERY table, lease %s, %d actors, %d samples, none on two nodes:\n| fault | node's copies stopped running after | all running on the other node after |\n|---|---|---|\n%s", lease, len(ids), mon.samples, strings.Join(report, "\n"))
}

// requireState fails unless node n's stasisd has every actor of ids in
// state want.
func requireState(t *testing.T, n *fleetNode, ids []string, want api.State) {
	t.Helper()
	for _, id := range ids {
		a, err := n.d.api.InspectActor(context.Background(), id)
		if err != nil || a.State != want {
			t.Fatalf("%s on %s: %+v %v; want %s", id, n.name, a, err, want)
		}
	}
}

// signal sends sig to the process.
func (p *kubeProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// monitor samples, every half second, which nodes each actor's sandbox runs
// on: runsc's own state of it in each node's runsc root, the truth whether
// or not stasisd answers.
type monitor struct {
	f    *fleetEnv
	ids  []string
	quit chan struct{}
	done chan struct{}

	mu         sync.Mutex
	samples    int
	violations []string
	// lastRunning is when each node last had a sandbox of the actors
	// running.
	lastRunning map[string]time.Time
}

func (f *fleetEnv) watch(ids []string) *monitor {
	m := &monitor{f: f, ids: ids, quit: make(chan struct{}), done: make(chan struct{}), lastRunning: map[string]time.Time{}}
	go func() {
		defer close(m.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.quit:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *monitor) sample() {
	ctx := context.Background()
	now := time.Now()
	nodes := make([]string, 0, len(m.f.nodes))
	for name := range m.f.nodes {
		nodes = append(nodes, name)
	}
	sort.Strings(nodes)
	var found []string
	runningOn := map[string]bool{}
	for _, id := range m.ids {
		var on []string
		for _, name := range nodes {
			st, err := m.f.nodes[name].d.rt.State(ctx, api.SandboxID(id))
			if err == nil && st.Status == runtime.StatusRunning {
				on = append(on, name)
				runningOn[name] = true
			}
		}
		if len(on) > 1 {
			found = append(found, fmt.Sprintf("%s %s runs on %s", now.Format("15:04:05.000"), id, strings.Join(on, " and ")))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	m.violations = append(m.violations, found...)
	for name := range runningOn {
		m.lastRunning[name] = now
	}
}

// stoppedRunning is how long after since node last had one of the actors
// running.
func (m *monitor) stoppedRunning(node string, since time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastRunning[node].Sub(since)
}

// seen are the violations found so far.
func (m *monitor) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.violations)
}

// sampled is how many samples were taken.
func (m *monitor) sampled() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.samples
}

// stop ends the sampling and returns the violations.
func (m *monitor) stop() []string {
	select {
	case <-m.quit:
	default:
		close(m.quit)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.violations
}
