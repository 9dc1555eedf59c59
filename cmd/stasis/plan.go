package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/units"
)

func newPlan(g *globals) *cobra.Command {
	var af actorFlags
	var dir string
	cmd := &cobra.Command{
		Use:   "plan CONTAINER --bundle DIR [--gpu]",
		Short: "Say what suspending a running actor needs and whether this node has it, touching nothing",
		Long: `Plan measures what a Full suspend of the actor would need: the host memory its GPU
state takes once moved off the GPU (device memory its processes hold, read with NVML),
against the sandbox's memory limit and the node's available memory; disk for the
image; and for GPU actors the helper, the driver's checkpoint API, no MIG and no MPS.
Each failed check says which number is short and by how much. It exits 1 when the
suspend would be refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			eng, err := g.Engine(cmd.Context())
			if err != nil {
				return err
			}
			if dir == "" {
				dir = filepath.Join(g.DataDir, "snapshots")
			}
			p, err := eng.Plan(cmd.Context(), af.actor(args[0]), dir)
			if err != nil {
				return err
			}
			if err := g.print(p, describePlan(p)); err != nil {
				return err
			}
			return p.Refused()
		},
	}
	af.register(cmd)
	cmd.Flags().StringVar(&dir, "snapshot", "", "where the snapshot would go (default: DATA/snapshots)")
	cmd.AddCommand(newPlanTemplate(g))
	return cmd
}

func describePlan(p *engine.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "actor %s: resident %s, GPU state %s, after a GPU suspend %s", p.Actor, units.Bytes(p.SandboxMemory), units.Bytes(p.GPUMemory), units.Bytes(p.HostMemory))
	if p.MemoryLimit > 0 {
		fmt.Fprintf(&b, " (limit %s)", units.Bytes(p.MemoryLimit))
	}
	b.WriteString("\n")
	for _, u := range p.GPUs {
		fmt.Fprintf(&b, "  GPU %d %s: %s held by pid(s) %v\n", u.Device.Index, u.Device.UUID, units.Bytes(u.MemoryUsed), u.PIDs)
	}
	for _, c := range p.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %-15s %s\n", mark, c.Name, c.Detail)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "  note %s\n", w)
	}
	return b.String()
}

func newPlanTemplate(g *globals) *cobra.Command {
	var gpus int
	var deviceMemory, actorMemory string
	cmd := &cobra.Command{
		Use:   "template --gpus N [--gpu-memory SIZE] [--actor-memory SIZE]",
		Short: "Recommend a template's memory limit so that a GPU suspend fits, with the arithmetic",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := units.ParseBytes(actorMemory)
			if err != nil {
				return fmt.Errorf("--actor-memory: %w", err)
			}
			var device uint64
			if deviceMemory != "" {
				if device, err = units.ParseBytes(deviceMemory); err != nil {
					return fmt.Errorf("--gpu-memory: %w", err)
				}
			} else {
				f, err := g.fingerprint(cmd.Context())
				if err != nil {
					return err
				}
				if len(f.GPU.Devices) == 0 {
					return fmt.Errorf("this node has no GPU to size by (%s); give --gpu-memory", f.GPU.Reason)
				}
				device = f.GPU.Devices[0].MemoryTotal
			}
			limit, lines := engine.RecommendMemoryLimit(base, gpus, device)
			return g.print(map[string]any{"memoryLimitBytes": limit, "arithmetic": lines}, strings.Join(lines, "\n")+"\n")
		},
	}
	cmd.Flags().IntVar(&gpus, "gpus", 1, "GPUs per actor")
	cmd.Flags().StringVar(&deviceMemory, "gpu-memory", "", "device memory per GPU, such as 141GiB (default: this node's first GPU)")
	cmd.Flags().StringVar(&actorMemory, "actor-memory", "4GiB", "the actor's own memory without GPU state")
	return cmd
}
