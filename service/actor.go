package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
)

// Actor is an actor as the API shows it.
type Actor struct {
	ID       string `json:"id"`
	Template string `json:"template"`
	State    State  `json:"state"`
	// Reason says why the actor is in its state: what crashed it, why it
	// cold-booted, what a failed operation left behind.
	Reason  string `json:"reason,omitempty"`
	Sandbox string `json:"sandbox"`
	// Snapshot is the actor's latest good snapshot, which resume uses.
	Snapshot  *Snapshot  `json:"snapshot,omitempty"`
	Operation *Operation `json:"operation,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
}

// Operation is an operation in flight, or the last one of a request.
type Operation struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	RequestID string    `json:"requestId,omitempty"`
	State     string    `json:"state"`
	Step      string    `json:"step,omitempty"`
	Error     string    `json:"error,omitempty"`
	StartedAt time.Time `json:"startedAt"`
}

// Snapshot is a snapshot the service made.
type Snapshot struct {
	ID       string `json:"id"`
	Actor    string `json:"actor"`
	Template string `json:"template"`
	// Kind is pause (kept on this node), commit (stored durably) or
	// golden (a template's).
	Kind  string `json:"kind"`
	Scope string `json:"scope"`
	// Dir is the folder on this node ("" when not here); Stored the name
	// in the store ("" when not stored).
	Dir       string    `json:"dir,omitempty"`
	Stored    string    `json:"stored,omitempty"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
}

// Event is one line of an actor's history.
type Event struct {
	Seq       int64     `json:"seq"`
	Operation string    `json:"operation,omitempty"`
	Step      string    `json:"step,omitempty"`
	Message   string    `json:"message,omitempty"`
	Error     string    `json:"error,omitempty"`
	Duration  float64   `json:"durationSeconds"`
	At        time.Time `json:"at"`
}

func snapshotOf(r journal.Snapshot) Snapshot {
	return Snapshot{ID: r.ID, Actor: r.Actor, Template: r.Template, Kind: r.Kind, Scope: r.Scope, Dir: r.Dir, Stored: r.Stored, SizeBytes: r.Size, CreatedAt: r.CreatedAt}
}

// Actor reads an actor with its latest snapshot and running operation.
func (s *Service) Actor(ctx context.Context, id string) (Actor, error) {
	rec, err := s.journal.Actor(ctx, id)
	if err != nil {
		return Actor{}, err
	}
	running, err := s.runningByActor(ctx)
	if err != nil {
		return Actor{}, err
	}
	return s.actorOf(ctx, rec, running), nil
}

// runningByActor reads the operations in flight once, by actor.
func (s *Service) runningByActor(ctx context.Context) (map[string]journal.Operation, error) {
	ops, err := s.journal.Running(ctx)
	if err != nil {
		return nil, err
	}
	running := make(map[string]journal.Operation, len(ops))
	for _, o := range ops {
		running[o.Actor] = o
	}
	return running, nil
}

func (s *Service) actorOf(ctx context.Context, rec journal.Actor, running map[string]journal.Operation) Actor {
	a := Actor{ID: rec.ID, Template: rec.Template, State: State(rec.State), Reason: rec.Reason, Sandbox: rec.Sandbox, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Snapshot != "" {
		if snap, err := s.journal.Snapshot(ctx, rec.Snapshot); err == nil {
			v := snapshotOf(snap)
			a.Snapshot = &v
		}
	}
	if o, ok := running[rec.ID]; ok {
		a.Operation = &Operation{ID: o.ID, Kind: o.Kind, RequestID: o.RequestID, State: o.State, Step: o.Step, StartedAt: o.StartedAt}
	}
	return a
}

// Actors lists every actor.
func (s *Service) Actors(ctx context.Context) ([]Actor, error) {
	recs, err := s.journal.Actors(ctx)
	if err != nil {
		return nil, err
	}
	running, err := s.runningByActor(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Actor, 0, len(recs))
	for _, r := range recs {
		out = append(out, s.actorOf(ctx, r, running))
	}
	return out, nil
}

// Events lists an actor's history after seq.
func (s *Service) Events(ctx context.Context, id string, after int64) ([]Event, error) {
	if _, err := s.journal.Actor(ctx, id); err != nil {
		return nil, err
	}
	recs, err := s.journal.Events(ctx, id, after)
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(recs))
	for _, e := range recs {
		out = append(out, Event{Seq: e.Seq, Operation: e.Operation, Step: e.Step, Message: e.Message, Error: e.Error, Duration: e.Duration.Seconds(), At: e.At})
	}
	return out, nil
}

// Snapshots lists snapshots, of one actor when actor is set.
func (s *Service) Snapshots(ctx context.Context, actor string) ([]Snapshot, error) {
	recs, err := s.journal.Snapshots(ctx, actor)
	if err != nil {
		return nil, err
	}
	out := make([]Snapshot, 0, len(recs))
	for _, r := range recs {
		out = append(out, snapshotOf(r))
	}
	return out, nil
}

// Snapshot reads one snapshot.
func (s *Service) Snapshot(ctx context.Context, id string) (Snapshot, error) {
	r, err := s.journal.Snapshot(ctx, id)
	return snapshotOf(r), err
}

// opArgs are what an operation needs to be finished or rolled back after a
// crash, recorded when it begins.
type opArgs struct {
	// Previous is the actor's state before the operation.
	Previous State `json:"previous,omitempty"`
	// Snapshot is the snapshot the operation writes or reads.
	Snapshot string `json:"snapshot,omitempty"`
	Dir      string `json:"dir,omitempty"`
	Purge    bool   `json:"purge,omitempty"`
}

// operation is one running operation in this process.
type operation struct {
	id, actor, kind string
	args            opArgs
}

// outcome is where an operation leaves its actor.
type outcome struct {
	state  State
	reason string
	// deleted: the actor is gone.
	deleted bool
}

// run begins an operation and runs body, which must leave the actor in a
// stable state. A retried request (same actor, kind and request id) waits
// for the first one and answers as it did.
func (s *Service) run(ctx context.Context, start journal.Start, args opArgs, body func(context.Context, *operation) (outcome, error)) (Actor, error) {
	var err error
	if start.Op.Args, err = json.Marshal(args); err != nil {
		return Actor{}, err
	}
	start.Op.ID = newID("op")
	rec, replay, err := s.journal.Begin(ctx, start)
	if err != nil {
		return Actor{}, err
	}
	if replay {
		return s.replay(ctx, rec)
	}
	o := &operation{id: rec.ID, actor: rec.Actor, kind: rec.Kind, args: args}
	done := make(chan struct{})
	s.mu.Lock()
	s.current[o.actor] = o
	s.done[o.id] = done
	s.mu.Unlock()
	// The operation outlives its caller: a client that goes away does not
	// cut a suspend in half, and its retry finds the result.
	ctx = context.WithoutCancel(ctx)
	started := time.Now()
	out, opErr := body(ctx, o)
	state, errText := journal.OpDone, ""
	if opErr != nil {
		state, errText = journal.OpFailed, opErr.Error()
	}
	actorState := string(out.state)
	if out.deleted {
		actorState = ""
	}
	endErr := s.journal.End(ctx, o.id, state, errText, o.actor, actorState, out.reason)
	s.metrics.observe(o.kind, state, time.Since(started))
	s.mu.Lock()
	delete(s.current, o.actor)
	delete(s.done, o.id)
	s.mu.Unlock()
	close(done)
	if endErr != nil {
		return Actor{}, fmt.Errorf("journal the end of %s %s: %w", o.kind, o.id, endErr)
	}
	if out.deleted {
		return Actor{ID: o.actor, State: Deleting}, opErr
	}
	a, err := s.Actor(ctx, o.actor)
	if err != nil {
		return a, err
	}
	return a, opErr
}

func (s *Service) replay(ctx context.Context, rec journal.Operation) (Actor, error) {
	s.mu.Lock()
	done := s.done[rec.ID]
	s.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return Actor{}, ctx.Err()
		}
		var err error
		if rec, err = s.journal.Operation(ctx, rec.ID); err != nil && !errors.Is(err, journal.ErrNotFound) {
			return Actor{}, err
		}
	}
	a, err := s.Actor(ctx, rec.Actor)
	if errors.Is(err, journal.ErrNotFound) && rec.Kind == "delete" {
		return Actor{ID: rec.Actor, State: Deleting}, nil
	}
	if err != nil {
		return a, err
	}
	if rec.State == journal.OpFailed {
		return a, fmt.Errorf("%s %s (request %s) failed: %s", rec.Kind, rec.Actor, rec.RequestID, rec.Error)
	}
	return a, nil
}

// sandboxState is the runtime's view of an actor's sandbox; a sandbox the
// runtime does not know is reported as stopped.
func (s *Service) sandboxState(ctx context.Context, sandbox string) (runtime.Status, error) {
	st, err := s.rt.State(ctx, sandbox)
	if errors.Is(err, runtime.ErrNotFound) {
		return runtime.StatusStopped, nil
	}
	return st.Status, err
}

// afterFailure says where a failed operation leaves an actor whose sandbox
// should be running: RUNNING when it is, CRASHED when it is gone.
func (s *Service) afterFailure(ctx context.Context, sandbox string, err error) outcome {
	st, serr := s.sandboxState(ctx, sandbox)
	if serr == nil && st == runtime.StatusRunning {
		return outcome{state: Running, reason: fmt.Sprintf("last operation failed, the actor keeps running: %v", err)}
	}
	return outcome{state: Crashed, reason: fmt.Sprintf("the sandbox is %s after a failed operation: %v", orUnknown(st, serr), err)}
}

func orUnknown(st runtime.Status, err error) string {
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return string(st)
}

func removeDir(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// ExecRequest runs a command in a running actor.
type ExecRequest struct {
	ID   string   `json:"id"`
	Args []string `json:"args"`
}

// ExecResult is how the command ended.
type ExecResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// Exec runs a command inside a RUNNING actor's sandbox and waits for it.
func (s *Service) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	if len(req.Args) == 0 {
		return ExecResult{}, fmt.Errorf("%w: exec needs a command", ErrInvalid)
	}
	a, err := s.journal.Actor(ctx, req.ID)
	if err != nil {
		return ExecResult{}, err
	}
	if State(a.State) != Running {
		return ExecResult{}, &journal.StateError{Actor: a.ID, State: a.State, Kind: "exec", From: []string{string(Running)}}
	}
	res, err := s.rt.Exec(ctx, a.Sandbox, runtime.Process{Args: req.Args})
	return ExecResult{ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}, err
}
