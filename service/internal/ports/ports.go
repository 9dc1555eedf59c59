// Package ports publishes actors' ports on the node: stasisd listens on
// each published host port for as long as its actor lives here, and hands
// every TCP connection to the actor. A connection that arrives while the
// actor is paused or suspended is held, not refused: one wake is started
// for all that wait, and each is handed over once the actor runs. Nothing
// of the protocol is read, so any TCP protocol works.
package ports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

// Verdict is what a connection for an actor does now.
type Verdict int

const (
	// Ready: the actor runs; the connection is handed to it.
	Ready Verdict = iota
	// Wake: the actor is paused or suspended; the connection is held and
	// the actor woken.
	Wake
	// Wait: an operation runs on the actor; the connection is held until
	// it ends.
	Wait
	// Refuse: the connection is closed (the actor is gone, fenced, or
	// cannot be woken); Why says why.
	Refuse
)

// Target is where an actor stands for its connections.
type Target struct {
	Verdict Verdict
	// Addr is the actor's address (Ready).
	Addr netip.Addr
	Why  string
	// WakeTimeout bounds how long a connection is held.
	WakeTimeout time.Duration
}

// Config is what the published ports run with.
type Config struct {
	Log *slog.Logger
	// Target says where actor id stands.
	Target func(ctx context.Context, id string) Target
	// Wake resumes actor id; nil also when another operation took it
	// meanwhile (Target then says where it ends).
	Wake func(ctx context.Context, id string) error
	// Changed is closed when something about an actor may have changed
	// (an event in any actor's history): held connections look again.
	Changed func() <-chan struct{}
	// Note adds a line to actor id's history.
	Note func(id, msg string)
	// MaxHeld bounds the connections held per actor while it wakes;
	// DefaultMaxHeld when zero.
	MaxHeld int
}

// DefaultMaxHeld is how many connections an actor's ports hold while it
// wakes, at most, unless configured otherwise.
const DefaultMaxHeld = 256

// dialTimeout bounds a connection to an actor that runs.
const dialTimeout = 10 * time.Second

// Ports are the published ports of this node's actors. Safe for
// concurrent use.
type Ports struct {
	cfg Config

	mu sync.Mutex
	// actors are the published actors, by id; owners the actor holding
	// each host address.
	actors map[string]*actor
	owners map[string]string
}

// actor is one actor's published ports and what its connections do.
type actor struct {
	id        string
	listeners map[string]net.Listener
	ports     map[string]api.Port

	mu sync.Mutex
	// active counts the connections handed to it; held those waiting;
	// open are the active ones, the client's end to the actor's.
	active, held int
	open         map[net.Conn]net.Conn
	// last is when a connection or an exec last used it.
	last time.Time
	// waking is the wake under way, nil when none is.
	waking *wakeRun
	// noted is when closed held connections were last noted.
	noted time.Time
}

// New publishes nothing yet.
func New(cfg Config) *Ports {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	return &Ports{cfg: cfg, actors: map[string]*actor{}, owners: map[string]string{}}
}

// hostAddr is where a port listens on the node.
func hostAddr(p api.Port) string {
	return net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort))
}

// ErrTaken marks a host port that another actor or process holds.
var ErrTaken = errdefs.New(errdefs.ErrAlreadyExists, "host port taken")

// Publish listens on ports for actor id, each at once: it returns those
// this call bound (a port the actor holds already is left as it is), or
// binds none and says which port is taken and by whom.
func (p *Ports) Publish(id string, ports []api.Port) ([]api.Port, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.actors[id]
	if a == nil {
		a = newActor(id)
	}
	var added []api.Port
	var bound []net.Listener
	undo := func() {
		for _, l := range bound {
			l.Close()
		}
	}
	for _, port := range ports {
		addr := hostAddr(port)
		if owner, ok := p.owners[addr]; ok {
			if owner == id {
				continue
			}
			undo()
			return nil, fmt.Errorf("%w: %s is published for actor %s; give this actor another host port", ErrTaken, addr, owner)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			undo()
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%w: %s is in use by another process on this node; give the actor another host port", ErrTaken, addr)
			}
			return nil, errdefs.Mark(fmt.Errorf("publish %s: %w", addr, err), errdefs.ErrInvalidArgument)
		}
		bound = append(bound, l)
		added = append(added, port)
	}
	p.actors[id] = a
	for i, port := range added {
		addr := hostAddr(port)
		p.owners[addr] = id
		a.listeners[addr], a.ports[addr] = bound[i], port
		go p.serve(a, bound[i], port)
	}
	return added, nil
}

// Unpublish stops listening on ports of actor id; nil: on all of them,
// and its use is forgotten (the actor is gone). Connections handed over
// already go on.
func (p *Ports) Unpublish(id string, ports []api.Port) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.actors[id]
	if a == nil {
		return
	}
	for addr, l := range a.listeners {
		if ports != nil && !contains(ports, a.ports[addr]) {
			continue
		}
		l.Close()
		delete(a.listeners, addr)
		delete(a.ports, addr)
		delete(p.owners, addr)
	}
	a.mu.Lock()
	unused := a.active+a.held == 0
	a.mu.Unlock()
	if ports == nil || len(a.listeners) == 0 && unused {
		delete(p.actors, id)
	}
}

func contains(ports []api.Port, p api.Port) bool {
	for _, q := range ports {
		if q == p {
			return true
		}
	}
	return false
}

// Close stops listening on every port.
func (p *Ports) Close() {
	p.mu.Lock()
	ids := make([]string, 0, len(p.actors))
	for id := range p.actors {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.Unpublish(id, nil)
	}
}

// Use says how actor id is used: the connections handed to it now and
// when it was last used (a connection, an exec: Touch).
func (p *Ports) Use(id string) (active int, last time.Time, ok bool) {
	p.mu.Lock()
	a := p.actors[id]
	p.mu.Unlock()
	if a == nil {
		return 0, time.Time{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.active + a.held, a.last, true
}

// Disconnect ends the connections handed to actor id (its clients see a
// reset), as its sandbox is about to stop: a connection left open would
// wait for a process that is gone until the actor came back.
func (p *Ports) Disconnect(id string) {
	p.mu.Lock()
	a := p.actors[id]
	p.mu.Unlock()
	if a == nil {
		return
	}
	a.mu.Lock()
	open := make([]net.Conn, 0, 2*len(a.open))
	for client, backend := range a.open {
		open = append(open, client, backend)
	}
	a.mu.Unlock()
	for _, c := range open {
		closeReset(c)
	}
}

// Touch records a use of actor id other than a connection (an exec),
// published ports or not.
func (p *Ports) Touch(id string) {
	p.mu.Lock()
	a := p.actors[id]
	if a == nil {
		a = newActor(id)
		p.actors[id] = a
	}
	p.mu.Unlock()
	a.mu.Lock()
	a.last = time.Now()
	a.mu.Unlock()
}

func newActor(id string) *actor {
	return &actor{id: id, listeners: map[string]net.Listener{}, ports: map[string]api.Port{}, open: map[net.Conn]net.Conn{}, last: time.Now()}
}

func (p *Ports) serve(a *actor, l net.Listener, port api.Port) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return // closed by Unpublish
		}
		go p.handle(a, conn, port)
	}
}

// handle hands conn to the actor, holding it while the actor wakes.
func (p *Ports) handle(a *actor, conn net.Conn, port api.Port) {
	ctx := context.Background()
	t := p.cfg.Target(ctx, a.id)
	if t.Verdict != Ready {
		if !a.hold(p.cfg.MaxHeld) {
			p.cfg.Log.Warn("a connection was refused: too many are held while the actor wakes", "actor", a.id, "held", p.cfg.MaxHeld, "from", conn.RemoteAddr().String())
			closeReset(conn)
			return
		}
		t = p.await(ctx, a, t)
		a.release()
		if t.Verdict != Ready {
			p.cfg.Log.Info("a held connection was closed", "actor", a.id, "why", t.Why)
			closeReset(conn)
			return
		}
	}
	backend, err := net.DialTimeout("tcp", netip.AddrPortFrom(t.Addr, uint16(port.ContainerPort)).String(), dialTimeout)
	if err != nil {
		p.cfg.Log.Warn("the actor did not take a connection", "actor", a.id, "port", port.ContainerPort, "error", err.Error())
		closeReset(conn)
		return
	}
	a.begin(conn, backend)
	defer a.end(conn)
	pipe(conn, backend)
}

// await holds a connection until the actor runs, waking it when it is
// paused or suspended, for at most the wake timeout; it returns where the
// actor stands then.
func (p *Ports) await(ctx context.Context, a *actor, t Target) Target {
	timeout := t.WakeTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var run *wakeRun
	for {
		// Taken before the look, so that a change after it is not missed.
		changed := p.cfg.Changed()
		t = p.cfg.Target(ctx, a.id)
		var woke <-chan struct{}
		switch t.Verdict {
		case Ready, Refuse:
			return t
		case Wake:
			if run != nil && run.ended() && run.err != nil {
				// The wake this connection waited on failed: it is not
				// tried again for it.
				why := fmt.Sprintf("held connections were closed: the wake failed: %v", run.err)
				a.noteOnce(p, why)
				return Target{Verdict: Refuse, Why: why}
			}
			run = a.wake(p, timeout)
			woke = run.done
		}
		select {
		case <-woke:
		case <-changed:
		case <-deadline.C:
			why := fmt.Sprintf("held connections were closed: the actor did not run within the wake timeout of %s", timeout)
			a.noteOnce(p, why)
			return Target{Verdict: Refuse, Why: why}
		}
	}
}

// wakeRun is one wake of an actor: done is closed when it ends, err then
// says how.
type wakeRun struct {
	done chan struct{}
	err  error
}

func (w *wakeRun) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// wake starts one resume of the actor for every connection waiting on it,
// or joins the one under way.
func (a *actor) wake(p *Ports, timeout time.Duration) *wakeRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waking != nil {
		return a.waking
	}
	run := &wakeRun{done: make(chan struct{})}
	a.waking = run
	go func() {
		p.cfg.Note(a.id, "a connection arrived on its published ports: waking it")
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		run.err = p.cfg.Wake(ctx, a.id)
		cancel()
		a.mu.Lock()
		a.waking = nil
		a.mu.Unlock()
		close(run.done)
	}()
	return run
}

// noteOnce notes why held connections were closed, once however many
// were held together.
func (a *actor) noteOnce(p *Ports, why string) {
	a.mu.Lock()
	first := time.Since(a.noted) > time.Second
	if first {
		a.noted = time.Now()
	}
	a.mu.Unlock()
	if first {
		p.cfg.Note(a.id, why)
	}
}

func (a *actor) hold(max int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held >= max {
		return false
	}
	a.held++
	a.last = time.Now()
	return true
}

func (a *actor) release() {
	a.mu.Lock()
	a.held--
	a.mu.Unlock()
}

func (a *actor) begin(conn, backend net.Conn) {
	a.mu.Lock()
	a.active++
	a.open[conn] = backend
	a.last = time.Now()
	a.mu.Unlock()
}

func (a *actor) end(conn net.Conn) {
	a.mu.Lock()
	a.active--
	delete(a.open, conn)
	a.last = time.Now()
	a.mu.Unlock()
}

// pipe copies both ways until both ends are done, passing each half-close
// on.
func pipe(client, backend net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if c, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Go(func() { half(backend, client) })
	wg.Go(func() { half(client, backend) })
	wg.Wait()
	client.Close()
	backend.Close()
}

// closeReset closes conn so that the client sees a reset at once rather
// than waiting for an answer.
func closeReset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}
