package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newRuntimeInfo(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "runtime-info",
		Short: "Show the runsc in use and what it can do",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := g.Runtime(cmd.Context())
			if err != nil {
				return err
			}
			f := rt.Features()
			text := fmt.Sprintf("runsc:                  %s\nversion:                %s\n--cuda-checkpoint-path: %v\n-save-restore-exec-argv: %v\nrestore -background:    %v\ncompression:            %s\nnvproxy drivers:        %s\n",
				rt.Path(), f.Version, f.CudaCheckpointPath, f.SaveRestoreExecArgv, f.Background, strings.Join(f.Compression, ", "), strings.Join(f.NvproxyDrivers, ", "))
			if n := rt.NvproxyNotice(); n != "" {
				text += "note:                   " + n + "\n"
			}
			return g.print(map[string]any{"path": rt.Path(), "features": f, "nvproxyNotice": rt.NvproxyNotice()}, text)
		},
	}
}
