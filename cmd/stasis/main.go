// Command stasis suspends and resumes sandboxed actors, GPU state included,
// and runs the quick start's demo. Each subcommand is one file (the actor subcommands actor_*.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/cmd/internal/compose"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/internal/buildinfo"
)

// globals are the flags every subcommand shares.
type globals struct {
	compose.Options
	json   bool
	stdout io.Writer
	stderr io.Writer
}

func main() {
	// Snapshots the CLI writes hold process memory: its files are the
	// user's own, whatever the umask.
	syscall.Umask(0o077)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line and returns the exit code: 0, the exit code
// of a command run for the user (exec), or the error's category's
// (docs/cli.md). An error is printed on stderr, or, with --json, as a JSON
// object on stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, g := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var exit *exitError
	if errors.As(err, &exit) {
		fmt.Fprintln(stderr, "stasis:", err)
		return exit.code
	}
	c := errdefs.Of(err)
	if g.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"error": map[string]any{"code": c.Code, "message": err.Error(), "exit": c.Exit}})
	} else {
		fmt.Fprintln(stderr, "stasis:", err)
	}
	return c.Exit
}

// exitError ends stasis with the exit code of a command it ran for the user.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newRoot(stdout, stderr io.Writer) (*cobra.Command, *globals) {
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
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return errdefs.Mark(err, errdefs.ErrInvalidArgument) })
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.AbsolutePaths() }
	// The global flags are those every command uses; each command group
	// has the others it uses (kubectl and docker keep theirs few too).
	f := root.PersistentFlags()
	g.RegisterData(f)
	f.BoolVar(&g.json, "json", false, "print JSON for machines instead of text (errors too, as {\"error\": {\"code\", \"message\", \"exit\"}} on stdout)")
	// The flags that were global before are still taken by every command,
	// unlisted, so that command lines written then keep working; a
	// command that does not use one ignores it, as it did.
	before := pflag.NewFlagSet("before", pflag.ContinueOnError)
	g.RegisterSocket(before)
	g.RegisterStore(before)
	g.RegisterRuntime(before)
	before.VisitAll(func(fl *pflag.Flag) { fl.Hidden = true })
	f.AddFlagSet(before)
	for _, c := range []struct {
		cmd                    *cobra.Command
		socket, store, runtime bool
	}{
		{cmd: newActor(g), socket: true},
		{cmd: newEvents(g), socket: true},
		{cmd: newTemplate(g), socket: true},
		{cmd: newDemo(g), socket: true},
		// node info and labels read the node's facts; node lease asks stasisd.
		{cmd: newNode(g), socket: true, runtime: true},
		// snapshot ls and inspect ask stasisd; check reads the node's facts.
		{cmd: newSnapshot(g), socket: true, runtime: true},
		{cmd: newPlan(g), runtime: true},
		{cmd: newSuspend(g), store: true, runtime: true},
		{cmd: newResume(g), store: true, runtime: true},
		{cmd: newRuntimeInfo(g), runtime: true},
		{cmd: newStore(g)},
		{cmd: newCDISpec(g)},
		{cmd: newGPUBundle(g)},
		{cmd: newDemoActor()},
	} {
		pf := c.cmd.PersistentFlags()
		if c.socket {
			g.RegisterSocket(pf)
		}
		if c.store {
			g.RegisterStore(pf)
		}
		if c.runtime {
			g.RegisterRuntime(pf)
		}
		root.AddCommand(c.cmd)
	}
	strict(root)
	return root, g
}

// strict makes every command that only groups others refuse an unknown
// subcommand (cobra prints the help and exits 0 otherwise), and every
// command's argument errors a usage error (exit 2).
func strict(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		strict(c)
	}
	if cmd.HasSubCommands() && cmd.RunE == nil && cmd.Run == nil {
		cmd.SuggestionsMinimumDistance = 2
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				hint := "see " + c.CommandPath() + " --help"
				if near := c.SuggestionsFor(args[0]); len(near) > 0 {
					hint = "did you mean " + c.CommandPath() + " " + strings.Join(near, " or ") + "? (" + hint + ")"
				}
				return errdefs.Mark(fmt.Errorf("unknown command %q for %q; %s", args[0], c.CommandPath(), hint), errdefs.ErrInvalidArgument)
			}
			return nil
		}
		cmd.RunE = func(c *cobra.Command, _ []string) error {
			_ = c.Help()
			return errdefs.Mark(fmt.Errorf("%s needs a subcommand", c.CommandPath()), errdefs.ErrInvalidArgument)
		}
	}
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			if err == nil {
				return nil
			}
			// cobra's words ("accepts 1 arg(s), received 2") name neither
			// the command nor what it takes.
			return errdefs.Mark(fmt.Errorf("%s: %w (usage: %s)", strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "), err, c.UseLine()), errdefs.ErrInvalidArgument)
		}
	}
}

func (g *globals) client() *api.Client { return api.Dial(g.Socket) }

// fingerprint reads this node's facts with the runtime as configured.
func (g *globals) fingerprint(ctx context.Context) (fingerprint.Fingerprint, error) {
	eng, err := g.Engine(ctx)
	if err != nil {
		return fingerprint.Fingerprint{}, err
	}
	return eng.Fingerprint(ctx)
}

// sandboxEngine takes the runsc state folder for a daemon-less command
// that drives sandboxes (compose.Options.LockSandboxes) and gives the
// engine to drive them with; release frees the folder.
func (g *globals) sandboxEngine(ctx context.Context) (eng *engine.Engine, release func(), err error) {
	release, err = g.LockSandboxes()
	if err != nil {
		return nil, nil, err
	}
	if eng, err = g.Engine(ctx); err != nil {
		release()
		return nil, nil, err
	}
	return eng, release, nil
}

// emit writes one JSON line on stderr, for machines following progress.
func (g *globals) emit(v any) { _ = json.NewEncoder(g.stderr).Encode(v) }

// observer prints each engine step as it ends: to stderr as text, or as a
// JSON line when --json is given, so machines can follow long operations.
func (g *globals) observer() engine.Observer {
	return engine.Observer{After: func(st engine.Step) {
		if g.json {
			g.emit(st)
			return
		}
		switch {
		case st.Err != "":
			fmt.Fprintf(g.stderr, "  %-14s failed after %s: %s\n", st.Name, st.Duration.Round(time.Millisecond), st.Err)
		case st.Name == "note":
			fmt.Fprintf(g.stderr, "  note: %s\n", st.Message)
		default:
			fmt.Fprintf(g.stderr, "  %-14s %8s  %s\n", st.Name, st.Duration.Round(time.Millisecond), st.Message)
		}
	}}
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
