package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/units"
)

func newTemplate(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Create, warm, list and remove actor templates (through stasisd)"}
	var t api.Template
	var memory, onPause, onCommit string
	var probeTimeout float64
	create := &cobra.Command{
		Use:   "create NAME (--bundle DIR | --rootfs DIR -- ARGS...)",
		Short: "Record a template: bundle or rootfs, GPUs, memory, durable folders, readiness probe, snapshot scopes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t.Name, t.Args = args[0], args[1:]
			if memory != "" {
				n, err := units.ParseBytes(memory)
				if err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
				t.MemoryBytes = int64(n)
			}
			t.Probe.TimeoutSeconds = probeTimeout
			t.Snapshots = api.SnapshotConfig{OnPause: api.Scope(onPause), OnCommit: api.Scope(onCommit)}
			for _, p := range []*string{&t.Bundle, &t.Rootfs} {
				if *p != "" && !strings.HasPrefix(*p, "/") {
					wd, err := os.Getwd()
					if err != nil {
						return err
					}
					*p = wd + "/" + *p
				}
			}
			got, err := g.client().CreateTemplate(cmd.Context(), t)
			if err != nil {
				return err
			}
			return g.print(got, describeTemplate(got))
		},
	}
	f := create.Flags()
	f.StringVar(&t.Bundle, "bundle", "", "OCI bundle folder the actors run")
	f.StringVar(&t.Rootfs, "rootfs", "", "root filesystem folder; the process is given after --")
	f.StringSliceVar(&t.Env, "env", nil, "environment variables (KEY=VALUE, repeatable)")
	f.IntVar(&t.GPUs, "gpus", 0, "GPUs per actor (the node's NVIDIA devices and the stasis-cuda helper)")
	f.StringVar(&memory, "memory", "", "sandbox memory limit, such as 16GiB (stasis plan template recommends one)")
	f.StringSliceVar(&t.Durable, "durable", nil, "folders inside the sandbox kept on the host per actor (repeatable)")
	f.StringSliceVar(&t.Probe.Command, "probe-cmd", nil, "readiness command run in the sandbox (comma-separated argv)")
	f.StringVar(&t.Probe.URL, "probe-url", "", "readiness URL that must answer 2xx")
	f.Float64Var(&probeTimeout, "probe-timeout", 30, "seconds to wait for readiness")
	f.StringVar(&onPause, "on-pause", "Full", "scope of pause snapshots: Full or Data")
	f.StringVar(&onCommit, "on-commit", "Full", "scope of suspend (commit) snapshots: Full or Data")

	var requestID string
	warm := &cobra.Command{
		Use:   "warm NAME",
		Short: "Boot an actor of the template, wait until ready, and keep its Full snapshot as the template's golden snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.WarmRequest{Template: args[0], RequestID: requestID}
			var got api.Template
			err := g.follow(cmd.Context(), api.WarmingActorID(req), func(ctx context.Context) (err error) {
				got, err = g.client().WarmTemplate(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			return g.print(got, describeTemplate(got))
		},
	}
	warm.Flags().StringVar(&requestID, "request-id", "", "makes a retry harmless")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := g.client().ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "TEMPLATE\tGPUS\tMEMORY\tPAUSE\tCOMMIT\tGOLDEN")
			for _, t := range list {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, t.GPUs, limit(t.MemoryBytes), t.Snapshots.OnPause, t.Snapshots.OnCommit, orDash(t.Golden))
			}
			w.Flush()
			if list == nil {
				list = []api.Template{}
			}
			return g.print(list, b.String())
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a template no actor uses, with its golden snapshot (here and in the store)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().DeleteTemplate(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.print(map[string]any{"template": args[0], "deleted": true}, fmt.Sprintf("deleted template %s\n", args[0]))
		},
	}
	cmd.AddCommand(create, warm, ls, rm)
	return cmd
}

func describeTemplate(t api.Template) string {
	source := "bundle " + t.Bundle
	if t.Bundle == "" {
		source = fmt.Sprintf("rootfs %s, args %q", t.Rootfs, t.Args)
	}
	return fmt.Sprintf("template %s: %s; %d GPU(s), memory %s, durable %v; snapshots on pause %s, on commit %s; golden %s\n",
		t.Name, source, t.GPUs, limit(t.MemoryBytes), t.Durable, t.Snapshots.OnPause, t.Snapshots.OnCommit, orDash(t.Golden))
}

func limit(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return units.Bytes(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
