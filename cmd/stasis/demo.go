package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/cmd/internal/demo"
	"github.com/stasis-run/stasis/internal/counter"
)

func newDemo(g *globals) *cobra.Command {
	var gpu bool
	var gib float64
	var scripts string
	cmd := &cobra.Command{
		Use:   "demo [--gpu]",
		Short: "Through stasisd: run a demo actor, suspend it into the store, resume it, showing its memory kept",
		Long: `Demo drives stasisd (start it first: the quick start does) through a demo template:
an actor is started, given state held only in memory, suspended (its snapshot goes
to the store and its sandbox away), resumed, and its state checked. With --gpu the
actor is a PyTorch process holding device memory (needs an NVIDIA GPU, PyTorch and
stasisd started with the stasis-cuda helper).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the stasis binary to run the demo actor: %w", err)
			}
			if self, err = filepath.EvalSymlinks(self); err != nil {
				return err
			}
			say := func(format string, args ...any) {
				if !g.json {
					fmt.Fprintf(g.stdout, format+"\n", args...)
				}
			}
			cfg := demo.Config{Client: g.client(), TemplatesDir: g.TemplatesDir(), Binary: self, Say: say, Follow: g.follow}
			if gpu {
				python, err := exec.LookPath("python3")
				if err != nil {
					return fmt.Errorf("the GPU demo runs PyTorch: %w", err)
				}
				if scripts, err = filepath.Abs(scripts); err != nil {
					return err
				}
				cfg.GPU = &demo.GPU{Python: python, Scripts: scripts, GiB: gib}
			}
			if err := cfg.WriteBundle(); err != nil {
				return fmt.Errorf("demo bundle: %w", err)
			}
			res, err := demo.Run(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			return g.print(res, "")
		},
	}
	cmd.Flags().BoolVar(&gpu, "gpu", false, "the GPU demo: a PyTorch actor holding device memory")
	cmd.Flags().Float64Var(&gib, "gpu-gib", 1, "device memory the GPU demo actor holds")
	cmd.Flags().StringVar(&scripts, "gpu-scripts", "scripts/gpu", "the folder with holder_server.py and holder_client.py")
	return cmd
}

func newDemoActor() *cobra.Command {
	return &cobra.Command{
		Use:    demo.ActorCommand + " serve|incr|get|await incr|await get",
		Short:  "The demo actor: a counter held in memory (runs inside the demo sandbox)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return counter.Run(args, cmd.OutOrStdout())
		},
	}
}
