package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/snapshot"
)

func newSnapshot(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Inspect and verify snapshot folders"}
	cmd.AddCommand(&cobra.Command{
		Use:   "inspect DIR",
		Short: "Print a snapshot's manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := snapshot.Load(args[0])
			if err != nil {
				return err
			}
			return g.print(m, describe(m))
		},
	}, &cobra.Command{
		Use:   "verify DIR",
		Short: "Read every file of a snapshot and check it against the manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := snapshot.Verify(args[0])
			if err != nil {
				return err
			}
			return g.print(map[string]any{"snapshot": args[0], "ok": true, "files": len(m.Files)}, fmt.Sprintf("%s: ok, %d files verified\n", args[0], len(m.Files)))
		},
	})
	return cmd
}

func describe(m *snapshot.Manifest) string {
	var b strings.Builder
	var total int64
	for _, f := range m.Files {
		total += f.Size
	}
	fmt.Fprintf(&b, "actor:    %s\nscope:    %s\ncreated:  %s\nruntime:  %s %s\nfiles:    %d (%d bytes)\n", m.Actor, m.Scope, m.CreatedAt.Format("2006-01-02 15:04:05Z07:00"), m.Runtime.Name, m.Runtime.Version, len(m.Files), total)
	if m.GPU != nil {
		fmt.Fprintf(&b, "gpu:      driver %s, %d CUDA process(es)\n", m.GPU.DriverVersion, m.GPU.Processes)
	}
	return b.String()
}
