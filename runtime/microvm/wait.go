package microvm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// waitPoll is how often Wait asks the guest agent whether the workload
// runs: the guest's serial port has one caller at a time, so the agent
// cannot hold a call open until the workload ends.
const waitPoll = time.Second

// waitCall bounds each question: an agent answering another caller (a long
// exec) or a paused guest answers none meanwhile, and is asked again.
const waitCall = 5 * time.Second

// Wait is runtime.Waiter's: it asks the guest agent every waitPoll until
// the workload has ended and says how. The VM runs on (its agent is the
// guest's init): the caller stops it, as a gVisor sandbox stops with its
// process. A VM whose QEMU ended (the guest powered off or panicked, or an
// operation stopped it) is an error: how the workload ended is unknown.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	for {
		st, err := r.load(id)
		if err != nil {
			return runtime.Exit{}, err
		}
		if !alive(st.PID, st.Start) {
			return runtime.Exit{}, fmt.Errorf("VM %s: QEMU ended, and with it what the guest knew of its workload", id)
		}
		if w, err := r.workload(ctx, id); err == nil && w.PID > 0 && !w.Running {
			return exitOf(w), nil
		}
		select {
		case <-ctx.Done():
			return runtime.Exit{}, ctx.Err()
		case <-time.After(waitPoll):
		}
	}
}

// workload asks the guest agent where the workload stands (OpWorkload; an
// agent older than it is asked for its facts).
func (r *Runtime) workload(ctx context.Context, id string) (agent.Workload, error) {
	ctx, cancel := context.WithTimeout(ctx, waitCall)
	defer cancel()
	rep, err := r.call(ctx, id, agent.Request{Op: agent.OpWorkload})
	if err == nil && rep.Workload != nil {
		return *rep.Workload, nil
	}
	if err != nil && !strings.Contains(err.Error(), "unknown op") {
		return agent.Workload{}, err
	}
	facts, err := r.Facts(ctx, id)
	if err != nil {
		return agent.Workload{}, err
	}
	if facts == nil {
		return agent.Workload{}, errors.New("the guest agent reported no facts")
	}
	return facts.Workload, nil
}

// exitOf is how an ended workload ended, as runtime.Exit says it.
func exitOf(w agent.Workload) runtime.Exit {
	if w.Signal > 0 {
		return runtime.Exit{Status: 128 + w.Signal}
	}
	return runtime.Exit{Status: w.ExitCode}
}

var _ runtime.Waiter = (*Runtime)(nil)
