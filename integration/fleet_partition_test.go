package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/stasis-run/stasis/api"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/controller"
)

// TestFleetPartitionFencesTheCutOffNode cuts one node's agent off the API
// server (a TCP proxy between them stops forwarding) while its stasisd
// runs on. The agent renews stasisd's fleet lease no more, and before the
// node's Lease lapses stasisd freezes the actor (FENCED), so that it never
// runs on two nodes (and leaves alone an actor made by hand on the node,
// whose ID no Actor can have):
//   - with the controller down, nobody rebinds it: when the proxy forwards
//     again the agent renews both leases and stasisd thaws the actor, its
//     counter (held in memory only) where it was;
//   - with the controller up, the actor is bound to the other node and
//     started there while the cut-off copy stays frozen; when the proxy
//     forwards again, the agent removes that copy without running it.
func TestFleetPartitionFencesTheCutOffNode(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	f.addNode("node-a")
	proxy := startTCPProxy(t, f.cp.server)
	cut := f.addNodeVia("node-b", proxyConfig(t, f.cp.agentConfig, proxy.addr))
	f.template("counter")
	f.startOn("p1", "node-b") // free to move, still bound to node-b
	f.counter("p1", "incr")
	want := f.counter("p1", "incr")
	stateOf := func(n *fleetNode, id string) api.State {
		a, err := n.d.api.InspectActor(ctx, id)
		if err != nil {
			return ""
		}
		return a.State
	}
	state := func(n *fleetNode) api.State { return stateOf(n, "p1") }
	// An actor made by hand on node-b, whose ID no Actor can have (as the
	// one warming a template): none of the agent's, never paused or removed.
	if _, err := cut.d.api.Run(ctx, api.RunRequest{Template: "counter", ID: "hand_made"}); err != nil {
		t.Fatal(err)
	}

	// A partition with nobody to rebind: fenced, then thawed as it was.
	f.controller.kill()
	proxy.cut()
	waitForLong(t, "node-b to fence p1 as its lease lapses", 30*time.Second, func() bool { return state(cut) == api.Fenced })
	proxy.heal()
	waitForLong(t, "node-b to thaw p1 once its lease is renewed", 30*time.Second, func() bool { return state(cut) == api.Running })
	if got := f.counter("p1", "get"); got != want {
		t.Fatalf("p1's counter after the partition: %s, want %s (it was frozen, not restarted)", got, want)
	}
	if s := f.await("p1", "its status to say it runs again", running); s.Node != "node-b" {
		t.Fatalf("p1 after a partition nobody acted on: %+v", s)
	}
	if st := stateOf(cut, "hand_made"); st != api.Running {
		t.Fatalf("the actor made by hand on node-b is %q after the partition; want it running, left alone", st)
	}

	// A partition the controller acts on: p1 starts on node-a, never while
	// node-b's copy runs.
	f.controller.start()
	proxy.cut()
	f.await("p1", "running on node-a", func(s stasisv1alpha1.ActorStatus) bool {
		if st := state(cut); st == api.Running && s.Node == "node-a" {
			t.Fatalf("p1 bound to node-a while node-b's copy still runs (%+v)", s)
		}
		return running(s) && s.Node == "node-a"
	})
	if st := state(cut); st != api.Fenced {
		t.Fatalf("node-b's copy of p1, bound elsewhere, is %q; want fenced", st)
	}
	proxy.heal()
	waitForLong(t, "node-b to remove its copy", time.Minute, func() bool {
		_, err := cut.d.api.InspectActor(ctx, "p1")
		return err != nil
	})
	cut.d.requireNoSandbox("p1")
	if st := stateOf(cut, "hand_made"); st != api.Running {
		t.Fatalf("the actor made by hand on node-b is %q after node-b removed p1; want it running, left alone", st)
	}
	if !strings.Contains(cut.d.logText(), "kind=fence") || !cut.agent.logHas("removing this node's copy without running it") {
		t.Error("node-b's stasisd did not fence p1, or its agent did not say it removed its copy")
	}
}

// tcpProxy forwards connections on addr to target until cut; heal forwards
// again, on the same address.
type tcpProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func startTCPProxy(t *testing.T, server string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, addr: "127.0.0.1:0", target: u.Host, conns: map[net.Conn]bool{}}
	p.heal()
	t.Cleanup(p.cut)
	return p
}

// heal listens and forwards.
func (p *tcpProxy) heal() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *tcpProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// cut stops listening and closes every forwarded connection.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// proxyConfig writes a copy of the kubeconfig at path whose server is addr.
func proxyConfig(t *testing.T, path, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	out := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFleetPartitionHealsMidRebind heals a partition at each point of a
// rebind: node-b is cut off the API server until its lease lapses, the
// controller stops itself (a test hook, STASIS_KUBE_FAILPOINT) once it
// has raised node-b's epoch, once it has unbound the actor, once it has
// bound it to node-a; then the partition heals, node-b's agent renews
// again, and the controller goes on, placing the actor on node-a or, healed,
// node-b again. A monitor samples both nodes' sandboxes twice a second
// throughout: the actor never runs on both, and the node it is not bound
// to holds no copy. Each
// point is tried STASIS_PARTITION_ITERATIONS times (once by default; 50 for
// the full run), the actor moved back to node-b between tries.
func TestFleetPartitionHealsMidRebind(t *testing.T) {
	iterations := envInt(t, "STASIS_PARTITION_ITERATIONS", 1)
	f := newFleet(t)
	ctx := context.Background()
	f.addNode("node-a")
	proxy := startTCPProxy(t, f.cp.server)
	cut := f.addNodeVia("node-b", proxyConfig(t, f.cp.agentConfig, proxy.addr))
	f.template("counter")
	f.startOn("p1", "node-b") // free to move, still bound to node-b
	m := f.watch([]string{"p1"})
	for i := range iterations {
		for _, point := range []string{controller.FailpointRevoked, controller.FailpointUnbound, controller.FailpointBound} {
			// The point is named in the controller's log only as it stops.
			stopsAt := func() int { return strings.Count(f.controller.logText(), point) }
			stops := stopsAt()
			placed := f.actor("p1").Status.Placement
			f.controller.kill()
			f.controller.env = []string{"STASIS_KUBE_FAILPOINT=" + point}
			f.controller.start()
			proxy.cut()
			waitForLong(t, fmt.Sprintf("try %d: the controller to stop at %s", i, point), time.Minute, func() bool {
				return stopsAt() > stops
			})
			healed := time.Now()
			proxy.heal()
			waitForLong(t, "node-b's agent to renew its stasisd's lease after the heal", time.Minute, func() bool {
				l, err := cut.d.api.Lease(ctx)
				return err == nil && !l.Lapsed && l.Until.After(healed)
			})
			f.controller.signal(syscall.SIGCONT)
			// It runs where the controller places it: node-a, or node-b
			// again once healed (which then thaws its frozen copy, the
			// newest state there is); the other node holds no copy.
			s := f.await("p1", "running again, rebound", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Placement > placed })
			other := cut
			if s.Node == "node-b" {
				other = f.nodes["node-a"]
			}
			waitForLong(t, "the node p1 is not bound to to hold no copy of it", time.Minute, func() bool {
				_, err := other.d.api.InspectActor(ctx, "p1")
				return err != nil
			})
			if v := m.seen(); len(v) > 0 {
				t.Fatalf("try %d, healed at %s: p1 ran on two nodes at once: %v", i, point, v)
			}
			t.Logf("try %d, healed at %s: p1 runs on %s (%s)", i, point, s.Node, s.Reason)
			if s.Node != "node-b" {
				// Back to node-b for the next try.
				f.edit("p1", func(s *stasisv1alpha1.ActorSpec) { s.Node = "node-b" })
				f.await("p1", "running on node-b again", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-b" })
				f.edit("p1", func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })
			}
		}
	}
	if v := m.stop(); len(v) > 0 {
		t.Fatalf("p1 ran on two nodes at once: %v", v)
	}
	t.Logf("%d tries at each of 3 points, %d samples, none with p1 on two nodes", iterations, m.sampled())
}
