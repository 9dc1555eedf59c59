// Package fence holds this node's fleet lease in stasisd and fences the
// fleet's actors when it lapses.
package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/fencefile"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/runtimes"
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

// fleetLease is the lease as this process knows it.
type fleetLease struct {
	mu sync.Mutex
	// held is false when no lease is held.
	held bool
	rec  journal.Lease
	// until is rec.Until on this process's monotonic clock when this
	// process took the renewal, so that a step of the wall clock moves no
	// lapse.
	until time.Time
	// untilBoot is when the watchdog fences, on CLOCK_BOOTTIME
	// (fencefile.Now): watchdogGrace after the lapse, so that this
	// process, which fences within DefaultCheck, does it first;
	// written is the hand-over file as last written.
	untilBoot int64
	written   []byte
	// retry holds, per actor, when a failed fence or thaw is tried again.
	retry map[string]time.Time
	// kick wakes the fence loop after a renewal.
	kick chan struct{}
}

// Config is what the fence runs with.
type Config struct {
	// File, when set, is where the fleet lease's lapse and the fence
	// commands are handed over to the fence watchdog (fencefile), which
	// freezes the fleet actors when the lease lapses even with stasisd
	// and the agent both gone; Watchdog starts it when it is not running,
	// at each renewal.
	File     string
	Watchdog func() error
	Log      *slog.Logger
}

// Lease is the fleet lease and the fence that enforces it. Safe for
// concurrent use.
type Lease struct {
	cfg     Config
	journal *journal.Journal
	runner  *op.Runner
	engines *runtimes.Engines
	lease   *fleetLease
}

// New is the fleet lease as the journal j holds it: one that lapsed while
// stasisd was stopped is enforced by the first Enforce.
func New(ctx context.Context, cfg Config, j *journal.Journal, runner *op.Runner, engines *runtimes.Engines) (*Lease, error) {
	l := &Lease{cfg: cfg, journal: j, runner: runner, engines: engines, lease: &fleetLease{retry: map[string]time.Time{}, kick: make(chan struct{}, 1)}}
	if err := l.lease.load(ctx, j); err != nil {
		return nil, err
	}
	return l, nil
}

// load reads the lease from the journal, as a start does.
func (f *fleetLease) load(ctx context.Context, j *journal.Journal) error {
	rec, held, err := j.Lease(ctx)
	if err != nil {
		return fmt.Errorf("the fleet lease: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held, f.rec, f.until = held, rec, rec.Until
	f.untilBoot = fencefile.Now() + max(0, time.Until(rec.Until)).Nanoseconds()
	return nil
}

// state is the lease now: whether one is held, whether it lapsed, and the
// actors it binds here.
func (f *fleetLease) state() (rec journal.Lease, held, lapsed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec, f.held, f.held && !time.Now().Before(f.until)
}

// Renew takes or renews the fleet lease and wakes the fence loop,
// which thaws the FENCED actors the renewal lists as bound here.
func (s *Lease) Renew(ctx context.Context, req api.LeaseRequest) (api.Lease, error) {
	if err := checkLeaseRequest(req); err != nil {
		return api.Lease{}, err
	}
	validFor := time.Duration(req.ValidForSeconds * float64(time.Second))
	bound := slices.Clone(req.Bound)
	slices.Sort(bound)
	bound = slices.Compact(bound)
	f := s.lease
	f.mu.Lock()
	until, untilBoot := time.Now().Add(validFor), fencefile.Now()+(validFor+watchdogGrace(validFor)).Nanoseconds()
	rec := journal.Lease{Holder: req.Holder, Until: until, Bound: bound}
	// Written under the lock, so that renewals land in the order taken.
	err := s.journal.PutLease(ctx, rec)
	if err == nil {
		f.held, f.rec, f.until, f.untilBoot = true, rec, until, untilBoot
		for _, id := range bound {
			delete(f.retry, id)
		}
	}
	f.mu.Unlock()
	if err != nil {
		return api.Lease{}, fmt.Errorf("record the fleet lease: %w", err)
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
	actors, err := s.runner.ActorRecords(ctx)
	if err != nil {
		return api.Lease{}, err
	}
	// The watchdog that fences if this process cannot is handed the
	// lease, and checked at each renewal: started when it is not running.
	s.handOver(actors)
	if s.cfg.Watchdog != nil {
		if err := s.cfg.Watchdog(); err != nil {
			s.cfg.Log.Warn("the fence watchdog could not be started: if stasisd dies, nothing but the agent fences this node's actors", "error", err.Error())
		}
	}
	return s.leaseOf(actors), nil
}

func checkLeaseRequest(req api.LeaseRequest) error {
	switch {
	case req.Holder == "" || len(req.Holder) > 253 || strings.ContainsFunc(req.Holder, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Errorf("%w: the lease's holder %q: name it in 1-253 printable characters", errdefs.ErrInvalidArgument, req.Holder)
	case !(req.ValidForSeconds > 0 && req.ValidForSeconds <= api.MaxLeaseSeconds):
		return fmt.Errorf("%w: a lease valid for %v s: give more than 0 and at most %d", errdefs.ErrInvalidArgument, req.ValidForSeconds, api.MaxLeaseSeconds)
	}
	for _, id := range req.Bound {
		if err := op.CheckName("actor", id); err != nil {
			return fmt.Errorf("the lease's bound actors: %w", err)
		}
	}
	return nil
}

// Get says where the fleet lease stands, with the FENCED actors and the
// commands that fence the running fleet actors without stasisd.
func (s *Lease) Get(ctx context.Context) (api.Lease, error) {
	actors, err := s.runner.ActorRecords(ctx)
	if err != nil {
		return api.Lease{}, err
	}
	return s.leaseOf(actors), nil
}

// leaseOf is the lease now, with what actors say of it.
func (s *Lease) leaseOf(actors []journal.Actor) api.Lease {
	rec, held, lapsed := s.lease.state()
	out := api.Lease{Lapsed: lapsed}
	if held {
		out.Holder, out.Until, out.Bound = rec.Holder, rec.Until, rec.Bound
	}
	for _, a := range actors {
		if api.State(a.State) == api.Fenced {
			out.Fenced = append(out.Fenced, a.ID)
		}
	}
	if held {
		out.FenceCommands = s.fenceCommands(actors)
	}
	return out
}

// fenceCommands are the commands that freeze the sandboxes of the fleet
// actors that may run, without stasisd: for the agent, and the watchdog.
func (s *Lease) fenceCommands(actors []journal.Actor) [][]string {
	var cmds [][]string
	for _, a := range actors {
		if api.FleetActorID(a.ID) && mayRun(api.State(a.State)) {
			if cmd := s.engines.Of(a).PauseCommand(a.Sandbox); cmd != nil {
				cmds = append(cmds, cmd)
			}
		}
	}
	return cmds
}

// handOver writes, where it changed, the watchdog's file: the lease's lapse
// and the fence commands of actors (fencefile).
func (s *Lease) handOver(actors []journal.Actor) {
	if s.cfg.File == "" {
		return
	}
	f := s.lease
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.held {
		return
	}
	data, err := fencefile.File{Holder: f.rec.Holder, Until: f.untilBoot, Commands: s.fenceCommands(actors)}.Encode()
	if err != nil || bytes.Equal(data, f.written) {
		return
	}
	if err := fencefile.Write(s.cfg.File, data); err != nil {
		s.cfg.Log.Warn("the fence watchdog's file could not be written", "file", s.cfg.File, "error", err.Error())
		return
	}
	f.written = data
}

// mayRun says whether an actor in state st may have a sandbox that runs:
// RUNNING, and the states of the operations that start, resume or
// snapshot one.
func mayRun(st api.State) bool {
	switch st {
	case api.Running, api.Creating, api.Resuming, api.Pausing, api.Suspending:
		return true
	}
	return false
}

// Release gives the fleet lease up: nothing is fenced any more, and
// the FENCED actors stay so until they are resumed or deleted. For a node
// that leaves its fleet; an agent never calls it, as its absence must
// fence.
func (s *Lease) Release(ctx context.Context) (api.Lease, error) {
	f := s.lease
	f.mu.Lock()
	err := s.journal.DeleteLease(ctx)
	if err == nil {
		f.held, f.rec = false, journal.Lease{}
		if s.cfg.File != "" {
			// The watchdog, finding no lease, ends.
			if err = fencefile.Remove(s.cfg.File); err == nil {
				f.written = nil
			}
		}
	}
	f.mu.Unlock()
	if err != nil {
		return api.Lease{}, fmt.Errorf("give the fleet lease up: %w", err)
	}
	s.cfg.Log.Info("the fleet lease was given up: nothing is fenced any more")
	return s.Get(ctx)
}

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
