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
	"log/slog"
	"net"
	"net/netip"
	"slices"
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
	// Changed is closed when something about actor id may have changed
	// (an event in its history, an operation's end): held connections
	// look again.
	Changed func(id string) <-chan struct{}
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

// Publish listens on ports for actor id, each at once. It returns the
// ports as published (a host port 0 replaced by the free one the node
// picked) and those this call bound (a port the actor holds already is
// left as it is), or binds none and says which port is taken and by whom.
func (p *Ports) Publish(id string, ports []api.Port) (published, added []api.Port, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.actors[id]
	if a == nil {
		a = newActor(id)
	}
	var bound []net.Listener
	undo := func() {
		for _, l := range bound {
			l.Close()
		}
	}
	for _, port := range ports {
		addr := hostAddr(port)
		if owner, ok := p.owners[addr]; ok && port.HostPort != 0 {
			if owner == id {
				published = append(published, port)
				continue
			}
			undo()
			return nil, nil, fmt.Errorf("%w: %s is published for actor %s; give this actor another host port", ErrTaken, addr, owner)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			undo()
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, nil, fmt.Errorf("%w: %s is in use by another process on this node; give the actor another host port", ErrTaken, addr)
			}
			return nil, nil, errdefs.Mark(fmt.Errorf("publish %s: %w", addr, err), errdefs.ErrInvalidArgument)
		}
		port.HostPort = l.Addr().(*net.TCPAddr).Port
		bound = append(bound, l)
		added = append(added, port)
		published = append(published, port)
	}
	p.actors[id] = a
	for i, port := range added {
		addr := hostAddr(port)
		p.owners[addr] = id
		a.listeners[addr], a.ports[addr] = bound[i], port
		go p.serve(a, bound[i], port)
	}
	return published, added, nil
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
		if ports != nil && !slices.Contains(ports, a.ports[addr]) {
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
