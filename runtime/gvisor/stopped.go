package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
)

// watchStopped returns ctx for a runsc command on container id, which it
// cancels where the sandbox process is found stopped (halt.Watch: runsc
// would wait on the sandbox's control socket for as long as the stop
// lasts), and ended, to call once the command has returned: it stops the
// watch and says why the command was ended, nil where it was not.
func (r *Runsc) watchStopped(ctx context.Context, id string) (context.Context, func() error) {
	ctx, ended := halt.Watch(ctx, func() int { return r.sandboxPID(id) })
	return ctx, func() error {
		h, pid := ended()
		return stoppedError(id, pid, h)
	}
}

// stopped is why container id's sandbox process cannot run now, with
// what lets it run again; nil where it can, or where that cannot be told.
func (r *Runsc) stopped(id string) error {
	pid := r.sandboxPID(id)
	return stoppedError(id, pid, halt.Of(pid))
}

// stoppedError is the refusal of a command on container id whose sandbox
// process pid cannot run (h); nil where h is.
func stoppedError(id string, pid int, h *halt.Halt) error {
	if h == nil {
		return nil
	}
	return errdefs.Mark(fmt.Errorf("the sandbox process of container %s (pid %d) is %s, so runsc cannot reach it: %s, then try again", id, pid, h.How, h.Mend), errdefs.ErrFailedPrecondition)
}

// sandboxPID reads the pid of container id's sandbox process from runsc's
// own record of the container in its state folder (runsc state would ask
// the sandbox, which is what cannot answer); 0 where there is none or it
// cannot be read.
func (r *Runsc) sandboxPID(id string) int {
	path, ok := r.containers()[id]
	if !ok {
		return 0
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var state struct {
		Sandbox struct {
			PID int `json:"pid"`
		} `json:"sandbox"`
	}
	if json.Unmarshal(data, &state) != nil {
		return 0
	}
	return state.Sandbox.PID
}
