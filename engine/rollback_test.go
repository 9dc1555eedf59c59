package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

// The engine's rollback contract as a table over the fake runtime: each
// operation is run once to list the runtime calls it makes, then again
// with each of those calls failing in turn, and what it leaves is checked:
//   - a suspend that fails leaves the workload running with its memory (not
//     frozen, its CUDA processes running), or, past the commit, a whole
//     snapshot that resumes with it;
//   - a resume that fails leaves no sandbox of the new id running and the
//     snapshot whole: a resume after it brings the workload back;
//   - a kept resume that fails leaves the kept sandbox frozen or removed
//     (ErrNotKept), never running half-thawed.
// It runs in seconds without root; the real-runtime tests check the same
// on runsc for the failures a real sandbox can have.

// callLog is a Hook that records the runtime calls and fails the n-th
// (from 1; 0 fails none).
type callLog struct {
	mu    sync.Mutex
	calls []string
	fail  int
}

func (l *callLog) hook(_ context.Context, method, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, method+" "+id)
	if len(l.calls) == l.fail {
		return fmt.Errorf("%s of %s: %w", method, id, runtimetest.ErrInjected)
	}
	return nil
}

// rollbackFixture is an actor on a fresh fake runtime: booted, its counter
// at 3, with two CUDA processes when gpu.
type rollbackFixture struct {
	rt   *runtimetest.Runtime
	eng  *engine.Engine
	a    engine.Actor
	inst string
	dir  string
}

func newRollbackFixture(t *testing.T, gpu bool) *rollbackFixture {
	t.Helper()
	rt := runtimetest.New()
	b := t.TempDir()
	if err := bundle.Save(b, &specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/counter"}}, Root: &specs.Root{Path: "rootfs"}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rt.Create(ctx, "a1", b, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	sb, _ := rt.Sandbox("a1")
	sb.Counter = 3
	if gpu {
		sb.CUDA = []string{"running", "running"}
	}
	rt.Put("a1", &sb)
	return &rollbackFixture{rt: rt, eng: &engine.Engine{Runtime: rt}, a: engine.Actor{ID: "a1", Bundle: b, GPU: gpu}, inst: sb.Instance, dir: filepath.Join(t.TempDir(), "snap")}
}

// intact tells whether sandbox id runs the fixture's process with its
// memory, CUDA processes running.
func (f *rollbackFixture) intact(id string) error {
	sb, ok := f.rt.Sandbox(id)
	switch {
	case !ok:
		return errors.New("no sandbox")
	case sb.Status != runtime.StatusRunning:
		return fmt.Errorf("the sandbox is %s", sb.Status)
	case sb.Instance != f.inst || sb.Counter != 3:
		return fmt.Errorf("the sandbox runs %s with counter %d, want %s with 3", sb.Instance, sb.Counter, f.inst)
	case slices.ContainsFunc(sb.CUDA, func(s string) bool { return s != "running" }):
		return fmt.Errorf("its CUDA processes are %v", sb.CUDA)
	}
	return nil
}

// resumable tells whether the snapshot is whole and resumes the process
// with its memory, on a runtime that fails nothing.
func (f *rollbackFixture) resumable(id string) error {
	if _, err := snapshot.Verify(context.Background(), f.dir); err != nil {
		return fmt.Errorf("the snapshot: %w", err)
	}
	f.rt.Hook = nil
	if _, err := f.eng.Resume(context.Background(), movedTo(f.a, id), f.dir, engine.ResumeOptions{}); err != nil {
		return fmt.Errorf("a resume of the snapshot: %w", err)
	}
	return f.intact(id)
}

type rollbackOp struct {
	name string
	gpu  bool
	// prepare brings the fixture to where the operation starts.
	prepare func(t *testing.T, f *rollbackFixture)
	// run is the operation.
	run func(f *rollbackFixture) error
	// check is the contract after run failed.
	check func(f *rollbackFixture, err error) error
}

func suspendOp(name string, gpu, keep bool) rollbackOp {
	return rollbackOp{
		name: name, gpu: gpu,
		run: func(f *rollbackFixture) error {
			opts := engine.SuspendOptions{Dir: f.dir}
			if keep {
				opts.Keep = func() (bool, string) { return true, "the table asks" }
			}
			_, err := f.eng.Suspend(context.Background(), f.a, opts)
			return err
		},
		check: func(f *rollbackFixture, _ error) error {
			if sb, ok := f.rt.Sandbox(f.a.ID); ok && sb.Status == runtime.StatusPaused {
				return errors.New("the failed suspend left the workload frozen")
			}
			running := f.intact(f.a.ID)
			if running == nil {
				return nil
			}
			if _, err := snapshot.Load(f.dir); err != nil {
				return fmt.Errorf("neither the workload (%v) nor a snapshot (%v) is left", running, err)
			}
			_ = f.rt.Delete(context.Background(), f.a.ID)
			return f.resumable("a1-back")
		},
	}
}

// suspended makes the snapshot a resume starts from, the sandbox gone (or
// kept frozen).
func suspended(keep bool) func(t *testing.T, f *rollbackFixture) {
	return func(t *testing.T, f *rollbackFixture) {
		t.Helper()
		opts := engine.SuspendOptions{Dir: f.dir}
		if keep {
			opts.Keep = func() (bool, string) { return true, "the table asks" }
		}
		if _, err := f.eng.Suspend(context.Background(), f.a, opts); err != nil {
			t.Fatal(err)
		}
	}
}

func resumeOp(name string, gpu bool) rollbackOp {
	return rollbackOp{
		name: name, gpu: gpu, prepare: suspended(false),
		run: func(f *rollbackFixture) error {
			_, err := f.eng.Resume(context.Background(), movedTo(f.a, "a2"), f.dir, engine.ResumeOptions{Probe: counterProbe})
			return err
		},
		check: func(f *rollbackFixture, _ error) error {
			if sb, ok := f.rt.Sandbox("a2"); ok && sb.Status == runtime.StatusRunning {
				return errors.New("the failed resume left its sandbox running")
			}
			_ = f.rt.Delete(context.Background(), "a2")
			return f.resumable("a3")
		},
	}
}

var counterProbe = engine.Probe{Command: []string{"/counter", "await", "get"}}

var rollbackOps = []rollbackOp{
	suspendOp("suspend", false, false),
	suspendOp("suspend-gpu", true, false),
	suspendOp("suspend-keep", false, true),
	suspendOp("suspend-keep-gpu", true, true),
	resumeOp("resume", false),
	resumeOp("resume-gpu", true),
	{
		name: "resume-kept-gpu", gpu: true, prepare: suspended(true),
		run: func(f *rollbackFixture) error {
			return f.eng.ResumeKept(context.Background(), f.a, f.dir, engine.ResumeOptions{Probe: counterProbe})
		},
		check: func(f *rollbackFixture, err error) error {
			sb, ok := f.rt.Sandbox(f.a.ID)
			switch {
			case errors.Is(err, engine.ErrNotKept):
				if ok && sb.Status == runtime.StatusRunning {
					return errors.New("ErrNotKept, yet the kept sandbox runs")
				}
			case !ok || sb.Status != runtime.StatusPaused:
				return fmt.Errorf("a failed kept resume without ErrNotKept left the sandbox %v (exists %v); want it frozen as it was", sb.Status, ok)
			}
			_ = f.rt.Delete(context.Background(), f.a.ID)
			return f.resumable("a1-back")
		},
	},
}

func TestRollbackAtEveryRuntimeCall(t *testing.T) {
	for _, op := range rollbackOps {
		t.Run(op.name, func(t *testing.T) {
			clean := newRollbackFixture(t, op.gpu)
			if op.prepare != nil {
				op.prepare(t, clean)
			}
			log := &callLog{}
			clean.rt.Hook = log.hook
			if err := op.run(clean); err != nil {
				t.Fatalf("without failures: %v", err)
			}
			calls := log.calls
			if len(calls) == 0 {
				t.Fatal("the operation made no runtime call")
			}
			for n := 1; n <= len(calls); n++ {
				t.Run(fmt.Sprintf("%02d-%s", n, calls[n-1]), func(t *testing.T) {
					f := newRollbackFixture(t, op.gpu)
					if op.prepare != nil {
						op.prepare(t, f)
					}
					f.rt.Hook = (&callLog{fail: n}).hook
					err := op.run(f)
					if err == nil {
						// Some calls may fail without failing the
						// operation (a report, a cleanup); then it must
						// have done its job.
						t.Logf("the operation succeeded with %s failing", calls[n-1])
						return
					}
					// The failure is in the error's chain, or, where the
					// preflight found it, named in its refusal.
					if !errors.Is(err, runtimetest.ErrInjected) && !(errors.Is(err, engine.ErrRefused) && strings.Contains(err.Error(), runtimetest.ErrInjected.Error())) {
						t.Errorf("the error does not carry the failure: %v", err)
					}
					if cerr := op.check(f, err); cerr != nil {
						t.Fatalf("%s failing (%v): %v", calls[n-1], err, cerr)
					}
				})
			}
		})
	}
}
