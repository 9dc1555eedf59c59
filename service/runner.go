package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
)

// opArgs are what an operation needs to be finished or rolled back after a
// crash, recorded when it begins.
type opArgs struct {
	// Previous is the actor's state before the operation.
	Previous api.State `json:"previous,omitempty"`
	// Snapshot is the snapshot the operation writes or reads.
	Snapshot string `json:"snapshot,omitempty"`
	Dir      string `json:"dir,omitempty"`
	Purge    bool   `json:"purge,omitempty"`
}

// operation is one operation running in this process (or being settled by
// Reconcile): it journals every step before the step starts and reports it
// in the actor's history when it ends.
type operation struct {
	s    *Service
	id   string
	kind *opKind
	args opArgs
	// actor is the actor as it stood when the operation began.
	actor journal.Actor
}

// observer journals the engine's steps of this operation.
func (o *operation) observer() engine.Observer {
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
func (o *operation) before(step string) error {
	if err := o.s.journal.Step(context.Background(), o.id, step); err != nil {
		o.s.cfg.Log.Error("journal step", "actor", o.actor.ID, "operation", o.id, "step", step, "error", err)
		return fmt.Errorf("the journal could not record the step: %w", err)
	}
	o.s.failpoint(o.kind.name, step, false)
	return nil
}

func (o *operation) after(step, msg string, d time.Duration, err error) {
	o.s.event(o.actor.ID, o.id, step, msg, d, err)
	if step != "note" {
		o.s.failpoint(o.kind.name, step, true)
	}
}

// step runs one of the service's own steps (bundle, remove-files): journaled
// before it starts, reported when it ends.
func (o *operation) step(name string, fn func() (string, error)) error {
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

// note adds a line to the actor's history that is not a step.
func (o *operation) note(msg string) { o.after("note", msg, 0, nil) }

// progress adds a line about a step in progress to the actor's history.
func (o *operation) progress(step, msg string) { o.s.event(o.actor.ID, o.id, step, msg, 0, nil) }

// outcome is where an operation leaves its actor.
type outcome struct {
	state  api.State
	reason string
	// deleted: the actor is gone.
	deleted bool
}

// request is what a caller asks of run.
type request struct {
	kind      *opKind
	actor     string
	requestID string
	// create is the actor to make (run).
	create *journal.Actor
	// prepare makes the operation's arguments from the actor as Begin
	// found it, inside Begin's transaction.
	prepare func(before journal.Actor) (opArgs, error)
	// body does the work and must leave the actor in a stable state; its
	// context carries the operation's deadline.
	body func(context.Context, *operation) (outcome, error)
}

// run is the one place where an operation begins, runs and ends. Begin
// decides, in one journal transaction, whether the request is a retry (it
// then waits for the first one and answers as it did), whether the actor is
// busy (aborted, naming the operation and step), whether the actor is in a
// state the kind starts from (failed precondition), and records the
// arguments; the body runs to its end even when the caller goes away, but
// not past the kind's deadline, whose expiry fails and rolls back the
// operation like any other failure; End records the outcome and the
// error's category in one transaction, the disk reserve making sure it can.
func (s *Service) run(ctx context.Context, r request) (journal.Actor, error) {
	k := r.kind
	deadline := s.deadline(k)
	opID := newID("op")
	done := make(chan struct{})
	s.mu.Lock()
	s.done[opID] = done
	s.mu.Unlock()
	finished := func() {
		s.mu.Lock()
		delete(s.done, opID)
		s.mu.Unlock()
		close(done)
	}
	var args opArgs
	start := journal.Start{
		Op: journal.Operation{ID: opID, Actor: r.actor, Kind: k.name, RequestID: r.requestID, Deadline: time.Now().Add(deadline)},
		To: string(k.during), From: k.fromStrings(), Create: r.create,
		Args: func(before journal.Actor) ([]byte, error) {
			if r.prepare != nil {
				var err error
				if args, err = r.prepare(before); err != nil {
					return nil, err
				}
			}
			return json.Marshal(args)
		},
	}
	// The end of the actor's last operation, if the journal could not
	// record it, is recorded first: until it is, the journal holds the
	// actor busy with an operation that has ended.
	_, err := s.unsettled.write(ctx, s.journal, r.actor)
	var b journal.Began
	if err == nil {
		b, err = s.journal.Begin(ctx, start)
	}
	if err != nil {
		finished()
		s.cfg.Log.Info("operation refused", "kind", k.name, "actor", r.actor, "request", r.requestID, "code", errdefs.Code(err), "error", err.Error())
		return journal.Actor{}, err
	}
	if b.Replay {
		finished()
		return s.replay(ctx, b.Op)
	}
	defer finished()
	o := &operation{s: s, id: opID, kind: k, args: args, actor: b.Actor}
	s.cfg.Log.Info("operation started", "kind", k.name, "actor", r.actor, "operation", opID, "request", r.requestID, "from", b.Actor.State, "deadline", deadline.String())
	// The operation outlives its caller: a client that goes away does not
	// cut a suspend in half, and its retry finds the result.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadline)
	began := time.Now()
	out, opErr := r.body(octx, o)
	if opErr != nil && errors.Is(octx.Err(), context.DeadlineExceeded) {
		step := "?"
		if rec, err := s.journal.Operation(context.Background(), opID); err == nil {
			step = rec.Step
		}
		opErr = errdefs.Mark(fmt.Errorf("%s of %s ran past its deadline of %s at step %s and was rolled back (raise it with --deadline %s=DURATION): %w", k.name, r.actor, deadline, step, k.name, opErr), errdefs.ErrDeadlineExceeded)
	}
	cancel()
	end := journal.End{OpID: opID, State: journal.OpDone, Actor: r.actor, ActorState: string(out.state), Reason: out.reason}
	if opErr != nil {
		end.State, end.Error, end.ErrorCode = journal.OpFailed, opErr.Error(), errdefs.Code(opErr)
	}
	if out.deleted {
		end.ActorState = ""
	}
	a, endErr := s.journal.End(context.WithoutCancel(ctx), end)
	if out.deleted && errors.Is(endErr, journal.ErrNotFound) {
		endErr = nil
	}
	s.metrics.observe(k.name, end.State, time.Since(began))
	level := slog.LevelInfo
	if opErr != nil {
		level = slog.LevelWarn
	}
	s.cfg.Log.Log(ctx, level, "operation ended", "kind", k.name, "actor", r.actor, "operation", opID, "result", end.State, "state", end.ActorState,
		"duration", time.Since(began).String(), "code", end.ErrorCode, "error", end.Error)
	if endErr != nil {
		// The operation has ended: the actor is in a stable state, which
		// its record says once the end is written (unsettledEnds).
		s.unsettled.add(end)
		s.cfg.Log.Warn("the end of an operation could not be recorded; it is written again every second", "kind", k.name, "actor", r.actor, "operation", opID, "error", endErr)
		rec, err := s.actorRecord(context.WithoutCancel(ctx), r.actor)
		if err != nil {
			return journal.Actor{}, fmt.Errorf("journal the end of %s %s: %w", k.name, opID, endErr)
		}
		return rec, opErr
	}
	return a, opErr
}

// deadline is how long an operation of kind k may run.
func (s *Service) deadline(k *opKind) time.Duration {
	if d, ok := s.cfg.Deadlines[k.name]; ok && d > 0 {
		return d
	}
	return k.deadline
}

// replay answers a retried request as the first one did: it waits for the
// first to end if it still runs in this process, then gives the actor as
// it stands and the first one's error, with its category.
func (s *Service) replay(ctx context.Context, rec journal.Operation) (journal.Actor, error) {
	s.mu.Lock()
	done := s.done[rec.ID]
	s.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return journal.Actor{}, ctx.Err()
		}
		var err error
		if rec, err = s.journal.Operation(ctx, rec.ID); err != nil {
			return journal.Actor{}, err
		}
	}
	a, err := s.journal.Actor(ctx, rec.Actor)
	if err != nil && !(rec.Kind == opDelete.name && errors.Is(err, journal.ErrNotFound)) {
		return a, err
	}
	if rec.State == journal.OpFailed {
		return a, errdefs.FromCode(rec.ErrorCode, fmt.Sprintf("%s of %s (request %s) failed: %s", rec.Kind, rec.Actor, rec.RequestID, rec.Error))
	}
	return a, nil
}

// settle is a context for the checks and rollbacks after a failure: the
// operation's own may have run out at its deadline.
func (s *Service) settle(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.cleanupTimeout())
}
