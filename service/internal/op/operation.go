package op

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
)

// Args are what an operation needs to be finished or rolled back after a
// crash, recorded when it begins.
type Args struct {
	// Previous is the actor's state before the operation.
	Previous api.State `json:"previous,omitempty"`
	// Snapshot is the snapshot the operation writes or reads.
	Snapshot string `json:"snapshot,omitempty"`
	Dir      string `json:"dir,omitempty"`
	Purge    bool   `json:"purge,omitempty"`
	// Force deletes past a network its plugins cannot remove.
	Force bool `json:"force,omitempty"`
}

// Operation is one operation running in this process (or being settled by
// a reconcile): it journals every step before the step starts and reports
// it in the actor's history when it ends.
type Operation struct {
	ID   string
	Kind *Kind
	Args Args
	// Actor is the actor as it stood when the operation began.
	Actor journal.Actor
	r     *Runner
}

// Observer journals the engine's steps of this operation.
func (o *Operation) Observer() engine.Observer {
	return engine.Observer{
		Before: func(st engine.Step) error { return o.before(st.Name) },
		After: func(st engine.Step) {
			var err error
			if st.Err != "" {
				err = errors.New(st.Err)
			}
			o.after(st.Name, st.Message, st.Duration, err)
		},
	}
}

// before journals that the operation is about to run step; when that
// cannot be written, the step does not run (the journal must know where an
// operation stands before it gets there).
func (o *Operation) before(step string) error {
	if err := o.r.journal.Step(context.Background(), o.ID, step); err != nil {
		o.r.cfg.Log.Error("journal step", "actor", o.Actor.ID, "operation", o.ID, "step", step, "error", err)
		return fmt.Errorf("the journal could not record the step: %w", err)
	}
	o.r.failpoint(o.Kind.Name, step, false)
	return nil
}

func (o *Operation) after(step, msg string, d time.Duration, err error) {
	o.r.Event(o.Actor.ID, o.ID, step, msg, d, err)
	if step != "note" {
		o.r.failpoint(o.Kind.Name, step, true)
	}
}

// Step runs one of the service's own steps (bundle, remove-files): journaled
// before it starts, reported when it ends.
func (o *Operation) Step(name string, fn func() (string, error)) error {
	if err := o.before(name); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	start := time.Now()
	msg, err := fn()
	o.after(name, msg, time.Since(start), err)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Note adds a line to the actor's history that is not a step.
func (o *Operation) Note(msg string) { o.after("note", msg, 0, nil) }

// Progress adds a line about a step in progress to the actor's history.
func (o *Operation) Progress(step, msg string) { o.r.Event(o.Actor.ID, o.ID, step, msg, 0, nil) }

// Outcome is where an operation leaves its actor.
type Outcome struct {
	State  api.State
	Reason string
	// Idle: the actor's idle policy paused or suspended it.
	Idle bool
	// ExitCode and ExitedAt: how and when its process ended (KindExit).
	ExitCode int
	ExitedAt time.Time
	// Deleted: the actor is gone.
	Deleted bool
}

// AfterFailure says where a failed operation leaves an actor whose sandbox,
// run by eng, should be running: RUNNING when it is, CRASHED when it is
// gone. A runtime that cannot say where the sandbox stands (it does not
// answer, or cannot tell the sandbox from another) has not said it is
// gone: the actor stays RUNNING, the reason saying so. A fleet actor's
// sandbox found frozen was frozen by the fence (the watchdog's and the
// agent's commands cover operations under way) when the fleet lease
// lapsed: the actor is FENCED, its memory whole, and a renewal that binds
// it here thaws it as it thaws any other.
func (o *Operation) AfterFailure(ctx context.Context, eng *engine.Engine, err error) Outcome {
	sctx, cancel := o.r.Settle(ctx)
	defer cancel()
	st, serr := eng.Status(sctx, o.Actor.Sandbox)
	switch {
	case serr != nil && strings.Contains(err.Error(), serr.Error()):
		// The operation failed on the same question (a sandbox that
		// cannot answer): said once.
		return Outcome{State: api.Running, Reason: fmt.Sprintf("last operation failed: %v; the runtime cannot say where sandbox %s stands for the same reason, so it is taken to run on", err, o.Actor.Sandbox)}
	case serr != nil:
		return Outcome{State: api.Running, Reason: fmt.Sprintf("last operation failed: %v; and the runtime could not say where sandbox %s stands (%v), so it is taken to run on", err, o.Actor.Sandbox, serr)}
	case st == runtime.StatusRunning:
		return Outcome{State: api.Running, Reason: fmt.Sprintf("last operation failed, the actor keeps running: %v", err)}
	case st == runtime.StatusPaused && api.FleetActorID(o.Actor.ID):
		return Outcome{State: api.Fenced, Reason: fmt.Sprintf("last operation failed and its sandbox was found frozen (the fence freezes a fleet actor's sandbox when the fleet lease lapses, an operation's under way too): %v; a renewal that binds it here thaws it, as does a resume without a lease", err)}
	}
	return Outcome{State: api.Crashed, Reason: fmt.Sprintf("the sandbox is %s after a failed operation: %v%s", st, err, Resumable(o.Actor))}
}

// Resumable is what a reason tells the user to do with an actor that has
// stopped: resume it from its last snapshot, or delete it.
func Resumable(a journal.Actor) string {
	if a.Snapshot != "" {
		return fmt.Sprintf("; resume it from its last snapshot %s, or delete it", a.Snapshot)
	}
	return "; delete it"
}
