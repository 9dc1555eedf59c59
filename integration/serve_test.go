package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/network"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/testactor"
	"github.com/stasis-run/stasis/testkit/testcni"
)

// These tests run stasisd with runsc's own network (each actor in a
// namespace of its own on Stasis's CNI bridge) and clients on the host
// that reach the actors at 127.0.0.1 through their published ports, or at
// their addresses on the bridge.

// servingDaemon is a stasisd whose actors get networks.
func servingDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	d := newDaemon(t, append([]string{"--network", "sandbox"}, extra...)...)
	d.start("")
	return d
}

// releaseNetworks tears down the networks a test's stasisd left set up
// (actors not deleted): their namespaces unmounted, their addresses given
// back.
func releaseNetworks(t *testing.T, data string) {
	entries, err := os.ReadDir(filepath.Join(data, "netns"))
	if err != nil || len(entries) == 0 {
		return
	}
	m, err := network.New(network.Config{NetnsDir: filepath.Join(data, "netns"), CNI: network.CNIConfig{
		ConfDir: "/etc/cni/net.d", Network: network.DefaultNetwork, BinDirs: network.DefaultBinDirs, CacheDir: filepath.Join(data, "cni")}})
	if err != nil {
		t.Log(err)
		return
	}
	for _, e := range entries {
		if err := m.Teardown(context.Background(), e.Name(), network.Attachment{Mode: network.ModeCNI}); err != nil {
			t.Log(err)
		}
	}
}

// servingTemplate records a template whose counter answers over TCP on
// port 8000, published at 127.0.0.1:hostPort (none when 0).
func (d *daemon) servingTemplate(name string, hostPort int, tweak func(*api.Template)) api.Template {
	d.t.Helper()
	return d.template(name, func(t *api.Template) {
		t.Bundle, t.Durable = testactor.Bundle(d.t, d.t.TempDir(), testactor.Options{Listen: ":8000"}), nil
		if hostPort != 0 {
			t.Ports = []api.Port{{HostIP: "127.0.0.1", HostPort: hostPort, ContainerPort: 8000}}
		}
		if tweak != nil {
			tweak(t)
		}
	})
}

// served runs actor id of a template (tweak) whose counter is published on
// a free port of 127.0.0.1, counts once through it, and returns the
// published address and the counter's process id.
func (d *daemon) served(id string, tweak func(*api.Template)) (published, process string) {
	d.t.Helper()
	hp := freePort(d.t)
	d.servingTemplate("t-"+id, hp, tweak)
	d.run("t-"+id, id)
	published = net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	process, _ = mustAsk(d.t, published, "incr")
	return published, process
}

// ask sends the counter at addr a line and returns its answer, or the
// error the connection ended with.
func ask(addr, line string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintln(conn, line)
	reply, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(reply), err
}

func mustAsk(t *testing.T, addr, line string) (id string, value int) {
	t.Helper()
	reply, err := ask(addr, line)
	if err != nil {
		t.Fatalf("%s to %s: %v", line, addr, err)
	}
	id, v, _ := strings.Cut(reply, " ")
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s to %s: answer %q", line, addr, reply)
	}
	return id, n
}

// awaitState waits, watching the actor's history, until it is in state
// with no operation running.
func (d *daemon) awaitState(id string, state api.State) api.Actor {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got api.Actor
	err := d.api.Watch(ctx, id, 0, func(api.Event) {
		if a, err := d.api.InspectActor(ctx, id); err == nil && a.State == state && a.Operation == nil {
			got = a
			cancel()
		}
	})
	if got.ID != "" {
		return got
	}
	if a, err := d.api.InspectActor(context.Background(), id); err == nil && a.State == state && a.Operation == nil {
		return a
	}
	d.t.Fatalf("actor %s never reached %s: %v", id, state, err)
	return api.Actor{}
}

// events are the steps and messages of actor id's history.
func (d *daemon) events(id string) []api.Event {
	d.t.Helper()
	ev, err := d.api.Events(context.Background(), id, 0)
	if err != nil {
		d.t.Fatal(err)
	}
	return ev.Events
}

func countSteps(events []api.Event, step, says string) int {
	n := 0
	for _, e := range events {
		if e.Step == step && strings.Contains(e.Message, says) {
			n++
		}
	}
	return n
}

// TestPublishedPortsWakeTheActor: an actor published on 127.0.0.1 answers
// there and at its own address; paused, suspended, and after stasisd was
// killed while it was suspended, a connection wakes it and the same
// process answers, counting on; 50 connections at once on a suspended
// actor make one resume and are all served; a deleted actor's port and
// namespace are gone.
func TestPublishedPortsWakeTheActor(t *testing.T) {
	d := servingDaemon(t)
	hp := freePort(t)
	d.servingTemplate("srv", hp, nil)
	a := d.run("srv", "s1")
	if a.Network == nil || a.Network.Mode != network.ModeCNI || a.Network.Address == "" || len(a.Network.Ports) != 1 {
		t.Fatalf("the actor's network: %+v", a.Network)
	}
	published := net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	own := net.JoinHostPort(a.Network.Address, "8000")
	id, n := mustAsk(t, published, "incr")
	if n != 1 {
		t.Fatalf("first answer %d", n)
	}
	if gotID, gotN := mustAsk(t, own, "get"); gotID != id || gotN != 1 {
		t.Fatalf("at its own address: %s %d", gotID, gotN)
	}

	d.op("Pause", "s1")
	if gotID, gotN := mustAsk(t, published, "incr"); gotID != id || gotN != 2 {
		t.Fatalf("woken from PAUSED: %s %d, want %s 2", gotID, gotN, id)
	}
	if got := d.inspect("s1"); got.State != api.Running || got.Network.Address != a.Network.Address {
		t.Fatalf("after the wake: %s at %s, want RUNNING at %s", got.State, got.Network.Address, a.Network.Address)
	}

	d.op("Suspend", "s1")
	wakesBefore := countSteps(d.events("s1"), "wake", "waking it")
	var wg sync.WaitGroup
	values := make(chan int, 50)
	for range 50 {
		wg.Go(func() {
			reply, err := ask(published, "incr")
			gotID, v, _ := strings.Cut(reply, " ")
			n, _ := strconv.Atoi(v)
			if err != nil || gotID != id {
				t.Errorf("a connection to the suspended actor: %q, %v", reply, err)
			}
			values <- n
		})
	}
	wg.Wait()
	close(values)
	seen := map[int]bool{}
	for v := range values {
		seen[v] = true
	}
	if len(seen) != 50 {
		t.Fatalf("%d distinct answers of 50: each connection counts once", len(seen))
	}
	for v := 3; v <= 52; v++ {
		if !seen[v] {
			t.Fatalf("no connection got %d: the counter went on from 2 to 52", v)
		}
	}
	if wakes := countSteps(d.events("s1"), "wake", "waking it") - wakesBefore; wakes != 1 {
		t.Fatalf("%d wakes for 50 connections, want 1", wakes)
	}

	// Killed while suspended: the next stasisd publishes the port again.
	d.op("Suspend", "s1")
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.cmd = nil
	if _, err := ask(published, "get"); err == nil {
		t.Fatal("the port answered with stasisd dead")
	}
	d.start("")
	if gotID, gotN := mustAsk(t, published, "incr"); gotID != id || gotN != 53 {
		t.Fatalf("after stasisd was killed and started again: %s %d, want %s 53", gotID, gotN, id)
	}

	netns := filepath.Join(d.data, "netns", "s1")
	if _, err := os.Stat(netns); err != nil {
		t.Fatalf("the actor's namespace: %v", err)
	}
	d.op("Delete", "s1")
	if _, err := ask(published, "get"); err == nil {
		t.Fatal("a deleted actor's port still answers")
	}
	if _, err := os.Stat(netns); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a deleted actor's namespace is left: %v", err)
	}
}

// TestPortRefusals: a host port another actor publishes, one another
// process holds, and one out of range are refused with the cause, and
// nothing is made.
func TestPortRefusals(t *testing.T) {
	d := servingDaemon(t)
	hp := freePort(t)
	d.servingTemplate("srv", hp, nil)
	d.run("srv", "s1")
	ctx := context.Background()
	_, err := d.api.Run(ctx, api.RunRequest{Template: "srv", ID: "s2"})
	if !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "actor s1") {
		t.Fatalf("a second actor on the same host port: %v, want already_exists naming s1", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	d.servingTemplate("bare", 0, nil)
	_, err = d.api.Run(ctx, api.RunRequest{Template: "bare", ID: "s3", Ports: []api.Port{{HostIP: "127.0.0.1", HostPort: takenPort, ContainerPort: 8000}}})
	if !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("a host port another process holds: %v", err)
	}
	_, err = d.api.Run(ctx, api.RunRequest{Template: "bare", ID: "s4", Ports: []api.Port{{HostPort: 70000, ContainerPort: 8000}}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("port 70000: %v, want invalid_argument", err)
	}
	_, err = d.api.Run(ctx, api.RunRequest{Template: "bare", ID: "s5", Network: api.Network{Mode: network.ModeNone}, Ports: []api.Port{{HostIP: "127.0.0.1", HostPort: freePort(t), ContainerPort: 8000}}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "network mode none") {
		t.Fatalf("ports without an address: %v", err)
	}
	for _, id := range []string{"s2", "s3", "s4", "s5"} {
		if _, err := d.api.InspectActor(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("refused actor %s: %v, want not found", id, err)
		}
	}
	// The refused runs left s1's port published.
	if _, n := mustAsk(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)), "incr"); n != 1 {
		t.Fatalf("s1 after the refusals: %d", n)
	}
}

// TestIdleActorIsSuspendedAndWoken: an actor idle past its template's
// idle.after is suspended with the reason in its history, its GPU and
// memory freed; the next connection wakes it and the same process
// answers.
func TestIdleActorIsSuspendedAndWoken(t *testing.T) {
	d := servingDaemon(t)
	published, id := d.served("i1", func(t *api.Template) { t.Idle = &api.Idle{After: "2s", Then: api.IdleSuspend} })
	d.awaitState("i1", api.Suspended)
	if n := countSteps(d.events("i1"), "idle", "idle for 2s"); n != 1 {
		t.Fatalf("%d idle notes in its history, want 1", n)
	}
	d.requireNoSandbox("i1")
	if gotID, n := mustAsk(t, published, "incr"); gotID != id || n != 2 {
		t.Fatalf("woken after the idle suspend: %s %d, want %s 2", gotID, n, id)
	}
}

// TestAWakeThatFailsClosesHeldConnections: an actor whose snapshot is
// gone cannot be woken; a connection held for it is closed (the client
// sees its end, not a hang) and the actor's history says why.
func TestAWakeThatFailsClosesHeldConnections(t *testing.T) {
	d := servingDaemon(t, "--no-store")
	published, _ := d.served("f1", nil)
	a := d.op("Suspend", "f1")
	if err := os.RemoveAll(a.Snapshot.Dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if reply, err := ask(published, "get"); err == nil {
		t.Fatalf("a wake that cannot work answered %q", reply)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the held connection ended after %s", took)
	}
	if n := countSteps(d.events("f1"), "wake", "waking it"); n != 1 {
		t.Fatalf("%d wakes", n)
	}
	if got := d.inspect("f1"); got.State != api.Suspended || !strings.Contains(got.Reason, "resume failed") {
		t.Fatalf("after the failed wake: %s (%s)", got.State, got.Reason)
	}
}

// TestSuspendWithAConnectionOpen: a connection open through a published
// port when the actor is suspended ends cleanly (the client sees its end,
// not a hang), and the next connection wakes the actor.
func TestSuspendWithAConnectionOpen(t *testing.T) {
	d := servingDaemon(t)
	published, id := d.served("o1", nil)
	open, err := net.Dial("tcp", published)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	fmt.Fprintln(open, "wait")
	r := bufio.NewReader(open)
	if got, err := r.ReadString('\n'); err != nil || got != id+" waiting\n" {
		t.Fatalf("a connection kept open: %q, %v", got, err)
	}
	d.op("Suspend", "o1")
	_ = open.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection open across the suspend: %v, want its end", err)
	}
	if gotID, n := mustAsk(t, published, "incr"); gotID != id || n != 2 {
		t.Fatalf("after the suspend: %s %d, want %s 2", gotID, n, id)
	}
}

// TestAMovedActorAnswersAtItsNewNode: an actor suspended on one stasisd and
// started from its stored snapshot on another (as a fleet moves it) gets
// that node's address and its own published port there; the same process
// answers, counting on.
func TestAMovedActorAnswersAtItsNewNode(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	// The shared store is made once, as an operator would with `stasis
	// store init`.
	if _, err := location.Repository(context.Background(), store, true); err != nil {
		t.Fatal(err)
	}
	a := servingDaemon(t, "--repo", store)
	b := servingDaemon(t, "--repo", store)
	hpA, hpB := freePort(t), freePort(t)
	a.servingTemplate("srv", hpA, nil)
	b.servingTemplate("srv", hpB, nil)
	first := a.run("srv", "m1")
	id, _ := mustAsk(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(hpA)), "incr")
	suspended := a.op("Suspend", "m1")
	moved, err := b.api.Run(context.Background(), api.RunRequest{Template: "srv", ID: "m1", FromStored: suspended.Snapshot.Stored})
	if err != nil || moved.State != api.Running {
		t.Fatalf("started from the stored snapshot on the other node: %+v, %v", moved, err)
	}
	if moved.Network == nil || moved.Network.Address == "" || moved.Network.Address == first.Network.Address {
		t.Fatalf("the moved actor's address %+v, the first's %s: want one of its own", moved.Network, first.Network.Address)
	}
	if gotID, n := mustAsk(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(hpB)), "incr"); gotID != id || n != 2 {
		t.Fatalf("on the other node: %s %d, want %s 2", gotID, n, id)
	}
	if gotID, n := mustAsk(t, net.JoinHostPort(moved.Network.Address, "8000"), "get"); gotID != id || n != 2 {
		t.Fatalf("at its new address: %s %d", gotID, n)
	}
	a.op("Delete", "m1")
	b.op("Delete", "m1")
}

// TestKilledWhileWaking: stasisd killed during the resume a held
// connection started: the client sees its connection end; the next
// stasisd settles the actor, publishes its port again (bound once), and
// the next connection wakes it and the same process answers.
func TestKilledWhileWaking(t *testing.T) {
	d := servingDaemon(t)
	published, id := d.served("k1", nil)
	d.op("Suspend", "k1")
	d.stop()
	d.start(service.Failpoint(service.KindResume, engine.StepRestore, false))
	if reply, err := ask(published, "incr"); err == nil {
		t.Fatalf("a connection held by a stasisd that died answered %q", reply)
	}
	d.crashed()
	d.start("")
	if a := d.inspect("k1"); a.State != api.Suspended || a.Operation != nil {
		t.Fatalf("after the restart: %s, operation %+v; want SUSPENDED, the wake rolled back", a.State, a.Operation)
	}
	if gotID, n := mustAsk(t, published, "incr"); gotID != id || n != 2 {
		t.Fatalf("woken after the restart: %s %d, want %s 2", gotID, n, id)
	}
}

// TestKilledDuringAnIdleSuspend: stasisd killed while it suspends an idle
// actor: after the restart the actor is stable, its port published again,
// and a request is served by the same process.
func TestKilledDuringAnIdleSuspend(t *testing.T) {
	d := newDaemon(t, "--network", "sandbox")
	d.start(service.Failpoint(service.KindSuspend, engine.StepCheckpoint, true))
	published, id := d.served("k2", func(t *api.Template) { t.Idle = &api.Idle{After: "3s", Then: api.IdleSuspend} })
	d.crashed()
	d.start("")
	a := d.inspect("k2")
	if a.Operation != nil || (a.State != api.Running && a.State != api.Suspended) {
		t.Fatalf("after the restart: %s, operation %+v", a.State, a.Operation)
	}
	if gotID, n := mustAsk(t, published, "incr"); gotID != id || n != 2 {
		t.Fatalf("after the restart: %s %d, want %s 2", gotID, n, id)
	}
}

// TestCNIPluginsThatDoNotAnswer: a CNI plugin that waits on what does not
// come (its daemon, a lock another holds) is stopped at --cni-timeout, and
// the run fails saying so (deadline_exceeded), where it held the actor in
// STARTING up to the run's deadline (half an hour). The actor is CRASHED
// with that cause, no operation held; its delete leaves nothing of it, its
// host port free again.
func TestCNIPluginsThatDoNotAnswer(t *testing.T) {
	h := testcni.NewHanging(t)
	d := servingDaemon(t, "--cni-conf-dir", h.ConfDir, "--cni-network", h.Network, "--cni-bin-dir", h.BinDir, "--cni-timeout", "2s")
	hp := freePort(t)
	d.servingTemplate("srv", hp, nil)
	ctx := context.Background()
	const cause = "its plugins (hangs) did not attach within 2s"
	_, err := d.api.Run(ctx, api.RunRequest{Template: "srv", ID: "s1", Network: api.Network{Mode: network.ModeCNI}})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), cause) {
		t.Fatalf("run on a network whose plugin does not answer: %v", err)
	}
	h.Stopped(t, "ADD")
	if a := d.inspect("s1"); a.State != api.Crashed || a.Operation != nil || !strings.Contains(a.Reason, cause) {
		t.Fatalf("the actor whose run failed: %+v", a)
	}
	if _, err := d.api.Delete(ctx, api.DeleteRequest{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	d.goneWithItsNetwork("s1", hp)
}

// goneWithItsNetwork fails the test unless actor id is deleted, no
// namespace is left, and its host port hp is free again.
func (d *daemon) goneWithItsNetwork(id string, hp int) {
	d.t.Helper()
	if _, err := d.api.InspectActor(context.Background(), id); !errors.Is(err, errdefs.ErrNotFound) {
		d.t.Fatalf("the deleted actor %s: %v, want not found", id, err)
	}
	if left, _ := os.ReadDir(filepath.Join(d.data, "netns")); len(left) != 0 {
		d.t.Fatalf("the deleted actor %s left %d namespace(s)", id, len(left))
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)))
	if err != nil {
		d.t.Fatalf("the deleted actor %s's host port %d is still held: %v", id, hp, err)
	}
	l.Close()
}

// TestForcedDeletePastItsNetwork: an actor whose CNI plugins never answer
// DEL cannot be deleted: each delete fails at --cni-timeout saying so, and
// names the way out; a forced delete (rm --force) deletes it, gives up its
// ports, removes its namespace and says what the plugins may still hold.
func TestForcedDeletePastItsNetwork(t *testing.T) {
	h := testcni.NewHanging(t)
	d := servingDaemon(t, "--cni-conf-dir", h.ConfDir, "--cni-network", h.Network, "--cni-bin-dir", h.BinDir, "--cni-timeout", "2s")
	hp := freePort(t)
	d.servingTemplate("srv", hp, nil)
	ctx := context.Background()
	if _, err := d.api.Run(ctx, api.RunRequest{Template: "srv", ID: "s1", Network: api.Network{Mode: network.ModeCNI}}); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("run on a network whose plugin does not answer: %v", err)
	}
	h.HangDel(t)
	_, err := d.api.Delete(ctx, api.DeleteRequest{ID: "s1"})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not detach within 2s") || !strings.Contains(err.Error(), "rm --force") {
		t.Fatalf("delete past plugins that never answer DEL: %v", err)
	}
	h.Stopped(t, "DEL")
	if a := d.inspect("s1"); a.State != api.Crashed || a.Operation != nil {
		t.Fatalf("the actor whose delete failed: %+v", a)
	}
	out := d.cli("actor", "rm", "--force", "s1")
	if !strings.Contains(out, "deleted s1") || !strings.Contains(out, "its network, forced past") || !strings.Contains(out, "did not detach within 2s") {
		t.Fatalf("rm --force said:\n%s", out)
	}
	h.Stopped(t, "DEL")
	d.goneWithItsNetwork("s1", hp)
}
