// Package fence holds this node's fleet lease in stasisd and fences the
// fleet's actors when it lapses.
package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
)

// Fencing. A fleet agent that runs this node's actors for a cluster holds
// the node's right to run them as a fleet lease in stasisd (api.Lease),
// renewed after each renewal of its own lease in the cluster, for less
// time than that lease has left. While the fleet lease holds, nothing
// changes. Once it lapses (the agent hung, was killed, or lost the cluster)
// stasisd itself fences every RUNNING fleet actor, freezing its sandbox
// where it stands (FENCED), and refuses to run or resume one: by the time
// the cluster counts the node lost and starts its actors elsewhere, none
// runs here. A renewal thaws the FENCED actors it lists as still bound
// here; the fleet removes the others. The lease is in the journal, so a
// stasisd that starts after it lapsed fences before it serves. Without a
// lease, nothing is fenced.

// DefaultCheck is how often stasisd compares its actors with the fleet
// lease: a lapse is acted on within it.
const DefaultCheck = 100 * time.Millisecond

// watchdogGrace is how long after the lapse of a lease renewed for
// validFor the watchdog fences: a sixth of it. The agent renews for three
// quarters of the cluster's Lease, whose last quarter is the margin before
// the cluster starts the actors elsewhere; the watchdog takes at most half
// of it (an eighth of the Lease: 250 ms of the tests' 2 s, 1.9 s of the
// default 15 s), leaving the rest for its freeze.
func watchdogGrace(validFor time.Duration) time.Duration { return validFor / 6 }

// fenceRetry is how long an actor whose fence or thaw failed waits before
// the next try.
const fenceRetry = 2 * time.Second

// Allows refuses to run or resume fleet actor id while the fleet lease
// has lapsed: the fleet may run it elsewhere.
func (s *Lease) Allows(id string) error {
	rec, _, lapsed := s.lease.state()
	if !lapsed || !api.FleetActorID(id) {
		return nil
	}
	return fmt.Errorf("%w: this node's fleet lease (held by %s) lapsed at %s, so actor %s may run on another node: fleet actors neither run nor resume here until the holder renews it (`stasis node lease` shows it; `stasis node lease release` gives it up, for a node that leaves its fleet)",
		errdefs.ErrUnavailable, rec.Holder, rec.Until.UTC().Format(time.RFC3339), id)
}

// KeepFencing compares the actors with the fleet lease every interval, and
// at once after a renewal, until ctx ends.
func (s *Lease) KeepFencing(ctx context.Context, interval time.Duration) {
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if err := s.Enforce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("the fleet lease could not be enforced", "error", err.Error())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-s.lease.kick:
			}
		}
	}()
}

// Enforce fences, while the fleet lease has lapsed, every RUNNING
// fleet actor that no operation holds, and thaws, while it holds, every
// FENCED one it binds here. The actors are acted on at once: a fence must
// land before the cluster counts the node lost.
func (s *Lease) Enforce(ctx context.Context) error {
	rec, held, lapsed := s.lease.state()
	if !held {
		return nil
	}
	// An operation that ended, its end not yet recorded, holds the actor
	// no more (actorRecords).
	actors, err := s.runner.ActorRecords(ctx)
	if err != nil {
		return err
	}
	s.handOver(actors)
	var wg sync.WaitGroup
	for _, a := range actors {
		if a.Running != nil || !api.FleetActorID(a.ID) || !s.lease.due(a.ID) {
			continue
		}
		switch st := api.State(a.State); {
		case lapsed && st == api.Running:
			why := fmt.Sprintf("this node's fleet lease (held by %s) lapsed at %s: frozen, as another node may run it now", rec.Holder, rec.Until.UTC().Format(time.RFC3339Nano))
			wg.Go(func() { s.lease.done(a.ID, s.fence(ctx, a.ID, why)) })
		case !lapsed && st == api.Fenced && slices.Contains(rec.Bound, a.ID):
			wg.Go(func() {
				_, err := s.unfence(ctx, a.ID, "", "the fleet lease was renewed by "+rec.Holder+", which says it is bound here")
				s.lease.done(a.ID, err)
			})
		}
	}
	wg.Wait()
	return nil
}

// due says whether actor id may be acted on now (no failure waits).
func (f *fleetLease) due(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !time.Now().Before(f.retry[id])
}

// done records how acting on actor id ended: a failure waits fenceRetry.
func (f *fleetLease) done(id string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var busy *journal.BusyError
	var state *journal.StateError
	switch {
	case err == nil, errors.As(err, &busy), errors.As(err, &state):
		// Done, or another operation took the actor meanwhile: the next
		// look sees where it ends.
		delete(f.retry, id)
	default:
		f.retry[id] = time.Now().Add(fenceRetry)
	}
}

// fence freezes a RUNNING actor's sandbox: FENCED. A sandbox that is gone
// makes the actor CRASHED, as after any failed operation.
func (s *Lease) fence(ctx context.Context, id, why string) error {
	_, err := s.runner.Run(ctx, op.Request{Kind: op.Fence, Actor: id,
		Prepare: func(before journal.Actor) (op.Args, error) { return op.Args{Previous: api.State(before.State)}, nil },
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			if err := s.engines.Of(o.Actor).Fence(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
				out := o.AfterFailure(ctx, s.engines.Of(o.Actor), err)
				if out.State == api.Running {
					out.Reason = fmt.Sprintf("could not be fenced (%v), tried again in %s: %s", err, fenceRetry, why)
				}
				return out, err
			}
			return op.Outcome{State: api.Fenced, Reason: why}, nil
		}})
	if err != nil {
		s.cfg.Log.Warn("an actor could not be fenced", "actor", id, "error", err.Error())
	}
	return err
}

// unfence lets a FENCED actor's sandbox run again: RUNNING. One that is gone
// is CRASHED; one that cannot be thawed stays FENCED.
func (s *Lease) unfence(ctx context.Context, id, requestID, why string) (journal.Actor, error) {
	return s.runner.Run(ctx, op.Request{Kind: op.Unfence, Actor: id, RequestID: requestID,
		Prepare: func(before journal.Actor) (op.Args, error) { return op.Args{Previous: api.State(before.State)}, nil },
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			if err := s.engines.Of(o.Actor).Unfence(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
				st, serr := s.engines.Of(o.Actor).Status(ctx, o.Actor.Sandbox)
				if serr == nil && st == runtime.StatusStopped {
					return op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("its sandbox is gone; it was FENCED: %v%s", err, op.Resumable(o.Actor))}, err
				}
				return op.Outcome{State: api.Fenced, Reason: fmt.Sprintf("could not be thawed (%v): %s", err, o.Actor.Reason)}, err
			}
			return op.Outcome{State: api.Running, Reason: why}, nil
		}})
}

// ResumeFenced is a resume of a FENCED actor: its sandbox thawed, while no
// lapsed lease forbids it and, with a lease, when the lease binds it here.
func (s *Lease) ResumeFenced(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	rec, held, _ := s.lease.state()
	if err := s.Allows(req.ID); err != nil {
		return api.Actor{}, err
	}
	why := "resumed by request, no fleet lease is held"
	if held && api.FleetActorID(req.ID) {
		if !slices.Contains(rec.Bound, req.ID) {
			return api.Actor{}, fmt.Errorf("%w: actor %s is FENCED and this node's fleet lease (held by %s) does not bind it here: the fleet runs it elsewhere; delete this copy", errdefs.ErrFailedPrecondition, req.ID, rec.Holder)
		}
		why = "resumed by request; the fleet lease binds it here"
	}
	a, err := s.unfence(ctx, req.ID, req.RequestID, why)
	return op.ActorOf(a), err
}

// Recovered settles a fence or unfence that a stopped stasisd left running
// by what the sandbox is (at says where it stopped): the fence loop acts
// again on what the lease then says.
func Recovered(st runtime.Status, at string, a journal.Actor) op.Outcome {
	switch st {
	case runtime.StatusPaused:
		return op.Outcome{State: api.Fenced, Reason: at + "; its sandbox is frozen"}
	case runtime.StatusRunning:
		return op.Outcome{State: api.Running, Reason: at + "; its sandbox runs"}
	}
	return op.Outcome{State: api.Crashed, Reason: at + "; its sandbox is gone" + op.Resumable(a)}
}
