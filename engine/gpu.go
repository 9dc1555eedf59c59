package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/cuda/group"
	"github.com/stasis-run/stasis/runtime"
)

// helperPresent checks that the helper runs inside the sandbox, without
// loading the driver.
func (e *Engine) helperPresent(ctx context.Context, id string) error {
	res, err := e.Runtime.Exec(ctx, id, runtime.Process{Args: []string{e.helper(), "--help"}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return fmt.Errorf("%w: the stasis-cuda helper does not run at %s inside the sandbox (mount it with bundle.AddHelper or the CDI device %s): %w",
			ErrRefused, e.helper(), bundle.CDIDevice, err)
	}
	return nil
}

// gpuSuspend suspends every CUDA process of the sandbox. The helper is
// all-or-nothing: when it fails, no process is left locked or checkpointed.
func (e *Engine) gpuSuspend(ctx context.Context, id string) (group.Report, error) {
	return e.runHelper(ctx, id, "suspend", "--timeout", e.lockTimeout().String())
}

// gpuResume restores and unlocks every CUDA process that is locked or
// checkpointed; with nothing to resume it does nothing, so it is safe to run
// after any failure.
func (e *Engine) gpuResume(ctx context.Context, id string, devices cuda.DeviceMap) (group.Report, error) {
	var args []string
	if len(devices) > 0 {
		args = append(args, "--device-map", devices.String())
	}
	return e.runHelper(ctx, id, "resume", args...)
}

func (e *Engine) runHelper(ctx context.Context, id, verb string, args ...string) (group.Report, error) {
	argv := append([]string{e.helper(), verb, "--all", "--json"}, args...)
	res, err := e.Runtime.Exec(ctx, id, runtime.Process{Args: argv})
	var rep group.Report
	if err != nil {
		return rep, fmt.Errorf("run %s: %w", strings.Join(argv, " "), err)
	}
	if jsonErr := json.Unmarshal(res.Stdout, &rep); jsonErr != nil {
		return rep, fmt.Errorf("stasis-cuda %s exited %d without a report: %s", verb, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if res.ExitCode != 0 || rep.Error != "" {
		return rep, fmt.Errorf("stasis-cuda %s: %s", verb, rep.Error)
	}
	return rep, nil
}

func summary(rep group.Report) string {
	return fmt.Sprintf("%d CUDA process(es), driver API %s", len(rep.Outcomes), cuda.FormatVersion(rep.DriverVersion))
}
