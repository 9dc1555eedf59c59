package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/templates"
)

// restarts is the state of the restart policies' restarts.
type restarts struct {
	// pending holds the actors a restart waits or runs for; quick counts
	// each actor's restarts in a row that ran less than api.RestartReset,
	// and last is when its last began.
	pending map[string]bool
	quick   map[string]int
	last    map[string]time.Time
}

func newRestarts() restarts {
	return restarts{pending: map[string]bool{}, quick: map[string]int{}, last: map[string]time.Time{}}
}

// restartWanted says whether policy restarts an actor its process left as a
// is: always, or on-failure for an exit code other than 0 (one unknown
// too: most often a signal whose answer runsc lost) or a signal (CRASHED).
func restartWanted(policy string, a journal.Actor) bool {
	if a.ExitedAt.IsZero() || a.Running != nil {
		// Not ended by its process (a failed start, a lost sandbox).
		return false
	}
	switch policy {
	case api.RestartAlways:
		return true
	case api.RestartOnFailure:
		return api.State(a.State) == api.Crashed || a.ExitCode != 0
	}
	return false
}

// restartDelay is the pause before the next restart of actor id, whose
// process ended at exited: api.RestartFirstDelay, doubled for each restart
// in a row that ran less than api.RestartReset, at most
// api.RestartMaxDelay. Under s.exits.mu.
func (w *exitWatch) restartDelay(id string, exited time.Time) time.Duration {
	r := &w.restarts
	if last, ok := r.last[id]; !ok || exited.Sub(last) >= api.RestartReset {
		r.quick[id] = 0
	}
	d := api.RestartMaxDelay
	if n := r.quick[id]; n < 20 {
		d = min(api.RestartFirstDelay<<n, api.RestartMaxDelay)
	}
	r.quick[id]++
	return d
}

// restartEnded actors as their templates' restart policies ask, each
// after its pause, once; ended are the EXITED and CRASHED actors read
// this look, and the restarts of any other actor are forgotten.
func (s *Actors) restartEnded(ctx context.Context, ended []journal.Actor, all map[string]bool) {
	w := s.exits
	// Read once a look for all the ended actors of a template: an actor
	// left EXITED is looked at every second.
	policies := map[string]string{}
	policyOf := func(template string) string {
		p, ok := policies[template]
		if !ok {
			t, _ := s.templates.Get(ctx, template) // unread: none this look
			p, policies[template] = t.Restart, t.Restart
		}
		return p
	}
	for _, a := range ended {
		w.mu.Lock()
		pending := w.restarts.pending[a.ID]
		w.mu.Unlock()
		if pending || a.ExitedAt.IsZero() {
			continue
		}
		policy := policyOf(a.Template)
		if !restartWanted(policy, a) {
			continue
		}
		w.mu.Lock()
		w.restarts.pending[a.ID] = true
		delay := w.restartDelay(a.ID, a.ExitedAt)
		w.mu.Unlock()
		go func() {
			defer func() {
				w.mu.Lock()
				delete(w.restarts.pending, a.ID)
				w.mu.Unlock()
			}()
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			w.mu.Lock()
			w.restarts.last[a.ID] = time.Now()
			w.mu.Unlock()
			err := s.restart(ctx, a.ID, policy)
			var busy *journal.BusyError
			var state *journal.StateError
			if err != nil && !errors.As(err, &busy) && !errors.As(err, &state) && !errors.Is(err, journal.ErrNotFound) {
				s.cfg.Log.Warn("an actor's restart failed; its restart policy tries again", "actor", a.ID, "error", err.Error())
			}
		}()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.restarts.last {
		if !all[id] {
			delete(w.restarts.last, id)
			delete(w.restarts.quick, id)
		}
	}
}

// restartFailed begins what a failed restart adds to its actor's reason.
const restartFailed = "; its restart ("

// restart boots actor id, whose process ended, again from its template
// (restart policy policy): its durable folders as they are, its network
// and published ports kept. A restart that fails leaves the actor as its
// process did, for the policy to try again.
func (s *Actors) restart(ctx context.Context, id, policy string) error {
	_, err := s.runner.Run(ctx, op.Request{Kind: op.Restart, Actor: id,
		Prepare: func(before journal.Actor) (op.Args, error) { return op.Args{Previous: api.State(before.State)}, nil },
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			back := op.Outcome{State: o.Args.Previous, Reason: o.Actor.Reason, ExitCode: o.Actor.ExitCode, ExitedAt: o.Actor.ExitedAt}
			// How its process ended, without an earlier restart's failure.
			ended, _, _ := strings.Cut(o.Actor.Reason, restartFailed)
			fail := func(err error) (op.Outcome, error) {
				back.Reason = fmt.Sprintf("%s%s%s) failed: %v", ended, restartFailed, policy, err)
				return back, err
			}
			o.Note(fmt.Sprintf("restarting by its restart policy (%s): %s", policy, ended))
			t, err := s.templates.Get(ctx, o.Actor.Template)
			if err != nil {
				return fail(err)
			}
			eng := s.engines.Of(o.Actor)
			// The ended sandbox goes: the new one takes its id.
			if err := eng.Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
				return fail(err)
			}
			ea, err := s.prepareSandbox(ctx, o, t)
			if err != nil {
				return fail(err)
			}
			if err := eng.Boot(ctx, ea, engine.BootOptions{Probe: templates.Probe(t.Probe), Observer: o.Observer()}); err != nil {
				return fail(err)
			}
			return op.Outcome{State: api.Running, Reason: fmt.Sprintf("restarted by its restart policy (%s): %s", policy, ended)}, nil
		}})
	return err
}
