// Package runtimetest is a runtime.Runtime that runs no sandbox: each
// "sandbox" is a record in memory holding a counter, which Checkpoint writes
// into the image folder and Restore reads back. It exists so that the
// service's logic (every transition, every reconcile branch, deadlines,
// races) can be tested in seconds without root; the real runtimes have
// their own tests against real sandboxes (runtime/conformance).
//
// Inside a sandbox, Exec understands the test actor's "/counter await incr"
// and "/counter await get" (answering "<sandbox's instance> <value>"), and
// "true"; anything else exits 127 like a missing command. A Hook can make any call fail, or
// block until the caller's context ends, to stage faults.
package runtimetest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/runtime"
)

// Sandbox is one fake sandbox.
type Sandbox struct {
	Status runtime.Status
	Bundle string
	// Instance is the process's identity: a restore from a checkpoint
	// keeps it, a fresh boot makes a new one.
	Instance string
	Counter  int
	PID      int
	// CUDA are the states of the sandbox's CUDA processes (running,
	// locked, checkpointed), pids 1, 2, ...
	CUDA []string
}

// Runtime is the fake. The zero value is not usable; use New.
type Runtime struct {
	mu        sync.Mutex
	sandboxes map[string]*Sandbox
	boots     int
	// Hook, when set, runs first in every method with the method's name
	// ("Create", "Checkpoint", ...) and the container id: an error it
	// returns is the method's.
	Hook func(ctx context.Context, method, id string) error
	// Calls counts the calls of each method.
	Calls map[string]int
	Caps  runtime.Capabilities
	// GPUABI is the driver ABI Info reports GPU sandboxes run with.
	GPUABI string
	// Name is the name Info reports; "fake" when empty (a second fake
	// standing in for another runtime takes another).
	Name string
	// LastCheckpoint and LastRestore are the options the last calls got.
	LastCheckpoint runtime.CheckpointOptions
	LastRestore    runtime.RestoreOptions
}

var _ runtime.Runtime = (*Runtime)(nil)

// New makes a fake runtime with no sandbox.
func New() *Runtime {
	return &Runtime{sandboxes: map[string]*Sandbox{}, Calls: map[string]int{}}
}

// Block is a Hook action: it waits until ctx ends and returns its error, as
// a runtime command that hangs until it is killed.
func Block(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("fake runtime killed: %w", ctx.Err())
}

func (r *Runtime) enter(ctx context.Context, method, id string) error {
	r.mu.Lock()
	r.Calls[method]++
	hook := r.Hook
	r.mu.Unlock()
	if hook != nil {
		return hook(ctx, method, id)
	}
	return nil
}

// Sandbox is a copy of the fake sandbox id, and whether it exists.
func (r *Runtime) Sandbox(id string) (Sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[id]
	if !ok {
		return Sandbox{}, false
	}
	return *s, true
}

// Put sets the fake sandbox id, as a test's staging of what a crashed
// daemon left; a nil s removes it.
func (r *Runtime) Put(id string, s *Sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s == nil {
		delete(r.sandboxes, id)
		return
	}
	c := *s
	r.sandboxes[id] = &c
}

// Capabilities are Caps.
func (r *Runtime) Capabilities() runtime.Capabilities { return r.Caps }

func (r *Runtime) Info() runtime.Info {
	return runtime.Info{Name: cmp.Or(r.Name, "fake"), Version: "1", Platform: "memory", GPUABI: r.GPUABI}
}

func (r *Runtime) Create(ctx context.Context, id, bundle string, _ runtime.CreateOptions) error {
	if err := r.enter(ctx, "Create", id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sandboxes[id]; ok {
		return fmt.Errorf("container %s already exists", id)
	}
	if _, err := os.Stat(filepath.Join(bundle, "config.json")); err != nil {
		return fmt.Errorf("create %s: %w", id, err)
	}
	r.boots++
	r.sandboxes[id] = &Sandbox{Status: runtime.StatusCreated, Bundle: bundle, Instance: fmt.Sprintf("boot%d", r.boots), PID: 1000 + r.boots}
	return nil
}

func (r *Runtime) get(id string) (*Sandbox, error) {
	s, ok := r.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	return s, nil
}

func (r *Runtime) Start(ctx context.Context, id string) error {
	return r.transition(ctx, "Start", id, runtime.StatusCreated, runtime.StatusRunning)
}

func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.transition(ctx, "Pause", id, runtime.StatusRunning, runtime.StatusPaused)
}

func (r *Runtime) Unpause(ctx context.Context, id string) error {
	return r.transition(ctx, "Unpause", id, runtime.StatusPaused, runtime.StatusRunning)
}

func (r *Runtime) transition(ctx context.Context, method, id string, from, to runtime.Status) error {
	if err := r.enter(ctx, method, id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.get(id)
	if err != nil {
		return err
	}
	if s.Status != from {
		return fmt.Errorf("%s %s: container is %s, not %s", strings.ToLower(method), id, s.Status, from)
	}
	s.Status = to
	return nil
}

func (r *Runtime) Exec(ctx context.Context, id string, p runtime.Process) (runtime.ExecResult, error) {
	if err := r.enter(ctx, "Exec", id); err != nil {
		return runtime.ExecResult{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.get(id)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	if s.Status != runtime.StatusRunning {
		return runtime.ExecResult{}, fmt.Errorf("exec in %s: container is %s", id, s.Status)
	}
	switch strings.Join(p.Args, " ") {
	case "/counter await incr":
		s.Counter++
		fallthrough
	case "/counter await get":
		return runtime.ExecResult{Stdout: fmt.Appendf(nil, "%s %d\n", s.Instance, s.Counter)}, nil
	case "true":
		return runtime.ExecResult{}, nil
	}
	if p.Args[0] == bundle.HelperPath {
		return helper(s, p.Args[1:]), nil
	}
	return runtime.ExecResult{ExitCode: 127, Stderr: fmt.Appendf(nil, "%s: not found\n", p.Args[0])}, nil
}

// helper answers the stasis-cuda helper's command lines over s.CUDA.
func helper(s *Sandbox, args []string) runtime.ExecResult {
	if len(args) == 0 || args[0] == "--help" {
		return runtime.ExecResult{}
	}
	to := map[string]string{"suspend": "checkpointed", "resume": "running"}
	rep := runtime.GPUReport{Op: args[0], DriverVersion: 13000}
	for i, st := range s.CUDA {
		rep.Processes = append(rep.Processes, runtime.GPUProcess{PID: i + 1, State: st})
		if next, ok := to[args[0]]; ok && st != next {
			s.CUDA[i] = next
			rep.Outcomes = append(rep.Outcomes, runtime.GPUOutcome{PID: i + 1})
		}
	}
	out, _ := json.Marshal(rep)
	return runtime.ExecResult{Stdout: out}
}

// imageFile holds a checkpoint's counter; pages.img makes the image look
// like runsc's, with some bytes to hash.
const imageFile = "checkpoint.img"

func (r *Runtime) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	if err := r.enter(ctx, "Checkpoint", id); err != nil {
		return err
	}
	r.mu.Lock()
	r.LastCheckpoint = opts
	s, err := r.get(id)
	var state string
	if err == nil {
		cuda, by := slices.Clone(s.CUDA), "engine"
		if opts.CUDACheckpointPath != "" {
			// The runtime checkpoints them for the save, then puts them
			// back (the sandbox runs on).
			for i := range cuda {
				cuda[i] = "checkpointed"
			}
			by = "runtime"
		}
		state = s.Instance + " " + strconv.Itoa(s.Counter) + " " + strings.Join(cuda, ",") + " " + by
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if opts.CUDACheckpointPath != "" && !r.Caps.CUDACheckpoint {
		return fmt.Errorf("checkpoint %s: this runtime runs no CUDA helper", id)
	}
	if err := fsutil.MkdirEmpty(opts.ImageDir); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(opts.ImageDir, imageFile), []byte(state), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(opts.ImageDir, "pages.img"), []byte(strings.Repeat(state+"\n", 4096)), 0o600)
}

func (r *Runtime) Restore(ctx context.Context, id string, opts runtime.RestoreOptions) error {
	if err := r.enter(ctx, "Restore", id); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(opts.ImageDir, imageFile))
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	fields := strings.Split(string(data), " ")
	if len(fields) != 4 {
		return fmt.Errorf("restore %s: image %q", id, data)
	}
	n, err := strconv.Atoi(fields[1])
	if err != nil {
		return fmt.Errorf("restore %s: image %q: %w", id, data, err)
	}
	var cuda []string
	if fields[2] != "" {
		cuda = strings.Split(fields[2], ",")
	}
	if fields[3] == "runtime" {
		// The runtime puts back what it checkpointed.
		for i := range cuda {
			cuda[i] = "running"
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.LastRestore = opts
	if _, ok := r.sandboxes[id]; ok {
		return fmt.Errorf("container %s already exists", id)
	}
	r.boots++
	r.sandboxes[id] = &Sandbox{Status: runtime.StatusRunning, Bundle: opts.Bundle, Instance: fields[0], Counter: n, PID: 1000 + r.boots, CUDA: cuda}
	return nil
}

func (r *Runtime) Stop(ctx context.Context, id string) error {
	if err := r.enter(ctx, "Stop", id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.get(id)
	if err != nil {
		return err
	}
	s.Status = runtime.StatusStopped
	return nil
}

func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := r.enter(ctx, "Delete", id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sandboxes, id)
	return nil
}

func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	if err := r.enter(ctx, "State", id); err != nil {
		return runtime.State{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.get(id)
	if err != nil {
		return runtime.State{}, err
	}
	return runtime.State{ID: id, Status: s.Status, PID: s.PID, Bundle: s.Bundle}, nil
}

func (r *Runtime) MemoryUsage(ctx context.Context, id string) (uint64, error) {
	if err := r.enter(ctx, "MemoryUsage", id); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.get(id); err != nil {
		return 0, err
	}
	return 1 << 20, nil
}

// ErrInjected is what a Fail hook returns.
var ErrInjected = errors.New("injected failure")

// Fail is a Hook that fails method on every container.
func Fail(method string) func(context.Context, string, string) error {
	return func(_ context.Context, m, _ string) error {
		if m == method {
			return fmt.Errorf("%s: %w", strings.ToLower(m), ErrInjected)
		}
		return nil
	}
}
