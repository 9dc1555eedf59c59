package group

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/gpu"
)

// Options tune a group operation.
type Options struct {
	// LockTimeout bounds how long a lock waits for a process's running GPU
	// work; zero waits as long as it takes.
	LockTimeout time.Duration
	// DeviceMap sends state checkpointed on one GPU to another at resume.
	DeviceMap gpu.DeviceMap
	// Progress, when set, hears of each process as its step ends, from the
	// goroutine that did it.
	Progress func(Outcome)
}

// Outcome is what a group operation did to one process.
type Outcome struct {
	PID      int               `json:"pid"`
	Before   cuda.ProcessState `json:"before"`
	After    cuda.ProcessState `json:"after"`
	Duration time.Duration     `json:"durationNs"`
	Err      string            `json:"error,omitempty"`
}

// Report is what stasis-cuda prints with --json, and what Stasis's engine
// reads back from the helper it runs inside a sandbox.
type Report struct {
	Op            string        `json:"op"`
	DriverVersion int           `json:"driverVersion"`
	Library       string        `json:"library"`
	Processes     []Process     `json:"processes,omitempty"`
	Outcomes      []Outcome     `json:"outcomes,omitempty"`
	DurationNs    time.Duration `json:"durationNs"`
	// Steps times the helper's own phases: loading the driver, scanning
	// the processes, and the operation itself.
	Steps map[string]time.Duration `json:"stepsNs,omitempty"`
	Error string                   `json:"error,omitempty"`
	// Skipped says why nothing was done, when a micro-VM's guest agent
	// finds no NVIDIA device in the guest.
	Skipped string `json:"skipped,omitempty"`
}

// Failure is one process's error within a group operation.
type Failure struct {
	PID int
	Err error
}

// Error is a group operation that failed and was undone. It names every
// process that failed and why, and any process the undo could not return.
type Error struct {
	Op       string // "suspend" or "resume"
	Failures []Failure
	// UndoFailures are processes that could not be put back as they were.
	UndoFailures []Failure
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed for %d process(es)", e.Op, len(e.Failures))
	for _, f := range e.Failures {
		fmt.Fprintf(&b, "; pid %d: %v", f.PID, f.Err)
	}
	if len(e.UndoFailures) == 0 {
		b.WriteString("; every process was put back as it was")
	}
	for _, f := range e.UndoFailures {
		fmt.Fprintf(&b, "; undo of pid %d failed: %v", f.PID, f.Err)
	}
	return b.String()
}

// Unwrap gives the causes, so errors.Is finds a cuda.Result among them.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, len(e.Failures)+len(e.UndoFailures))
	for _, f := range e.Failures {
		errs = append(errs, f.Err)
	}
	for _, f := range e.UndoFailures {
		errs = append(errs, f.Err)
	}
	return errs
}

// Suspend locks and checkpoints every process in parallel, leaving them all
// CHECKPOINTED, their GPUs released. Processes already locked or checkpointed
// are carried the rest of the way. If any process fails, every process is
// returned to RUNNING and the error is an *Error.
func Suspend(ctx context.Context, d Driver, procs []Process, opt Options) ([]Outcome, error) {
	timeoutMs := uint32(min(opt.LockTimeout.Milliseconds(), int64(^uint32(0))))
	forward := func(p Process, reached *cuda.ProcessState) error {
		if *reached == cuda.StateRunning {
			if err := d.Lock(p.PID, timeoutMs); err != nil {
				return err
			}
			*reached = cuda.StateLocked
		}
		if *reached == cuda.StateLocked {
			if err := d.Checkpoint(p.PID); err != nil {
				return err
			}
			*reached = cuda.StateCheckpointed
		}
		return nil
	}
	undo := func(p Process, reached *cuda.ProcessState) error {
		return toRunning(d, p.PID, reached, nil)
	}
	return run(ctx, "suspend", procs, forward, undo, opt.Progress)
}

// Resume restores and unlocks every process in parallel, leaving them all
// RUNNING; a process found LOCKED but not checkpointed is only unlocked. If
// any process fails, the ones already resumed are checkpointed again so the
// group stays whole, and the error is an *Error.
func Resume(ctx context.Context, d Driver, procs []Process, opt Options) ([]Outcome, error) {
	forward := func(p Process, reached *cuda.ProcessState) error {
		return toRunning(d, p.PID, reached, opt.DeviceMap)
	}
	undo := func(p Process, reached *cuda.ProcessState) error {
		if *reached == cuda.StateRunning {
			if err := d.Lock(p.PID, 0); err != nil {
				return err
			}
			*reached = cuda.StateLocked
		}
		if *reached == cuda.StateLocked && p.State == cuda.StateCheckpointed {
			if err := d.Checkpoint(p.PID); err != nil {
				return err
			}
			*reached = cuda.StateCheckpointed
		}
		return nil
	}
	return run(ctx, "resume", procs, forward, undo, opt.Progress)
}

func toRunning(d Driver, pid int, reached *cuda.ProcessState, devices gpu.DeviceMap) error {
	if *reached == cuda.StateCheckpointed {
		if err := d.Restore(pid, devices); err != nil {
			return err
		}
		*reached = cuda.StateLocked
	}
	if *reached == cuda.StateLocked {
		if err := d.Unlock(pid); err != nil {
			return err
		}
		*reached = cuda.StateRunning
	}
	return nil
}

type step func(p Process, reached *cuda.ProcessState) error

// run does forward on every process at once; if any fails, it does undo on
// every process that forward moved, again at once.
func run(ctx context.Context, op string, procs []Process, forward, undo step, progress func(Outcome)) ([]Outcome, error) {
	outcomes := make([]Outcome, len(procs))
	reached := make([]cuda.ProcessState, len(procs))
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		reached[i] = p.State
		wg.Go(func() {
			start := time.Now()
			if err := ctx.Err(); err != nil {
				errs[i] = err
			} else {
				errs[i] = forward(p, &reached[i])
			}
			outcomes[i] = Outcome{PID: p.PID, Before: p.State, After: reached[i], Duration: time.Since(start)}
			if errs[i] != nil {
				outcomes[i].Err = errs[i].Error()
			}
			if progress != nil {
				progress(outcomes[i])
			}
		})
	}
	wg.Wait()

	var gerr *Error
	for i, err := range errs {
		if err != nil {
			if gerr == nil {
				gerr = &Error{Op: op}
			}
			gerr.Failures = append(gerr.Failures, Failure{PID: procs[i].PID, Err: err})
		}
	}
	if gerr != nil {
		undoErrs := make([]error, len(procs))
		for i, p := range procs {
			if reached[i] != p.State {
				wg.Go(func() { undoErrs[i] = undo(p, &reached[i]) })
			}
		}
		wg.Wait()
		for i, err := range undoErrs {
			if err != nil {
				gerr.UndoFailures = append(gerr.UndoFailures, Failure{PID: procs[i].PID, Err: err})
			}
		}
	}
	for i := range outcomes {
		outcomes[i].After = reached[i]
	}
	slices.SortFunc(outcomes, func(a, b Outcome) int { return a.PID - b.PID })
	if gerr != nil {
		return outcomes, gerr
	}
	return outcomes, nil
}
