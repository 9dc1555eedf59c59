package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/snapshot"
)

func newSnapshot(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "List stasisd's snapshots; inspect, verify and check snapshot folders"}
	var actor string
	ls := &cobra.Command{
		Use:   "ls [ACTOR]",
		Short: "List the snapshots stasisd made (pause, commit, golden), newest first; an actor's only when named",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if actor != "" && actor != args[0] {
					return errdefs.Mark(fmt.Errorf("snapshot ls: actor %s and --actor %s: name one", args[0], actor), errdefs.ErrInvalidArgument)
				}
				actor = args[0]
			}
			list, err := g.client().ListSnapshots(cmd.Context(), actor)
			if err != nil {
				return err
			}
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "SNAPSHOT\tACTOR\tKIND\tSCOPE\tSIZE\tCREATED\tON THIS NODE\tSTORED AS")
			for _, s := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Actor, s.Kind, s.Scope, units.Bytes(s.SizeBytes), s.CreatedAt.Local().Format("2006-01-02 15:04:05"), cmp.Or(s.Dir, "-"), cmp.Or(s.Stored, "-"))
			}
			w.Flush()
			if list == nil {
				list = []api.Snapshot{}
			}
			return g.print(list, b.String())
		},
	}
	ls.Flags().StringVar(&actor, "actor", "", "only this actor's snapshots (as naming it)")
	cmd.AddCommand(ls, &cobra.Command{
		Use:   "inspect DIR|ID",
		Short: "Print a snapshot's manifest (a folder), or stasisd's record of a snapshot (an id)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if st, err := os.Stat(args[0]); err == nil && st.IsDir() {
				m, err := snapshot.Load(args[0])
				if err != nil {
					return err
				}
				return g.print(m, describe(m))
			}
			s, err := g.client().InspectSnapshot(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("%s is not a snapshot folder, and stasisd says: %w", args[0], err)
			}
			text := describeSnapshotLine(s) + "\n"
			if m, err := snapshot.Load(s.Dir); err == nil {
				text += describe(m)
			}
			return g.print(s, text)
		},
	}, &cobra.Command{
		Use:   "verify DIR",
		Short: "Read every file of a snapshot and check it against the manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := snapshot.Verify(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return g.print(map[string]any{"snapshot": args[0], "ok": true, "files": len(m.Files)}, fmt.Sprintf("%s: ok, %d files verified\n", args[0], len(m.Files)))
		},
	})
	cmd.AddCommand(newSnapshotCheck(g), newSnapshotStage(g), newSnapshotStaged(g))
	return cmd
}

func newSnapshotStage(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stage NAME",
		Short: "Have stasisd copy a stored snapshot onto this node before an actor needs it (checked against the node first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.client().StageSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			how := "staged"
			if st.Already {
				how = "already on this node"
			}
			return g.print(st, fmt.Sprintf("%s: %s at %s (%s)\n", st.Name, how, st.Dir, units.Bytes(st.SizeBytes)))
		},
	}
}

func newSnapshotStaged(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "staged",
		Short: "List the stored snapshots staged on this node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := g.client().ListStaged(cmd.Context())
			if err != nil {
				return err
			}
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSIZE\tUSED\tRESUMES READING IT")
			for _, st := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", st.Name, units.Bytes(st.SizeBytes), st.UsedAt.Local().Format("2006-01-02 15:04:05"), st.InUse)
			}
			w.Flush()
			return g.print(list, b.String())
		},
	}
}

func newSnapshotCheck(g *globals) *cobra.Command {
	var nodeFiles []string
	cmd := &cobra.Command{
		Use:   "check DIR [--node FILE]...",
		Short: "Say whether this node, or each node given, can restore a snapshot, best first",
		Long: `Check compares a snapshot's manifest with a node's fingerprint: this node's, or,
with --node, each fingerprint file given (written by "stasis node info --json" on
those nodes). Nodes that can restore it come first, the one left with the most free
GPU and host memory ahead, each with the device map its GPUs need; every other node
is listed with every reason, in numbers. It exits 1 when no node can restore it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := snapshot.Load(args[0])
			if err != nil {
				return err
			}
			policy, err := g.Policy()
			if err != nil {
				return err
			}
			var nodes []fingerprint.Fingerprint
			for _, path := range nodeFiles {
				n, err := loadNode(cmd.Context(), path)
				if err != nil {
					return err
				}
				nodes = append(nodes, n)
			}
			if len(nodes) == 0 {
				n, err := g.fingerprint(cmd.Context())
				if err != nil {
					return err
				}
				nodes = append(nodes, n)
			}
			results := compat.Place(m, nodes, policy)
			if err := g.print(results, describePlacement(results)); err != nil {
				return err
			}
			if !results[0].Compatible {
				return fmt.Errorf("no node given can restore %s", args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&nodeFiles, "node", nil, "a node's fingerprint file, or unix:///SOCKET to ask that stasisd (repeatable; default: this node)")
	return cmd
}

// loadNode reads a fingerprint file, or asks a stasisd for its node's.
func loadNode(ctx context.Context, where string) (fingerprint.Fingerprint, error) {
	socket, ok := strings.CutPrefix(where, "unix://")
	if !ok {
		return fingerprint.Load(where)
	}
	f, err := api.Dial(socket).NodeInfo(ctx)
	if err != nil {
		return f, fmt.Errorf("fingerprint from stasisd at %s: %w", socket, err)
	}
	return f, f.Validate()
}

func describePlacement(results []compat.Result) string {
	var b strings.Builder
	for i, r := range results {
		if !r.Compatible {
			fmt.Fprintf(&b, "    %s (class %s) cannot restore it:\n", r.Node, r.Class)
			for _, reason := range r.Reasons {
				fmt.Fprintf(&b, "      - %s\n", reason)
			}
			continue
		}
		fmt.Fprintf(&b, "%2d. %s (class %s) can restore it; left free after: GPU %s, host %s\n", i+1, r.Node, r.Class, units.Bytes(r.GPUFreeAfter), units.Bytes(r.HostFreeAfter))
		if len(r.DeviceMap) > 0 {
			fmt.Fprintf(&b, "      device map %s\n", r.DeviceMap)
		}
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "      note: %s\n", w)
		}
	}
	return b.String()
}

func describe(m *snapshot.Manifest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "actor:    %s\nscope:    %s\ncreated:  %s\nruntime:  %s %s\nfiles:    %d (%d bytes)\n", m.Actor, m.Scope, m.CreatedAt.Format("2006-01-02 15:04:05Z07:00"), m.Runtime.Name, m.Runtime.Version, len(m.Files), m.Size())
	if m.GPU != nil {
		fmt.Fprintf(&b, "gpu:      driver %s, %d CUDA process(es)\n", m.GPU.DriverVersion, m.GPU.Processes)
		for _, u := range m.GPU.Devices {
			fmt.Fprintf(&b, "          %s %s: %s of device memory\n", u.Device.Name, u.Device.UUID, units.Bytes(u.MemoryUsed))
		}
	}
	if m.Node != nil {
		fmt.Fprintf(&b, "taken on: %s (class %s, kernel %s, %s %s)\n", m.Node.Hostname, m.Node.Class(), m.Node.Kernel, m.Node.Runtime.Platform, m.Node.Runtime.GPUABI)
	}
	return b.String()
}
