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
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/runtimes"
)

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
	rec := journal.Lease{Holder: req.Holder, Until: until, Bound: bound, Epoch: req.Epoch}
	// Written under the lock, so that renewals land in the order taken.
	// The journal refuses one of an epoch older than the newest shown.
	err := s.journal.PutLease(ctx, rec)
	if err == nil {
		f.held, f.rec, f.until, f.untilBoot = true, rec, until, untilBoot
		for _, id := range bound {
			delete(f.retry, id)
		}
	}
	f.mu.Unlock()
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		s.cfg.Log.Warn("fleet lease renewal refused", "holder", req.Holder, "error", err.Error())
		return api.Lease{}, err
	}
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

// Status is the lease as held now (its holder, until when, the actors it
// binds, its epoch, whether it lapsed; zero while none is held), without
// what the actors say of it (Get): no read of the journal.
func (s *Lease) Status() api.Lease {
	rec, held, lapsed := s.lease.state()
	out := api.Lease{Lapsed: lapsed}
	if held {
		out.Holder, out.Until, out.Bound, out.Epoch = rec.Holder, rec.Until, rec.Bound, rec.Epoch
	}
	return out
}

// leaseOf is the lease now, with what actors say of it.
func (s *Lease) leaseOf(actors []journal.Actor) api.Lease {
	out := s.Status()
	for _, a := range actors {
		if api.State(a.State) == api.Fenced {
			out.Fenced = append(out.Fenced, a.ID)
		}
	}
	if out.Holder != "" {
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
