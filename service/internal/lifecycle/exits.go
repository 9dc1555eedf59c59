package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/tick"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
)

// DefaultExitCheck is how often stasisd looks for RUNNING actors whose
// process nothing waits on yet.
const DefaultExitCheck = time.Second

// waitRetry is how long a sandbox whose wait failed, while it ran on, is
// left before it is waited on again.
const waitRetry = 10 * time.Second

// exitWatch is what waits on the actors' processes.
type exitWatch struct {
	mu sync.Mutex
	// ctx is KeepWatchingExits's: nothing is waited on before it is set.
	ctx context.Context
	// watched holds the actors waited on; after, when those whose wait
	// failed while they ran on, or whose runtime cannot wait, are waited
	// on again.
	watched map[string]bool
	after   map[string]time.Time
	// restarts are the restart policies' (restart.go).
	restarts restarts
}

func newExitWatch() *exitWatch {
	return &exitWatch{watched: map[string]bool{}, after: map[string]time.Time{}, restarts: newRestarts()}
}

// KeepWatchingExits waits, until ctx ends, on the process of every RUNNING
// actor whose runtime can say when it ends (runsc wait): when one ends on
// its own, not stopped by an operation, the actor becomes EXITED with its
// exit code and time (CRASHED when a signal ended it), in its history at
// once; its template's restart policy then boots it again (restart.go).
// An operation that leaves an actor RUNNING starts its wait as it ends
// (watchRunning); every interval the journal is read for any other.
func (s *Actors) KeepWatchingExits(ctx context.Context, interval time.Duration) {
	s.exits.mu.Lock()
	s.exits.ctx = ctx
	s.exits.mu.Unlock()
	tick.Every(ctx, interval, func() {
		actors, err := s.runner.ActorRecords(ctx)
		if err != nil {
			return
		}
		running, all := map[string]bool{}, map[string]bool{}
		var ended []journal.Actor
		for _, a := range actors {
			all[a.ID] = true
			switch state := api.State(a.State); {
			case a.Running != nil:
			case state == api.Running:
				running[a.ID] = true
				s.watchRunning(a)
			case state == api.Exited || state == api.Crashed:
				ended = append(ended, a)
			}
		}
		s.restartEnded(ctx, ended, all)
		s.exits.mu.Lock()
		defer s.exits.mu.Unlock()
		for id := range s.exits.after {
			if !running[id] {
				delete(s.exits.after, id)
			}
		}
	})
}

// Ended is told of each actor as an operation left it: one left RUNNING is
// waited on from then, so that an end that comes at once is seen with its
// exit code.
func (s *Actors) Ended(a journal.Actor) {
	if api.State(a.State) == api.Running {
		s.watchRunning(a)
	}
}

// watchRunning starts the wait on RUNNING actor a's process, unless one
// runs or is not due.
func (s *Actors) watchRunning(a journal.Actor) {
	w := s.exits
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.watched[a.ID] || time.Now().Before(w.after[a.ID]) {
		return
	}
	w.watched[a.ID] = true
	delete(w.after, a.ID)
	ctx := w.ctx
	go func() {
		again := s.watchExit(ctx, a)
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.watched, a.ID)
		w.after[a.ID] = again
	}()
}

// watchExit waits on actor a's sandbox until its process ends and records
// how. It returns when the actor may be waited on again: never (the zero
// time) once its process ended or an operation stopped it, later when the
// wait failed while the sandbox ran on, or when its runtime cannot wait.
func (s *Actors) watchExit(ctx context.Context, a journal.Actor) time.Time {
	eng := s.engines.Of(a)
	exit, err := eng.Wait(ctx, a.Sandbox)
	known := err == nil
	switch {
	case ctx.Err() != nil:
		return time.Time{}
	case errors.Is(err, engine.ErrCannotWait):
		return time.Now().Add(24 * time.Hour)
	case err != nil:
		if st, serr := eng.Status(ctx, a.Sandbox); serr != nil || st != runtime.StatusStopped {
			s.cfg.Log.Debug("waiting on an actor's process failed; it runs on", "actor", a.ID, "error", err.Error())
			return time.Now().Add(waitRetry)
		}
	}
	if rec, rerr := s.runner.ActorRecord(ctx, a.ID); rerr != nil || rec.Running != nil || api.State(rec.State) != api.Running {
		// An operation stopped the sandbox (a suspend's checkpoint), or
		// the actor is gone: not an exit of its own.
		return time.Time{}
	}
	_, rerr := s.runner.Run(ctx, op.Request{Kind: op.Exit, Actor: a.ID,
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			if o.Actor.Sandbox != a.Sandbox {
				// Not this sandbox's end: as it was.
				return op.Outcome{State: api.Running, Reason: o.Actor.Reason}, nil
			}
			st, serr := eng.Status(ctx, o.Actor.Sandbox)
			switch {
			case known && serr == nil && st != runtime.StatusStopped:
				// The process ended and its sandbox runs on: a micro-VM,
				// whose agent outlives the workload. It ends with its
				// process, as a gVisor sandbox does.
				if err := eng.Runtime.Stop(ctx, o.Actor.Sandbox); err != nil {
					return op.Outcome{}, fmt.Errorf("its process ended; stopping its sandbox: %w", err)
				}
			case serr != nil || st != runtime.StatusStopped:
				return op.Outcome{State: api.Running, Reason: o.Actor.Reason}, nil
			}
			out := exitOutcome(exit, known, time.Now())
			o.Note(out.Reason) // in the history, when it happens
			return out, nil
		}})
	var busy *journal.BusyError
	var state *journal.StateError
	if rerr != nil && !errors.As(rerr, &busy) && !errors.As(rerr, &state) && !errors.Is(rerr, journal.ErrNotFound) {
		s.cfg.Log.Warn("an actor's exit was not recorded", "actor", a.ID, "error", rerr.Error())
	}
	return time.Time{}
}

// exitOutcome is where a process that ended at at leaves its actor: EXITED
// with its code, CRASHED when a signal ended it; known is false when the
// runtime could not say how it ended.
func exitOutcome(exit runtime.Exit, known bool, at time.Time) op.Outcome {
	when := at.UTC().Format(time.RFC3339)
	if !known {
		return op.Outcome{State: api.Exited, ExitCode: api.ExitUnknown, ExitedAt: at, Reason: "its process exited at " + when + "; how is unknown (it ended while nothing waited on it)"}
	}
	if sig := exit.Signal(); sig > 0 {
		return op.Outcome{State: api.Crashed, ExitCode: exit.Status, ExitedAt: at,
			Reason: fmt.Sprintf("its process was killed by signal %d (exit status %d) at %s; resume starts it from its latest snapshot", sig, exit.Status, when)}
	}
	return op.Outcome{State: api.Exited, ExitCode: exit.Status, ExitedAt: at,
		Reason: fmt.Sprintf("its process exited with code %d at %s", exit.Status, when)}
}
