// Package runtimes gives each actor the engine of the runtime it runs in.
package runtimes

import (
	"context"
	"fmt"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// One stasisd runs actors in two runtimes: gVisor and micro-VMs. Each
// actor records the runtime its template named when it was made, and every
// engine call for it goes to that runtime's engine; templates, operations,
// the journal, crash recovery, the kept pause, the store and golden
// snapshots are the same for both.

// Engines are the engines of the runtimes this stasisd runs: gVisor's, and
// the micro-VMs' when it runs them.
type Engines struct {
	gvisor *engine.Engine
	// microVM is the configured engine, or one over absentRuntime when
	// none is (configured nil), absence saying why.
	microVM, configured *engine.Engine
	absence             string
}

// New are the engines: gvisor, and microVM unless it is nil, which
// unavailable says why (empty: it was not asked for).
func New(gvisor, microVM *engine.Engine, unavailable string) *Engines {
	e := &Engines{gvisor: gvisor, microVM: microVM, configured: microVM, absence: unavailable}
	if e.absence == "" {
		e.absence = "stasisd was started without it (start it with --microvm=on, QEMU installed: scripts/install-microvm.sh)"
	}
	if microVM == nil {
		e.microVM = &engine.Engine{Runtime: absentRuntime{name: api.RuntimeMicroVM, reason: e.absence}, CleanupTimeout: time.Second}
	}
	return e
}

// For is the engine of the runtime a template or actor names.
func (e *Engines) For(name string) *engine.Engine {
	if name == api.RuntimeMicroVM {
		return e.microVM
	}
	return e.gvisor
}

// Of is the engine of an actor's runtime.
func (e *Engines) Of(a journal.Actor) *engine.Engine { return e.For(a.Runtime) }

// MicroVM is the micro-VM runtime's engine, nil when this stasisd runs
// none, and why not.
func (e *Engines) MicroVM() (*engine.Engine, string) { return e.configured, e.absence }

// ForSnapshot is the engine of the runtime a snapshot was taken with; the
// gVisor one when no runtime here took it, whose check then refuses it
// with the runtime it needs.
func (e *Engines) ForSnapshot(m *snapshot.Manifest) *engine.Engine {
	if e.configured != nil && m.Runtime.Name == e.configured.Runtime.Info().Name {
		return e.microVM
	}
	return e.gvisor
}

// Offered refuses a template naming a runtime this stasisd does not run,
// with the reason and the fix.
func (e *Engines) Offered(t api.Template) error {
	switch t.Runtime {
	case "", api.RuntimeGVisor:
		return nil
	case api.RuntimeMicroVM:
		if e.configured == nil {
			return fmt.Errorf("%w: template %s wants micro-VM actors, and this stasisd runs none: %s", errdefs.ErrFailedPrecondition, t.Name, e.absence)
		}
		return nil
	}
	return fmt.Errorf("%w: template %s: runtime %q: want %s or %s", errdefs.ErrInvalidArgument, t.Name, t.Runtime, api.RuntimeGVisor, api.RuntimeMicroVM)
}

// absentRuntime stands in for a runtime this stasisd does not run, so that
// an actor of it (made by a stasisd that ran it) is left as it is: every
// call is refused with the reason, and the reconciler, told nothing of its
// sandbox, touches nothing.
type absentRuntime struct {
	name, reason string
}

func (r absentRuntime) err() error {
	return fmt.Errorf("%w: the %s runtime is not running in this stasisd: %s", errdefs.ErrFailedPrecondition, r.name, r.reason)
}

func (r absentRuntime) Info() runtime.Info                 { return runtime.Info{Name: r.name + " (not running)"} }
func (r absentRuntime) Capabilities() runtime.Capabilities { return runtime.Capabilities{} }
func (r absentRuntime) Create(context.Context, string, string, runtime.CreateOptions) error {
	return r.err()
}
func (r absentRuntime) Start(context.Context, string) error { return r.err() }
func (r absentRuntime) Exec(context.Context, string, runtime.Process) (runtime.ExecResult, error) {
	return runtime.ExecResult{}, r.err()
}
func (r absentRuntime) Checkpoint(context.Context, string, runtime.CheckpointOptions) error {
	return r.err()
}
func (r absentRuntime) Restore(context.Context, string, runtime.RestoreOptions) error {
	return r.err()
}
func (r absentRuntime) Pause(context.Context, string) error   { return r.err() }
func (r absentRuntime) Unpause(context.Context, string) error { return r.err() }
func (r absentRuntime) Stop(context.Context, string) error    { return r.err() }
func (r absentRuntime) Delete(context.Context, string) error  { return r.err() }
func (r absentRuntime) State(context.Context, string) (runtime.State, error) {
	return runtime.State{}, r.err()
}
func (r absentRuntime) MemoryUsage(context.Context, string) (uint64, error) { return 0, r.err() }
