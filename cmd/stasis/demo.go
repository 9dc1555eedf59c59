package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/internal/counter"
	"github.com/stasis-run/stasis/internal/demo"
)

func newDemo(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run a demo actor, suspend it to a snapshot and resume it, showing its memory kept",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := g.runtime(cmd.Context())
			if err != nil {
				return err
			}
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
			res, err := demo.Run(cmd.Context(), demo.Config{DataDir: g.dataDir, Binary: self, Runtime: rt, Events: g.progress, Say: say})
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			return g.print(res, "")
		},
	}
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
