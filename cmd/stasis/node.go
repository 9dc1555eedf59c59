package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/node"
)

func newNode(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "This node's fingerprint, its scheduling labels and its fleet lease"}
	cmd.AddCommand(&cobra.Command{
		Use:   "info",
		Short: "Print the facts a snapshot's restore depends on: GPUs, driver, kernel, CPU, runtime",
		Long: `Info prints this node's fingerprint. Save it with --json to a file: other nodes'
fingerprints are what "stasis snapshot check --node FILE" places snapshots on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := g.fingerprint(cmd.Context())
			if err != nil {
				return err
			}
			// The runtimes beside gVisor are stasisd's to run: what it
			// found at start (QEMU, KVM or TCG, the agent's channel). A
			// stasisd just started answers once it has chosen its
			// micro-VM accelerator: on a host whose /dev/kvm opens but
			// boots no guest, after its two probes of 5 s each (2 s was
			// too short, and the runtimes came back empty).
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			served, infoErr := g.client().NodeInfo(ctx)
			f.Runtimes = served.Runtimes
			text := describeNode(f)
			if infoErr != nil {
				text += fmt.Sprintf("micro-VMs:  unknown (stasisd does not answer at %s: it finds what it can run when it starts)\n", g.Socket)
			}
			if h, err := node.ReadHugePages(node.HugePagesDir); err != nil {
				text += fmt.Sprintf("huge pages: unknown (%v)\n", err)
			} else {
				text += "huge pages: " + h.String() + "\n"
			}
			if w, err := node.ReadWriteback(node.WritebackDir); err != nil {
				text += fmt.Sprintf("write-back: unknown (%v)\n", err)
			} else {
				text += "write-back: " + w.Describe(int64(f.Memory.Available)) + "\n"
			}
			// What this node's stasisd says, when it answers (the JSON is
			// the fingerprint alone, as other commands read it).
			if st, err := g.client().NodeStatus(ctx); err == nil {
				text += describeStore(st.Store)
				if st.Lease.Holder != "" {
					text += "fleet lease: " + describeLease(st.Lease)
				}
			}
			return g.print(f, text)
		},
	}, newNodeLabels(g), newNodeTune(g), newNodeLease(g))
	return cmd
}

// describeStore is stasisd's store as a line of text.
func describeStore(st api.StoreStatus) string {
	switch {
	case !st.Configured:
		return "store:      none (stasisd runs with --no-store)\n"
	case st.Available:
		return fmt.Sprintf("store:      %s, available (%d retries, %d reads resumed, %d stalls since stasisd started)\n", st.Location, st.Retries, st.ResumedReads, st.Stalls)
	}
	return fmt.Sprintf("store:      %s, UNAVAILABLE since %s after %d tries: %s\n", st.Location, st.Since.Local().Format(time.RFC3339), st.Failures, st.Error)
}

func newNodeTune(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tune",
		Short: "Set the host's transparent huge page settings so that sandbox memory is in huge pages",
		Long: `Tune sets what runsc needs to back sandbox memory with huge pages, changing as little
as it can: shmem_enabled never becomes advise (which affects only memory that asks for
huge pages, as runsc's does) and defrag madvise or defer+madvise becomes defer. On the
H200 an 8 GiB GPU actor's restore then loaded its memory 3.4x faster and its suspend
took 1.5x less time (docs/benchmarks.md). Sandboxes started afterwards use them.
stasisd does the same at start unless run with --sandbox-huge-pages keep. The settings
last until the host reboots; shmem_enabled deny is never overridden.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			before, after, err := node.EnableSandboxHugePages(node.HugePagesDir)
			if err != nil {
				return err
			}
			text := "unchanged: " + after.String() + "\n"
			if before != after {
				text = fmt.Sprintf("shmem_enabled %s -> %s, defrag %s -> %s: %s\n", before.ShmemEnabled, after.ShmemEnabled, before.Defrag, after.Defrag, after)
			}
			return g.print(map[string]node.HugePages{"before": before, "after": after}, text)
		},
	}
}

func newNodeLabels(g *globals) *cobra.Command {
	var write string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "labels",
		Short: "Print the node labels (compatibility class and facts) in NFD's feature file format",
		Long: `Labels prints the Kubernetes node labels that let a scheduler place restores with
plain node affinity: stasis.dev/class is a hash of the facts a Full GPU snapshot's
restore must match (runtime build and platform, nvproxy ABI, driver, GPU model, CPU
architecture). --write puts them, atomically, in a node-feature-discovery local
feature file (for example /etc/kubernetes/node-feature-discovery/features.d/stasis),
which NFD turns into labels; with --ttl they expire unless rewritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := g.fingerprint(cmd.Context())
			if err != nil {
				return err
			}
			labels := f.Labels()
			var expiry time.Time
			if ttl > 0 {
				expiry = time.Now().Add(ttl)
			}
			var text strings.Builder
			if err := fingerprint.WriteFeatureFile(&text, labels, expiry); err != nil {
				return err
			}
			if write != "" {
				if err := os.MkdirAll(filepath.Dir(write), 0o755); err != nil {
					return fmt.Errorf("feature file folder: %w", err)
				}
				// NFD skips files whose names start with a dot, such as
				// WriteAtomic's temporary file, so it never reads half of one.
				if err := fsutil.WriteAtomic(write, strings.NewReader(text.String()), int64(text.Len())); err != nil {
					return fmt.Errorf("write feature file: %w", err)
				}
			}
			return g.print(labels, text.String())
		},
	}
	cmd.Flags().StringVar(&write, "write", "", "also write the labels to this NFD feature file")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "let NFD drop the labels after this long unless rewritten (0: never)")
	return cmd
}

func describeNode(f fingerprint.Fingerprint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host:       %s (%s, kernel %s)\n", f.Hostname, f.Arch, f.Kernel)
	fmt.Fprintf(&b, "cpu:        %s, %d feature flags\n", f.CPU.Model, len(f.CPU.Flags))
	fmt.Fprintf(&b, "memory:     %s total, %s available\n", units.Bytes(f.Memory.Total), units.Bytes(f.Memory.Available))
	fmt.Fprintf(&b, "runtime:    %s %s, platform %s", f.Runtime.Name, f.Runtime.Version, f.Runtime.Platform)
	if f.Runtime.GPUABI != "" {
		fmt.Fprintf(&b, ", nvproxy ABI %s", f.Runtime.GPUABI)
	}
	b.WriteString("\n")
	if !f.GPU.Available {
		fmt.Fprintf(&b, "gpus:       none (%s)\n", f.GPU.Reason)
	} else {
		fmt.Fprintf(&b, "driver:     %s (CUDA driver API %d)\n", f.GPU.DriverVersion, f.GPU.CUDADriverAPI)
		for _, d := range f.GPU.Devices {
			fmt.Fprintf(&b, "gpu %d:      %s %s (%s), %s of %s used, compute %s, MIG %s, persistence %s\n", d.Index, d.Name, d.UUID, d.PCIDeviceID,
				units.Bytes(d.MemoryUsed), units.Bytes(d.MemoryTotal), d.ComputeCapability, onOff(d.MIGEnabled), onOff(d.PersistenceMode))
		}
	}
	if f.CheckpointAPI.Available {
		b.WriteString("checkpoint: the CUDA driver exports the checkpoint API\n")
	} else {
		fmt.Fprintf(&b, "checkpoint: unavailable (%s)\n", f.CheckpointAPI.Reason)
	}
	for _, o := range f.Runtimes {
		if !o.Available {
			fmt.Fprintf(&b, "%-11s not available: %s\n", o.Name+":", o.Reason)
			continue
		}
		fmt.Fprintf(&b, "%-11s %s %s, platform %s\n", o.Name+":", o.Runtime.Name, o.Runtime.Version, o.Runtime.Platform)
		for _, n := range o.Notes {
			fmt.Fprintf(&b, "            %s\n", n)
		}
	}
	fmt.Fprintf(&b, "class:      %s\n", f.Class())
	return b.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
