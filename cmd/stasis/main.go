// Command stasis suspends and resumes sandboxed actors, GPU state included,
// and runs the quick start's demo. Each subcommand is one file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/gpu/nvml"
	"github.com/stasis-run/stasis/internal/buildinfo"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime/gvisor"
)

// DefaultDataDir holds snapshots and state unless --data says otherwise.
const DefaultDataDir = "/var/lib/stasis"

// globals are the flags every subcommand shares.
type globals struct {
	dataDir string
	repo    string
	json    bool
	runsc   gvisor.Config
	// kernelPolicy is the compatibility rule for the host kernel release.
	kernelPolicy string
	// socket is stasisd's API socket.
	socket string
	stdout io.Writer
	stderr io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stasis:", err)
		code := 1
		var exit *exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
		os.Exit(code)
	}
}

// exitError ends stasis with the exit code of a command it ran for the user.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "stasis",
		Short:         "Suspend and resume sandboxed actors, GPU state included",
		Version:       buildinfo.Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	f := root.PersistentFlags()
	f.StringVar(&g.dataDir, "data", DefaultDataDir, "folder for snapshots and state")
	f.BoolVar(&g.json, "json", false, "print JSON for machines instead of text")
	f.StringVar(&g.repo, "repo", "", "snapshot repository: a folder or s3://BUCKET/PREFIX?endpoint=HOST:PORT (default: DATA/store)")
	f.StringVar(&g.runsc.Runsc, "runsc", "", "runsc binary (default: runsc on PATH)")
	f.StringVar(&g.runsc.Root, "runsc-root", gvisor.DefaultRoot, "runsc state folder")
	f.StringVar(&g.runsc.Platform, "platform", "systrap", "runsc platform")
	f.StringVar(&g.runsc.Network, "network", "", "runsc network: sandbox, host or none (default: runsc's)")
	f.StringVar(&g.runsc.NvproxyDriverVersion, "nvproxy-driver-version", "", "driver ABI for GPU sandboxes when runsc does not know the host's driver")
	f.StringVar(&g.kernelPolicy, "kernel-policy", string(compat.KernelAny), "how much of the host kernel release a Full snapshot's restore requires: any, minor (same major.minor) or exact")
	f.StringVar(&g.socket, "socket", DefaultSocket, "stasisd's API socket (actor, template, snapshot ls)")
	root.AddCommand(newActor(g), newTemplate(g), newNode(g), newPlan(g), newDemo(g), newDemoActor(), newSuspend(g), newResume(g), newSnapshot(g), newRuntimeInfo(g), newCDISpec(g), newGPUBundle(g), newStore(g))
	return root
}

func (g *globals) runtime(ctx context.Context) (*gvisor.Runsc, error) {
	return gvisor.New(ctx, g.runsc)
}

func (g *globals) policy() (compat.Policy, error) {
	rule, err := compat.ParseKernelRule(g.kernelPolicy)
	if err != nil {
		return compat.Policy{}, fmt.Errorf("--kernel-policy: %w", err)
	}
	return compat.Policy{Kernel: rule}, nil
}

// engine is an engine on runsc that reads this node's GPUs through NVML
// and reports progress.
func (g *globals) engine(ctx context.Context) (*engine.Engine, error) {
	policy, err := g.policy()
	if err != nil {
		return nil, err
	}
	rt, err := g.runtime(ctx)
	if err != nil {
		return nil, err
	}
	return &engine.Engine{Runtime: rt, GPU: nvml.New(), Policy: policy, Events: g.progress}, nil
}

// fingerprint reads this node's facts with the runtime as configured.
func (g *globals) fingerprint(ctx context.Context) (node.Fingerprint, error) {
	rt, err := g.runtime(ctx)
	if err != nil {
		return node.Fingerprint{}, err
	}
	return node.Collector{GPU: nvml.New(), Runtime: rt.Info(), CheckpointAPI: cuda.CheckpointAPI}.Collect(ctx)
}

// emit writes one JSON line on stderr, for machines following progress.
func (g *globals) emit(v any) { _ = json.NewEncoder(g.stderr).Encode(v) }

// progress prints each engine step as it ends: to stderr as text, or as a
// JSON line when --json is given, so machines can follow long operations.
func (g *globals) progress(ev engine.Event) {
	if g.json {
		g.emit(ev)
		return
	}
	switch {
	case ev.Err != "":
		fmt.Fprintf(g.stderr, "  %-12s failed after %s: %s\n", ev.Step, ev.Duration.Round(time.Millisecond), ev.Err)
	case ev.Step == "note":
		fmt.Fprintf(g.stderr, "  note: %s\n", ev.Message)
	default:
		fmt.Fprintf(g.stderr, "  %-12s %8s  %s\n", ev.Step, ev.Duration.Round(time.Millisecond), ev.Message)
	}
}

// print writes v as JSON with --json, or the text otherwise.
func (g *globals) print(v any, text string) error {
	if g.json {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprint(g.stdout, text)
	return err
}
