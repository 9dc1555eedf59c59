package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/procfs"
	"github.com/stasis-run/stasis/internal/tick"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
)

// KeepPolicy says when a paused actor's sandbox stays in memory, frozen,
// beside its snapshot on disk, so that its resume has nothing to load (on
// the H200 an 8 GiB GPU actor skips runsc's load of a 9.7 GB image; its GPU
// is released all the same). Kept sandboxes hold memory the kernel cannot
// reclaim, so they are kept only while the node has room: a pause keeps its
// sandbox only when at least Reserve stays available, and Release stops
// kept sandboxes, the longest paused first, when the node falls below it.
// Nothing is lost either way: the snapshot holds the same state.
type KeepPolicy struct {
	// Reserve is the memory that must stay available (MemAvailable) with
	// the kept sandboxes counted; a quarter of the node's memory when zero.
	Reserve uint64
	// Memory reads the node's available and total memory; /proc/meminfo's
	// when nil.
	Memory func() (available, total uint64, err error)
}

// DefaultKeepCheck is how often stasisd compares the node's available
// memory with the keep policy's reserve.
const DefaultKeepCheck = 2 * time.Second

func (p *KeepPolicy) memory() (available, reserve uint64, err error) {
	read := p.Memory
	if read == nil {
		read = procMemory
	}
	available, total, err := read()
	if err != nil {
		return 0, 0, err
	}
	reserve = p.Reserve
	if reserve == 0 {
		reserve = total / 4
	}
	return available, reserve, nil
}

func procMemory() (available, total uint64, err error) {
	m, err := procfs.Meminfo("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	return m["MemAvailable"], m["MemTotal"], nil
}

// keep is a pause's answer to the engine's question once its snapshot is
// committed: keep the sandbox when the policy allows and the node has room.
func (s *Actors) keep() func() (bool, string) {
	p := s.cfg.KeepPaused
	if p == nil {
		return nil
	}
	return func() (bool, string) {
		available, reserve, err := p.memory()
		if err != nil {
			return false, fmt.Sprintf("the node's memory cannot be read: %v", err)
		}
		if available < reserve {
			return false, fmt.Sprintf("%s of memory available, under the reserve of %s", units.Bytes(available), units.Bytes(reserve))
		}
		return true, fmt.Sprintf("%s of memory available, the reserve is %s", units.Bytes(available), units.Bytes(reserve))
	}
}

// kept says whether a PAUSED actor's sandbox is there, frozen.
func (s *Actors) kept(ctx context.Context, a journal.Actor) bool {
	st, err := s.engines.Of(a).Status(ctx, a.Sandbox)
	return err == nil && st == runtime.StatusPaused
}

// Release stops the kept sandboxes of paused actors, the longest paused
// first, while the node's available memory is under the keep policy's
// reserve; it returns how many it stopped. The actors stay PAUSED and
// resume from their snapshots. stasisd runs it every DefaultKeepCheck.
func (s *Actors) Release(ctx context.Context) (int, error) {
	p := s.cfg.KeepPaused
	if p == nil {
		return 0, nil
	}
	available, reserve, err := p.memory()
	if err != nil || available >= reserve {
		return 0, err
	}
	actors, err := s.runner.ActorRecords(ctx)
	if err != nil {
		return 0, err
	}
	sort.Slice(actors, func(i, j int) bool { return actors[i].UpdatedAt.Before(actors[j].UpdatedAt) })
	released := 0
	for _, a := range actors {
		if available >= reserve {
			break
		}
		if api.State(a.State) != api.Paused || a.Running != nil || !s.kept(ctx, a) {
			continue
		}
		why := fmt.Sprintf("%s of memory available, under the reserve of %s", units.Bytes(available), units.Bytes(reserve))
		if err := s.release(ctx, a.ID, why); err != nil {
			var busy *journal.BusyError
			var state *journal.StateError
			if errors.As(err, &busy) || errors.As(err, &state) {
				continue // an operation took the actor meanwhile
			}
			return released, err
		}
		released++
		if available, reserve, err = p.memory(); err != nil {
			return released, err
		}
	}
	return released, nil
}

// release stops a paused actor's kept sandbox, as an operation of its own
// so that no other runs on the actor meanwhile.
func (s *Actors) release(ctx context.Context, id, why string) error {
	_, err := s.runner.Run(ctx, op.Request{Kind: op.Release, Actor: id,
		Prepare: func(before journal.Actor) (op.Args, error) { return op.Args{Previous: api.State(before.State)}, nil },
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			reason := "its sandbox was stopped to free memory (" + why + "): resume loads its snapshot"
			if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
				return op.Outcome{State: api.Paused, Reason: o.Actor.Reason, Idle: o.Actor.Idle}, err
			}
			return op.Outcome{State: api.Paused, Reason: reason, Idle: o.Actor.Idle}, nil
		}})
	return err
}

// KeepReleasing runs Release every interval, in a goroutine of its own,
// until ctx ends, logging what it did.
func (s *Actors) KeepReleasing(ctx context.Context, interval time.Duration) {
	if s.cfg.KeepPaused == nil {
		return
	}
	tick.Every(ctx, interval, func() {
		n, err := s.Release(ctx)
		if err != nil {
			s.cfg.Log.Warn("kept sandboxes could not be released", "released", n, "error", err.Error())
		} else if n > 0 {
			s.cfg.Log.Info("kept sandboxes of paused actors stopped to free memory", "released", n)
		}
	})
}
