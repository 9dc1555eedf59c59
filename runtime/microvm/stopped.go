package microvm

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// A QEMU process that cannot run (stopped by SIGSTOP, a debugger, a frozen
// cgroup) answers neither its monitor nor, through its serial port, the
// guest agent: a call would wait for as long as the stop lasts (up to the
// operation's deadline, an hour for a suspend), and the actor with it.
// Such calls are refused with why and what lets QEMU run again.

// talk runs fn, which waits on VM id's QEMU (its monitor or the guest
// agent), after a look at whether QEMU can run: refused where it cannot.
// With throughout, fn is also ended where QEMU is found stopped while it
// runs; without, fn goes on after a stop, as a command in a stopped gVisor
// sandbox does: for long work (a command, a GPU step) that a stop of a
// moment should not end.
func (r *Runtime) talk(ctx context.Context, id string, throughout bool, fn func(context.Context) error) error {
	pid := 0
	if st, err := r.load(id); err == nil && alive(st.PID, st.Start) {
		pid = st.PID
	}
	if err := halted(pid, halt.Of(pid)); err != nil {
		return err
	}
	if !throughout {
		return fn(ctx)
	}
	ctx, ended := halt.Watch(ctx, func() int { return pid })
	err := fn(ctx)
	if h, _ := ended(); h != nil && err != nil {
		return halted(pid, h)
	}
	return err
}

// halted is why QEMU process pid cannot answer (h), with what lets it run
// again; nil where h is.
func halted(pid int, h *halt.Halt) error {
	if h == nil {
		return nil
	}
	return errdefs.Mark(fmt.Errorf("QEMU (pid %d) is %s, so neither its monitor nor the guest agent can answer: %s, then try again", pid, h.How, h.Mend), errdefs.ErrFailedPrecondition)
}

// longRequests are the agent requests that may run long: QEMU is looked at
// before them, and a stop while they run does not end them.
var longRequests = map[string]bool{agent.OpExec: true, agent.OpGPUSuspend: true, agent.OpGPUResume: true}
