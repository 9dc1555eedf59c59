package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/bundle"
)

func newGPUBundle(g *globals) *cobra.Command {
	var dir, helper string
	cmd := &cobra.Command{
		Use:   "gpu-bundle --bundle DIR --helper PATH",
		Short: "Make an OCI bundle a GPU actor's: NVIDIA devices listed, the stasis-cuda helper mounted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := bundle.Load(dir)
			if err != nil {
				return err
			}
			if err := bundle.PrepareGPU(spec, helper); err != nil {
				return err
			}
			if err := bundle.Save(dir, spec); err != nil {
				return err
			}
			return g.print(map[string]any{"bundle": dir, "devices": len(spec.Linux.Devices), "helper": bundle.HelperPath},
				fmt.Sprintf("%s: %d devices, helper at %s\n", dir, len(spec.Linux.Devices), bundle.HelperPath))
		},
	}
	cmd.Flags().StringVar(&dir, "bundle", "", "the OCI bundle to edit (required)")
	cmd.Flags().StringVar(&helper, "helper", "", "the stasis-cuda binary on the host (required)")
	_ = cmd.MarkFlagRequired("bundle")
	_ = cmd.MarkFlagRequired("helper")
	return cmd
}
