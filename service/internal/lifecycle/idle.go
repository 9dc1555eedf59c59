package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/tick"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/templates"
)

// DefaultIdleCheck is how often stasisd looks for idle actors.
const DefaultIdleCheck = time.Second

// KeepIdling pauses or suspends, every interval until ctx ends, the
// RUNNING actors whose template has an idle policy and that nothing used
// for that long: no connection through their published ports (none open,
// none held) and no exec. The reason is in the actor's history.
func (s *Actors) KeepIdling(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func() { s.idleOut(ctx) })
}

// idleOut starts the idle pause or suspend of each actor idle past its
// template's limit.
func (s *Actors) idleOut(ctx context.Context) {
	actors, err := s.runner.ActorRecords(ctx)
	if err != nil {
		return
	}
	for _, a := range actors {
		if api.State(a.State) != api.Running || a.Running != nil {
			continue
		}
		t, err := s.templates.Get(ctx, a.Template)
		if err != nil {
			continue
		}
		after, then := templates.IdleAfter(t)
		if after <= 0 {
			continue
		}
		since := a.UpdatedAt
		active, last, _ := s.ports.Use(a.ID)
		if last.After(since) {
			since = last
		}
		if active > 0 || time.Since(since) < after {
			continue
		}
		s.mu.Lock()
		busy := s.idling[a.ID]
		s.idling[a.ID] = true
		s.mu.Unlock()
		if busy {
			continue
		}
		go func() {
			defer func() {
				s.mu.Lock()
				delete(s.idling, a.ID)
				s.mu.Unlock()
			}()
			why := fmt.Sprintf("idle for %s (no connection through its published ports, no exec): %s, as its template says", after, then)
			s.runner.Event(a.ID, "", "idle", why, 0, nil)
			req := api.OpRequest{ID: a.ID}
			why = fmt.Sprintf("idle for %s; the next connection to its published ports wakes it", after)
			var err error
			if then == api.IdlePause {
				_, err = s.pause(ctx, req, why)
			} else {
				_, err = s.suspend(ctx, req, why)
			}
			if err != nil {
				s.cfg.Log.Info("an idle actor was not paused or suspended", "actor", a.ID, "then", then, "error", err.Error())
			}
		}()
	}
}

// asIdle marks what body leaves PAUSED or SUSPENDED as its idle policy's
// doing (why: the reason), when why is not empty.
func asIdle(why string, body func(context.Context, *op.Operation) (op.Outcome, error)) func(context.Context, *op.Operation) (op.Outcome, error) {
	if why == "" {
		return body
	}
	return func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
		out, err := body(ctx, o)
		if out.State == api.Paused || out.State == api.Suspended {
			out.Idle = true
			out.Reason = strings.TrimSuffix(why+"; "+out.Reason, "; ")
		}
		return out, err
	}
}
