package ports

// The connections: each handed to its actor, or held while the actor wakes.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
)

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
		changed := p.cfg.Changed(a.id)
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
