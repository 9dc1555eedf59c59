package op_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
)

// These tests run the runner over a real SQLite journal in a temporary
// folder: no runtime, no root.

func newRunner(t *testing.T, cfg op.Config) (*op.Runner, *journal.Journal) {
	t.Helper()
	ctx := context.Background()
	j, err := journal.Open(ctx, filepath.Join(t.TempDir(), "journal.db"), journal.Options{Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Journal = j
	r := op.NewRunner(ctx, cfg)
	t.Cleanup(func() {
		r.Close()
		j.Close()
	})
	return r, j
}

// create runs the creating kind for actor id, leaving it RUNNING.
func create(t *testing.T, r *op.Runner, id, requestID string, body func(context.Context, *op.Operation) (op.Outcome, error)) (journal.Actor, error) {
	t.Helper()
	if body == nil {
		body = func(context.Context, *op.Operation) (op.Outcome, error) { return op.Outcome{State: api.Running}, nil }
	}
	return r.Run(context.Background(), op.Request{Kind: op.Run, Actor: id, RequestID: requestID,
		Create: &journal.Actor{ID: id, Template: "t", Sandbox: id}, Body: body})
}

func TestRunRecordsTheOutcomeAndAnswersARetryAsTheFirst(t *testing.T) {
	var ended atomic.Int32
	r, j := newRunner(t, op.Config{Observe: func(_, kind, result string, _ time.Duration) {
		if kind == op.KindRun && result == journal.OpDone {
			ended.Add(1)
		}
	}})
	a, err := create(t, r, "a1", "req-1", nil)
	if err != nil || a.State != string(api.Running) {
		t.Fatalf("run: %+v, %v", a, err)
	}
	ran := false
	again, err := create(t, r, "a1", "req-1", func(context.Context, *op.Operation) (op.Outcome, error) {
		ran = true
		return op.Outcome{State: api.Crashed}, nil
	})
	if err != nil || ran || again.State != string(api.Running) {
		t.Fatalf("retry of the same request: ran %v, %+v, %v; want the first answer, the body not run", ran, again, err)
	}
	if ended.Load() != 1 {
		t.Fatalf("%d runs observed, want 1", ended.Load())
	}
	rec, err := j.Actor(context.Background(), "a1")
	if err != nil || rec.Running != nil {
		t.Fatalf("the actor after its run: %+v, %v; want no operation running", rec, err)
	}
}

func TestRunRefusesABusyActorAndARetryWaitsForTheFirst(t *testing.T) {
	r, _ := newRunner(t, op.Config{})
	if _, err := create(t, r, "a1", "", nil); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	pause := func(id string) (journal.Actor, error) {
		return r.Run(context.Background(), op.Request{Kind: op.Pause, Actor: "a1", RequestID: id,
			Body: func(context.Context, *op.Operation) (op.Outcome, error) {
				close(started)
				<-release
				return op.Outcome{State: api.Running}, errors.New("the snapshot failed")
			}})
	}
	go func() {
		_, err := pause("req-1")
		first <- err
	}()
	<-started
	_, err := r.Run(context.Background(), op.Request{Kind: op.Suspend, Actor: "a1", RequestID: "req-2",
		Body: func(context.Context, *op.Operation) (op.Outcome, error) {
			t.Error("a busy actor's body ran")
			return op.Outcome{}, nil
		}})
	var busy *journal.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("suspend during a pause: %v (%s), want busy", err, errdefs.Code(err))
	}
	retried := make(chan error, 1)
	go func() {
		_, err := pause("req-1")
		retried <- err
	}()
	close(release)
	if err := <-first; err == nil {
		t.Fatal("the first pause's error was lost")
	}
	err = <-retried
	if err == nil || !strings.Contains(err.Error(), "the snapshot failed") {
		t.Fatalf("the retry answered %v, want the first one's failure", err)
	}
}

func TestAnOperationPastItsDeadlineSaysHowToRaiseIt(t *testing.T) {
	r, _ := newRunner(t, op.Config{Deadlines: map[string]time.Duration{op.KindPause: 20 * time.Millisecond}})
	if _, err := create(t, r, "a1", "", nil); err != nil {
		t.Fatal(err)
	}
	a, err := r.Run(context.Background(), op.Request{Kind: op.Pause, Actor: "a1",
		Body: func(ctx context.Context, _ *op.Operation) (op.Outcome, error) {
			<-ctx.Done()
			return op.Outcome{State: api.Running, Reason: "rolled back"}, ctx.Err()
		}})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "--deadline pause=DURATION") {
		t.Fatalf("got %v, want deadline_exceeded naming the flag", err)
	}
	if a.State != string(api.Running) || a.Reason != "rolled back" {
		t.Fatalf("the actor after the deadline: %+v", a)
	}
}

func TestStepsAreJournaledBeforeTheyRun(t *testing.T) {
	r, j := newRunner(t, op.Config{})
	var seen string
	_, err := create(t, r, "a1", "", func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
		err := o.Step(op.StepBundle, func() (string, error) {
			rec, err := j.Operation(ctx, o.ID)
			seen = rec.Step
			return "written", err
		})
		return op.Outcome{State: api.Running}, err
	})
	if err != nil || seen != op.StepBundle {
		t.Fatalf("the journal said step %q while it ran (%v), want %q", seen, err, op.StepBundle)
	}
}

func TestParseDeadlines(t *testing.T) {
	got, err := op.ParseDeadlines([]string{"suspend=20m", "fence=5s"})
	if err != nil || got[op.KindSuspend] != 20*time.Minute || got[op.KindFence] != 5*time.Second {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"suspend", "nap=1m", "pause=-1s", "pause=soon"} {
		if _, err := op.ParseDeadlines([]string{bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want invalid_argument", bad, err)
		}
	}
}

func TestRecoveredRefusesAKindItDoesNotKnow(t *testing.T) {
	r, _ := newRunner(t, op.Config{})
	if _, err := r.Recovered(journal.Operation{ID: "op-1", Kind: "teleport", Args: []byte(`{}`)}); err == nil || !strings.Contains(err.Error(), "teleport") {
		t.Fatalf("got %v, want the unknown kind named", err)
	}
	o, err := r.Recovered(journal.Operation{ID: "op-2", Kind: op.KindSuspend, Args: []byte(`{"previous":"RUNNING","snapshot":"snap-1"}`)})
	if err != nil || o.Kind != op.Suspend || o.Args.Snapshot != "snap-1" || o.Args.Previous != api.Running {
		t.Fatalf("got %+v, %v", o, err)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "agent-7.v2", "x_y"} {
		if err := op.CheckName("actor", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "A", "a/b", strings.Repeat("a", 64)} {
		if err := op.CheckName("actor", bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want invalid_argument", bad, err)
		}
	}
}
