package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
)

// helperPresent checks that the helper runs inside the sandbox, without
// loading the driver, or that the runtime's own GPU agent answers.
func (e *Engine) helperPresent(ctx context.Context, id string) error {
	if g, ok := e.Runtime.(runtime.GPUAgent); ok {
		if err := g.GPUReady(ctx, id); err != nil {
			return fmt.Errorf("%w: the runtime's GPU agent does not answer: %w", ErrRefused, err)
		}
		return nil
	}
	res, err := e.Runtime.Exec(ctx, id, runtime.Process{Args: []string{e.helperPath(), "--help"}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return fmt.Errorf("%w: the stasis-cuda helper does not run at %s inside the sandbox (mount it with bundle.AddHelper or the CDI device %s): %w",
			ErrRefused, e.helperPath(), bundle.CDIDevice, err)
	}
	return nil
}

// gpuSuspend suspends every CUDA process of the sandbox. The helper is
// all-or-nothing: when it fails, no process is left locked or checkpointed.
func (e *Engine) gpuSuspend(ctx context.Context, id string) (runtime.GPUReport, error) {
	if g, ok := e.Runtime.(runtime.GPUAgent); ok {
		return g.GPUSuspend(ctx, id, e.lockTimeout())
	}
	return e.runHelper(ctx, id, helper.Suspend, e.lockTimeout(), "")
}

// gpuResume restores and unlocks every CUDA process that is locked or
// checkpointed; with nothing to resume it does nothing, so it is safe to run
// after any failure.
func (e *Engine) gpuResume(ctx context.Context, id string, devices gpu.DeviceMap) (runtime.GPUReport, error) {
	if g, ok := e.Runtime.(runtime.GPUAgent); ok {
		return g.GPUResume(ctx, id, devices)
	}
	var deviceMap string
	if len(devices) > 0 {
		deviceMap = devices.String()
	}
	return e.runHelper(ctx, id, helper.Resume, 0, deviceMap)
}

func (e *Engine) runHelper(ctx context.Context, id, verb string, lockTimeout time.Duration, deviceMap string) (runtime.GPUReport, error) {
	argv := helper.Args(e.helperPath(), verb, lockTimeout, deviceMap)
	res, err := e.Runtime.Exec(ctx, id, runtime.Process{Args: argv})
	var rep runtime.GPUReport
	if err != nil {
		return rep, fmt.Errorf("run %s: %w", strings.Join(argv, " "), err)
	}
	raw, err := helper.Result(verb, res.ExitCode, res.Stdout, res.Stderr)
	if raw != nil {
		_ = json.Unmarshal(raw, &rep)
	}
	return rep, err
}

func summary(rep runtime.GPUReport) string {
	if rep.Skipped != "" {
		return rep.Skipped
	}
	var driver time.Duration
	for _, o := range rep.Outcomes {
		driver = max(driver, o.Duration)
	}
	msg := fmt.Sprintf("%d CUDA process(es), driver API %s", len(rep.Outcomes), cuda.FormatVersion(rep.DriverVersion))
	if driver > 0 {
		// The rest of the step is starting the helper in the sandbox.
		msg += fmt.Sprintf(", the driver's calls %s", driver.Round(time.Millisecond))
	}
	return msg
}
