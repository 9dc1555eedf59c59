package ports_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service/internal/ports"
)

// These tests publish ports on 127.0.0.1 for a stand-in actor: a TCP
// server on 127.0.0.2 that answers each line with it, and a state that the
// test moves.

// fakeActor is the actor the ports hand connections to.
type fakeActor struct {
	mu      sync.Mutex
	verdict ports.Verdict
	changed chan struct{}
	wakes   atomic.Int32
	wakeErr error
	notes   []string
	port    int
}

func newFakeActor(t *testing.T) *fakeActor {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "echo %s", line)
			}()
		}
	}()
	return &fakeActor{changed: make(chan struct{}), port: l.Addr().(*net.TCPAddr).Port}
}

func (f *fakeActor) set(v ports.Verdict) {
	f.mu.Lock()
	f.verdict = v
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeActor) config() ports.Config {
	return ports.Config{
		Target: func(context.Context, string) ports.Target {
			f.mu.Lock()
			defer f.mu.Unlock()
			return ports.Target{Verdict: f.verdict, Addr: netip.MustParseAddr("127.0.0.2"), WakeTimeout: 5 * time.Second, Why: "refused"}
		},
		Wake: func(context.Context, string) error {
			f.wakes.Add(1)
			if f.wakeErr != nil {
				f.set(ports.Wake)
				return f.wakeErr
			}
			f.set(ports.Ready)
			return nil
		},
		Changed: func(string) <-chan struct{} {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.changed
		},
		Note: func(_, msg string) {
			f.mu.Lock()
			f.notes = append(f.notes, msg)
			f.mu.Unlock()
		},
	}
}

func publish(t *testing.T, p *ports.Ports, id string, containerPort int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hp := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if _, _, err := p.Publish(id, []api.Port{{HostIP: "127.0.0.1", HostPort: hp, ContainerPort: containerPort}}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", hp)
}

func ask(addr, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintln(c, line)
	reply, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(reply), err
}

func TestConnectionsReachTheActorAndWakeItOnce(t *testing.T) {
	f := newFakeActor(t)
	p := ports.New(f.config())
	t.Cleanup(p.Close)
	f.set(ports.Ready)
	addr := publish(t, p, "a1", f.port)
	if got, err := ask(addr, "hello"); err != nil || got != "echo hello" {
		t.Fatalf("a running actor: %q, %v", got, err)
	}
	f.set(ports.Wake)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if got, err := ask(addr, fmt.Sprint(i)); err != nil || got != fmt.Sprintf("echo %d", i) {
				t.Errorf("a connection held while it wakes: %q, %v", got, err)
			}
		})
	}
	wg.Wait()
	if n := f.wakes.Load(); n != 1 {
		t.Fatalf("%d wakes for 20 connections, want 1", n)
	}
	if _, last, ok := p.Use("a1"); !ok || time.Since(last) > 10*time.Second {
		t.Fatalf("use: last %s, %v; want the connections counted as uses", last, ok)
	}
}

func TestAFailedWakeClosesTheHeldConnections(t *testing.T) {
	f := newFakeActor(t)
	f.wakeErr = errors.New("the snapshot is gone")
	p := ports.New(f.config())
	t.Cleanup(p.Close)
	f.set(ports.Wake)
	addr := publish(t, p, "a1", f.port)
	if got, err := ask(addr, "hello"); err == nil {
		t.Fatalf("a wake that failed answered %q", got)
	}
	if n := f.wakes.Load(); n != 1 {
		t.Fatalf("%d wakes, want 1: a failed wake is not tried again for the same connection", n)
	}
	f.mu.Lock()
	notes := strings.Join(f.notes, "; ")
	f.mu.Unlock()
	if !strings.Contains(notes, "the snapshot is gone") {
		t.Fatalf("the history says %q", notes)
	}
}

func TestHeldConnectionsAreBounded(t *testing.T) {
	f := newFakeActor(t)
	cfg := f.config()
	cfg.MaxHeld = 2
	cfg.Wake = func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
	// A connection looks at the actor once when it arrives and again once
	// it is held.
	looked := make(chan struct{}, 16)
	target := cfg.Target
	cfg.Target = func(ctx context.Context, id string) ports.Target {
		looked <- struct{}{}
		return target(ctx, id)
	}
	p := ports.New(cfg)
	t.Cleanup(p.Close)
	f.set(ports.Wait)
	addr := publish(t, p, "a1", f.port)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	for range 4 {
		<-looked
	}
	if n, _, _ := p.Use("a1"); n != 2 {
		t.Fatalf("%d connections held, want 2", n)
	}
	if _, err := ask(addr, "third"); err == nil {
		t.Fatal("a third connection was held past the bound")
	}
	f.set(ports.Ready)
	for i, c := range held {
		fmt.Fprintln(c, i)
		if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != fmt.Sprintf("echo %d\n", i) {
			t.Fatalf("a held connection once the actor runs: %q, %v", got, err)
		}
	}
}

func TestPublishRefusesATakenPort(t *testing.T) {
	f := newFakeActor(t)
	p := ports.New(f.config())
	t.Cleanup(p.Close)
	addr := publish(t, p, "a1", f.port)
	_, port, _ := strings.Cut(addr, ":")
	var hp int
	fmt.Sscan(port, &hp)
	taken := api.Port{HostIP: "127.0.0.1", HostPort: hp, ContainerPort: 1}
	if _, _, err := p.Publish("a2", []api.Port{taken}); !errors.Is(err, ports.ErrTaken) || !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "a1") {
		t.Fatalf("another actor's port: %v", err)
	}
	if _, added, err := p.Publish("a1", []api.Port{taken}); err != nil || len(added) != 0 {
		t.Fatalf("its own port again: %v, %v", added, err)
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	busy := api.Port{HostIP: "127.0.0.1", HostPort: other.Addr().(*net.TCPAddr).Port, ContainerPort: 1}
	if _, _, err := p.Publish("a3", []api.Port{busy}); !errors.Is(err, ports.ErrTaken) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("a port another process holds: %v", err)
	}
	p.Unpublish("a1", nil)
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("an unpublished port still takes connections")
	}
	if _, _, err := p.Publish("a2", []api.Port{taken}); err != nil {
		t.Fatalf("a port given up, published again: %v", err)
	}
}

// Host port 0 gives each actor a free port of its own, which publishing
// the port as picked (a stasisd that starts again) keeps.
func TestPublishPicksAFreePort(t *testing.T) {
	f := newFakeActor(t)
	p := ports.New(f.config())
	t.Cleanup(p.Close)
	free := api.Port{HostIP: "127.0.0.1", ContainerPort: 8000}
	first, _, err := p.Publish("a1", []api.Port{free, free})
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := p.Publish("a2", []api.Port{free})
	if err != nil {
		t.Fatal(err)
	}
	picked := map[int]bool{}
	for _, port := range append(first, second...) {
		if port.HostPort == 0 || picked[port.HostPort] || port.ContainerPort != 8000 {
			t.Fatalf("published %v and %v: want three distinct host ports for port 8000", first, second)
		}
		picked[port.HostPort] = true
	}
	again, added, err := p.Publish("a1", first)
	if err != nil || len(added) != 0 || !slices.Equal(again, first) {
		t.Fatalf("the picked ports again: %v (added %v), %v; want %v as they are", again, added, err, first)
	}
	if _, _, err := p.Publish("a2", first[:1]); !errors.Is(err, ports.ErrTaken) {
		t.Fatalf("a port picked for a1, asked for by a2: %v", err)
	}
}
