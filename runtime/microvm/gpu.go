package microvm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// GPUReady checks that the guest agent answers.
func (r *Runtime) GPUReady(ctx context.Context, id string) error {
	if _, err := r.call(ctx, id, agent.Request{Op: agent.OpPing}); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	return nil
}

// GPUStatus has the guest agent report where every CUDA process in the
// guest stands (running, locked, checkpointed), changing nothing.
func (r *Runtime) GPUStatus(ctx context.Context, id string) (runtime.GPUReport, error) {
	return r.gpuStep(ctx, id, agent.Request{Op: agent.OpGPUStatus})
}

// GPUSuspend has the guest agent suspend every CUDA process in the guest.
func (r *Runtime) GPUSuspend(ctx context.Context, id string, lockTimeout time.Duration) (runtime.GPUReport, error) {
	return r.gpuStep(ctx, id, agent.Request{Op: agent.OpGPUSuspend, LockTimeout: lockTimeout})
}

// GPUResume has the guest agent resume every CUDA process in the guest.
func (r *Runtime) GPUResume(ctx context.Context, id string, devices gpu.DeviceMap) (runtime.GPUReport, error) {
	req := agent.Request{Op: agent.OpGPUResume}
	if len(devices) > 0 {
		req.DeviceMap = devices.String()
	}
	return r.gpuStep(ctx, id, req)
}

func (r *Runtime) gpuStep(ctx context.Context, id string, req agent.Request) (runtime.GPUReport, error) {
	rep := runtime.GPUReport{Op: req.Op}
	reply, err := r.call(ctx, id, req)
	if len(reply.Report) > 0 {
		if jerr := json.Unmarshal(reply.Report, &rep); jerr != nil && err == nil {
			err = fmt.Errorf("the guest's stasis-cuda report: %w", jerr)
		}
	}
	rep.Skipped = reply.Skipped
	if err != nil {
		return rep, fmt.Errorf("VM %s: %w", id, err)
	}
	return rep, nil
}
