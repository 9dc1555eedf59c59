package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
)

// Actor reads an actor with its latest snapshot and running operation.
func (s *Actors) Actor(ctx context.Context, id string) (api.Actor, error) {
	rec, err := s.runner.ActorRecord(ctx, id)
	if err != nil {
		return api.Actor{}, err
	}
	return op.ActorOf(rec), nil
}

// Actors lists every actor.
func (s *Actors) Actors(ctx context.Context) ([]api.Actor, error) {
	recs, err := s.runner.ActorRecords(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Actor, 0, len(recs))
	for _, r := range recs {
		out = append(out, op.ActorOf(r))
	}
	return out, nil
}

// Events lists an actor's history after a sequence number, and where it
// ends.
func (s *Actors) Events(ctx context.Context, req api.EventsRequest) (api.Events, error) {
	limit := 0
	if req.ID == "" {
		limit = api.MaxEventsPage
	} else if _, err := s.journal.Actor(ctx, req.ID); err != nil {
		return api.Events{}, err
	}
	recs, last, err := s.journal.Events(ctx, req.ID, req.After, limit)
	if err != nil {
		return api.Events{}, err
	}
	out := api.Events{Events: make([]api.Event, 0, len(recs)), Last: last}
	for _, e := range recs {
		out.Events = append(out.Events, api.Event{Seq: e.Seq, Actor: e.Actor, Operation: e.Operation, Step: e.Step, Message: e.Message, Error: e.Error, Duration: e.Duration.Seconds(), At: e.At})
	}
	return out, nil
}

// Snapshots lists snapshots, of one actor when actor is set.
func (s *Actors) Snapshots(ctx context.Context, actor string) ([]api.Snapshot, error) {
	recs, err := s.journal.Snapshots(ctx, actor)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(recs))
	for _, r := range recs {
		out = append(out, op.SnapshotOf(r))
	}
	return out, nil
}

// Snapshot reads one snapshot.
func (s *Actors) Snapshot(ctx context.Context, id string) (api.Snapshot, error) {
	r, err := s.journal.Snapshot(ctx, id)
	return op.SnapshotOf(r), err
}

// WatchEvents sends an actor's history after req.After to send, oldest
// first, then each event as it is added, until ctx ends, send fails, the
// actor is deleted (nil) or stasisd stops (StopWatching: unavailable).
// With no actor named, every actor's, until ctx ends or stasisd stops.
func (s *Actors) WatchEvents(ctx context.Context, req api.EventsRequest, send func(api.Event) error) error {
	found := false
	for {
		// Taken before the read, so that an event added after it wakes
		// this watcher even if the read missed it.
		added := s.runner.Feed().Next(req.ID)
		res, err := s.Events(ctx, req)
		if errors.Is(err, errdefs.ErrNotFound) && found {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		for _, e := range res.Events {
			if err := send(e); err != nil {
				return err
			}
			req.After = e.Seq
		}
		if req.ID == "" && len(res.Events) == api.MaxEventsPage {
			// A page of every actor's history: more may follow now.
			continue
		}
		select {
		case <-added:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.runner.Feed().Stopped():
			return errdefs.New(errdefs.ErrUnavailable, "stasisd is stopping: watch again once it is back")
		}
	}
}

// Exec runs a command inside a RUNNING actor's sandbox and waits for it.
// Its output goes to streams' Stdout and Stderr as it comes when they are
// set, and is in the result otherwise; its input is streams' Stdin when set,
// else the request's, whole.
func (s *Actors) Exec(ctx context.Context, req api.ExecRequest, streams api.ExecStreams) (api.ExecResult, error) {
	if len(req.Args) == 0 {
		return api.ExecResult{}, fmt.Errorf("%w: exec needs a command", errdefs.ErrInvalidArgument)
	}
	if len(req.Stdin) > api.MaxExecStdin {
		return api.ExecResult{}, fmt.Errorf("%w: exec's standard input is %d bytes, over the %d an exec takes whole; stream it (ExecAttach, stasis actor exec -i) or copy it through a durable folder", errdefs.ErrInvalidArgument, len(req.Stdin), api.MaxExecStdin)
	}
	p := runtime.Process{Args: req.Args, Stdin: streams.Stdin, Stdout: streams.Stdout, Stderr: streams.Stderr}
	if p.Stdin == nil && len(req.Stdin) > 0 {
		p.Stdin = bytes.NewReader(req.Stdin)
	}
	if req.TTY {
		if streams.Stdout == nil {
			return api.ExecResult{}, fmt.Errorf("%w: a terminal is given to a streamed exec only (ExecAttach)", errdefs.ErrInvalidArgument)
		}
		p.Terminal = &runtime.Terminal{Size: terminalSize(req.Window), Resize: resizes(ctx, streams.Resize)}
	}
	a, err := s.runner.ActorRecord(ctx, req.ID)
	if err != nil {
		return api.ExecResult{}, err
	}
	if a.Running != nil {
		return api.ExecResult{}, &journal.BusyError{Actor: a.ID, Op: *a.Running}
	}
	if api.State(a.State) != api.Running {
		return api.ExecResult{}, &journal.StateError{Actor: a.ID, State: a.State, Kind: "exec", From: []string{string(api.Running)}}
	}
	if cause := context.Cause(s.execs); cause != nil {
		return api.ExecResult{}, cause
	}
	// An exec is a use: the actor is not idle while one runs.
	s.ports.Touch(a.ID)
	defer s.ports.Touch(a.ID)
	// A command still running when stasisd stops is ended then (its
	// output and input go through this process, which is going), not
	// waited for: an interactive shell would hold the stop for as long
	// as its user stays.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.execs, cancel)()
	res, err := s.engines.Of(a).Exec(ctx, a.Sandbox, p)
	if err != nil {
		if cause := context.Cause(s.execs); cause != nil {
			err = cause
		}
		return api.ExecResult{}, fmt.Errorf("exec %s in actor %s: %w", req.Args[0], a.ID, err)
	}
	return api.ExecResult{ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}, nil
}

// EndExecs ends the commands exec runs, now and from now on, each exec
// answering that stasisd is stopping: the server calls it as it shuts
// down, where it waits for the requests in flight.
func (s *Actors) EndExecs() {
	s.endExecs(fmt.Errorf("%w: stasisd is stopping, and the command was ended with it (run it again once stasisd is back)", errdefs.ErrUnavailable))
}

// terminalSize is a terminal's first size: the request's, else 80x24.
func terminalSize(w *api.WindowSize) runtime.WindowSize {
	if w == nil || w.Rows == 0 || w.Cols == 0 {
		return runtime.WindowSize{Rows: 24, Cols: 80}
	}
	return runtime.WindowSize{Rows: w.Rows, Cols: w.Cols}
}

// resizes passes a terminal's new sizes on as the runtime takes them,
// until ctx ends; nil for none.
func resizes(ctx context.Context, in <-chan api.WindowSize) <-chan runtime.WindowSize {
	if in == nil {
		return nil
	}
	out := make(chan runtime.WindowSize)
	go func() {
		for {
			select {
			case w, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- terminalSize(&w):
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
