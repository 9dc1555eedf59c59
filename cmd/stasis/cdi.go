package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/bundle"
)

func newCDISpec(g *globals) *cobra.Command {
	var helper, dir string
	cmd := &cobra.Command{
		Use:   "cdi-spec --helper PATH",
		Short: "Write a CDI spec that injects the stasis-cuda helper into containers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := bundle.WriteHelperCDISpec(dir, helper)
			if err != nil {
				return err
			}
			return g.print(map[string]string{"spec": path, "device": bundle.CDIDevice}, fmt.Sprintf("wrote %s; request the device %s\n", path, bundle.CDIDevice))
		},
	}
	cmd.Flags().StringVar(&helper, "helper", "", "the stasis-cuda binary on the host (required)")
	cmd.Flags().StringVar(&dir, "dir", "/etc/cdi", "CDI spec folder")
	_ = cmd.MarkFlagRequired("helper")
	return cmd
}
