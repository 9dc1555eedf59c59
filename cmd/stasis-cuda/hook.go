package main

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/cuda/group"
)

// hook serves runsc's -save-restore-exec-argv: "save" runs before the
// checkpoint and suspends every CUDA process; "restore" (in the restored
// sandbox) and "resume" (in the sandbox that kept running after a
// -leave-running checkpoint) bring them back. runsc only shows the output in
// its debug log, so the report is short.
func (c cli) hook(mode string) int {
	var op string
	switch mode {
	case "save":
		op = "suspend"
	case "restore", "resume":
		op = "resume"
	default:
		fmt.Fprintf(c.stderr, "stasis-cuda: unknown %s=%q: want save, restore or resume\n", hookModeEnv, mode)
		return 1
	}
	rep, err := c.group(context.Background(), op, "/proc", group.Options{LockTimeout: defaultLockTimeout}, true)
	if err != nil {
		fmt.Fprintf(c.stderr, "stasis-cuda %s hook: %v\n", mode, err)
		return 1
	}
	fmt.Fprintf(c.stdout, "stasis-cuda %s hook: %s %d CUDA process(es) in %s\n", mode, done(op), len(rep.Outcomes), rep.DurationNs)
	return 0
}
