package service

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

// One stasisd runs actors in two runtimes: gVisor (Config.Engine) and
// micro-VMs (Config.MicroVM). Each actor records the runtime its template
// named when it was made, and every engine call for it goes to that
// runtime's engine; templates, operations, the journal, crash recovery,
// the kept pause, the store and golden snapshots are the same for both.

// engineFor is the engine of the runtime a template or actor names.
func (s *Service) engineFor(name string) *engine.Engine {
	if name == api.RuntimeMicroVM {
		return s.microVM
	}
	return s.eng
}

// engineOf is the engine of an actor's runtime.
func (s *Service) engineOf(a journal.Actor) *engine.Engine { return s.engineFor(a.Runtime) }

// engineForSnapshot is the engine of the runtime a snapshot was taken
// with; the gVisor one when no runtime here took it, whose check then
// refuses it with the runtime it needs.
func (s *Service) engineForSnapshot(m *snapshot.Manifest) *engine.Engine {
	if s.cfg.MicroVM != nil && m.Runtime.Name == s.cfg.MicroVM.Runtime.Info().Name {
		return s.microVM
	}
	return s.eng
}

// runtimeOffered refuses a template naming a runtime this stasisd does not
// run, with the reason and the fix.
func (s *Service) runtimeOffered(t api.Template) error {
	switch t.Runtime {
	case "", api.RuntimeGVisor:
		return nil
	case api.RuntimeMicroVM:
		if s.cfg.MicroVM == nil {
			return fmt.Errorf("%w: template %s wants micro-VM actors, and this stasisd runs none: %s", errdefs.ErrFailedPrecondition, t.Name, s.cfg.microVMAbsence())
		}
		return nil
	}
	return fmt.Errorf("%w: template %s: runtime %q: want %s or %s", ErrInvalid, t.Name, t.Runtime, api.RuntimeGVisor, api.RuntimeMicroVM)
}

// microVMAbsence says why this stasisd runs no micro-VMs, and the fix.
func (c Config) microVMAbsence() string {
	if c.MicroVMUnavailable != "" {
		return c.MicroVMUnavailable
	}
	return "stasisd was started without it (start it with --microvm=on, QEMU installed: scripts/install-microvm.sh)"
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

// newMicroVMEngine is the engine micro-VM actors use: the configured one,
// or one over absentRuntime.
func newMicroVMEngine(cfg Config) *engine.Engine {
	if cfg.MicroVM != nil {
		return cfg.MicroVM
	}
	return &engine.Engine{Runtime: absentRuntime{name: api.RuntimeMicroVM, reason: cfg.microVMAbsence()}, CleanupTimeout: time.Second}
}
