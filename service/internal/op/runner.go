package op

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/tick"
	"github.com/stasis-run/stasis/journal"
)

// Config is what a Runner runs on.
type Config struct {
	Journal *journal.Journal
	Log     *slog.Logger
	// Deadlines override the kinds' deadlines, by kind name.
	Deadlines map[string]time.Duration
	// CleanupTimeout bounds the checks and rollbacks after an operation
	// failed or ran out of time; 2 minutes when zero.
	CleanupTimeout time.Duration
	// Failpoint, "OP/STEP" or "OP/STEP:after", makes the process kill
	// itself with SIGKILL there (Failpoint).
	Failpoint string
	// Observe, when set, is told how each operation ended, for metrics.
	Observe func(actor, kind, result string, d time.Duration)
	// Ended, when set, is given the actor as each operation left it (not
	// a deleted one).
	Ended func(journal.Actor)
}

// Runner begins, runs and ends operations, one at a time per actor. It is
// safe for concurrent use.
type Runner struct {
	cfg     Config
	journal *journal.Journal
	// unsettled holds the ends of operations the journal could not record
	// yet; stopSettling ends their writing.
	unsettled    *unsettledEnds
	stopSettling func()
	feed         *Feed

	mu sync.Mutex
	// done is closed when the operation with that id ends in this process;
	// a retried request waits on it.
	done map[string]chan struct{}
}

// NewRunner is a runner over cfg.Journal; Close stops its background work.
func NewRunner(ctx context.Context, cfg Config) *Runner {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.CleanupTimeout <= 0 {
		cfg.CleanupTimeout = 2 * time.Minute
	}
	r := &Runner{cfg: cfg, journal: cfg.Journal, unsettled: newUnsettledEnds(), feed: newFeed(), done: map[string]chan struct{}{}}
	background := context.WithoutCancel(ctx)
	r.stopSettling = tick.Every(background, settleEvery, func() { r.writeUnsettled(background) })
	return r
}

// Close stops the writing of unsettled ends.
func (r *Runner) Close() { r.stopSettling() }

// Feed is the feed that wakes the watchers of actors' histories and
// states: notified at each event and at each operation's end.
func (r *Runner) Feed() *Feed { return r.feed }

// Request is what a caller asks of Run.
type Request struct {
	Kind      *Kind
	Actor     string
	RequestID string
	// Create is the actor to make (run).
	Create *journal.Actor
	// Prepare makes the operation's arguments from the actor as Begin
	// found it, inside Begin's transaction.
	Prepare func(before journal.Actor) (Args, error)
	// Body does the work and must leave the actor in a stable state; its
	// context carries the operation's deadline.
	Body func(context.Context, *Operation) (Outcome, error)
}

// Run is the one place where an operation begins, runs and ends. Begin
// decides, in one journal transaction, whether the request is a retry (it
// then waits for the first one and answers as it did), whether the actor is
// busy (aborted, naming the operation and step), whether the actor is in a
// state the kind starts from (failed precondition), and records the
// arguments; the body runs to its end even when the caller goes away, but
// not past the kind's deadline, whose expiry fails and rolls back the
// operation like any other failure; End records the outcome and the
// error's category in one transaction, the disk reserve making sure it can.
func (r *Runner) Run(ctx context.Context, req Request) (journal.Actor, error) {
	k := req.Kind
	deadline := r.deadline(k)
	opID := NewID("op")
	done := make(chan struct{})
	r.mu.Lock()
	r.done[opID] = done
	r.mu.Unlock()
	finished := func() {
		r.mu.Lock()
		delete(r.done, opID)
		r.mu.Unlock()
		close(done)
	}
	var args Args
	start := journal.Start{
		Op: journal.Operation{ID: opID, Actor: req.Actor, Kind: k.Name, RequestID: req.RequestID, Deadline: time.Now().Add(deadline)},
		To: string(k.During), From: k.fromStrings(), Create: req.Create,
		Args: func(before journal.Actor) ([]byte, error) {
			if req.Prepare != nil {
				var err error
				if args, err = req.Prepare(before); err != nil {
					return nil, err
				}
			}
			return json.Marshal(args)
		},
	}
	// The end of the actor's last operation, if the journal could not
	// record it, is recorded first: until it is, the journal holds the
	// actor busy with an operation that has ended.
	_, err := r.unsettled.write(ctx, r.journal, req.Actor)
	var b journal.Began
	if err == nil {
		b, err = r.journal.Begin(ctx, start)
	}
	if err != nil {
		finished()
		r.cfg.Log.Info("operation refused", "kind", k.Name, "actor", req.Actor, "request", req.RequestID, "code", errdefs.Code(err), "error", err.Error())
		return journal.Actor{}, err
	}
	if b.Replay {
		finished()
		return r.replay(ctx, b.Op)
	}
	defer finished()
	o := &Operation{r: r, ID: opID, Kind: k, Args: args, Actor: b.Actor}
	r.cfg.Log.Info("operation started", "kind", k.Name, "actor", req.Actor, "operation", opID, "request", req.RequestID, "from", b.Actor.State, "deadline", deadline.String())
	// The operation outlives its caller: a client that goes away does not
	// cut a suspend in half, and its retry finds the result.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadline)
	began := time.Now()
	out, opErr := req.Body(octx, o)
	if opErr != nil && errors.Is(octx.Err(), context.DeadlineExceeded) {
		step := "?"
		if rec, err := r.journal.Operation(context.Background(), opID); err == nil {
			step = rec.Step
		}
		opErr = errdefs.Mark(fmt.Errorf("%s of %s ran past its deadline of %s at step %s and was rolled back (raise it with --deadline %s=DURATION): %w", k.Name, req.Actor, deadline, step, k.Name, opErr), errdefs.ErrDeadlineExceeded)
	}
	cancel()
	end := journal.End{OpID: opID, State: journal.OpDone, Actor: req.Actor, ActorState: string(out.State), Reason: out.Reason, Idle: out.Idle, ExitCode: out.ExitCode, ExitedAt: out.ExitedAt}
	if opErr != nil {
		end.State, end.Error, end.ErrorCode = journal.OpFailed, opErr.Error(), errdefs.Code(opErr)
	}
	if out.Deleted {
		end.ActorState = ""
	}
	a, endErr := r.journal.End(context.WithoutCancel(ctx), end)
	// What waits on the actor's state (held connections) looks again.
	r.feed.Notify(req.Actor)
	if out.Deleted && errors.Is(endErr, journal.ErrNotFound) {
		endErr = nil
	}
	if r.cfg.Observe != nil {
		r.cfg.Observe(req.Actor, k.Name, end.State, time.Since(began))
	}
	level := slog.LevelInfo
	if opErr != nil {
		level = slog.LevelWarn
	}
	r.cfg.Log.Log(ctx, level, "operation ended", "kind", k.Name, "actor", req.Actor, "operation", opID, "result", end.State, "state", end.ActorState,
		"duration", time.Since(began).String(), "code", end.ErrorCode, "error", end.Error)
	if endErr != nil {
		// The operation has ended: the actor is in a stable state, which
		// its record says once the end is written (unsettledEnds).
		r.unsettled.add(end)
		r.cfg.Log.Warn("the end of an operation could not be recorded; it is written again every second", "kind", k.Name, "actor", req.Actor, "operation", opID, "error", endErr)
		rec, err := r.ActorRecord(context.WithoutCancel(ctx), req.Actor)
		if err != nil {
			return journal.Actor{}, fmt.Errorf("journal the end of %s %s: %w", k.Name, opID, endErr)
		}
		return rec, opErr
	}
	if r.cfg.Ended != nil && !out.Deleted {
		r.cfg.Ended(a)
	}
	return a, opErr
}

// deadline is how long an operation of kind k may run.
func (r *Runner) deadline(k *Kind) time.Duration {
	if d, ok := r.cfg.Deadlines[k.Name]; ok && d > 0 {
		return d
	}
	return k.Deadline
}

// replay answers a retried request as the first one did: it waits for the
// first to end if it still runs in this process, then gives the actor as
// it stands and the first one's error, with its category.
func (r *Runner) replay(ctx context.Context, rec journal.Operation) (journal.Actor, error) {
	r.mu.Lock()
	done := r.done[rec.ID]
	r.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return journal.Actor{}, ctx.Err()
		}
		var err error
		if rec, err = r.journal.Operation(ctx, rec.ID); err != nil {
			return journal.Actor{}, err
		}
	}
	a, err := r.journal.Actor(ctx, rec.Actor)
	if err != nil && !(rec.Kind == Delete.Name && errors.Is(err, journal.ErrNotFound)) {
		return a, err
	}
	if rec.State == journal.OpFailed {
		return a, errdefs.FromCode(rec.ErrorCode, fmt.Sprintf("%s of %s (request %s) failed: %s", rec.Kind, rec.Actor, rec.RequestID, rec.Error))
	}
	return a, nil
}

// Settle is a context for the checks and rollbacks after a failure: the
// operation's own may have run out at its deadline.
func (r *Runner) Settle(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CleanupTimeout)
}

// Recovered is the operation rec, which a stopped stasisd left running, to
// be settled by a reconcile; its Actor is the caller's to read.
func (r *Runner) Recovered(rec journal.Operation) (*Operation, error) {
	k := Named(rec.Kind)
	if k == nil {
		return nil, fmt.Errorf("unknown operation kind %q (a newer stasisd wrote it?)", rec.Kind)
	}
	var args Args
	if err := json.Unmarshal(rec.Args, &args); err != nil {
		return nil, fmt.Errorf("operation arguments: %w", err)
	}
	return &Operation{r: r, ID: rec.ID, Kind: k, Args: args}, nil
}

// Event appends a line to an actor's history and logs it.
func (r *Runner) Event(actor, opID, step, msg string, d time.Duration, err error) {
	e := journal.Event{Actor: actor, Operation: opID, Step: step, Message: msg, Duration: d}
	attrs := []any{"actor", actor, "operation", opID, "duration", d.String(), "message", msg}
	level := slog.LevelInfo
	if err != nil {
		e.Error = err.Error()
		attrs, level = append(attrs, "error", e.Error), slog.LevelWarn
	}
	if _, jerr := r.journal.AddEvent(context.Background(), e); jerr != nil {
		r.cfg.Log.Error("journal event", "actor", actor, "error", jerr)
	} else {
		r.feed.Notify(actor)
	}
	r.cfg.Log.Log(context.Background(), level, step, attrs...)
}

// NoteObserver records the engine's steps in an actor's history outside
// any operation (the reconciler's removal of a leftover sandbox).
func (r *Runner) NoteObserver(actor string) engine.Observer {
	return engine.Observer{After: func(st engine.Step) {
		var err error
		if st.Err != "" {
			err = errors.New(st.Err)
		}
		r.Event(actor, "", st.Name, st.Message, st.Duration, err)
	}}
}

// failpoint kills this process when the configured failpoint is reached.
func (r *Runner) failpoint(kind, step string, after bool) {
	if r.cfg.Failpoint == "" {
		return
	}
	if at := Failpoint(kind, step, after); at == r.cfg.Failpoint {
		r.cfg.Log.Warn("failpoint reached: killing stasisd", "failpoint", at)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never go on
	}
}
