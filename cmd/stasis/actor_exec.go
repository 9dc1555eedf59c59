package main

// stasis actor exec.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

func newActorExec(g *globals) *cobra.Command {
	var interactive, tty bool
	cmd := &cobra.Command{
		Use:   "exec [-i] [-t] ACTOR [--] COMMAND [ARGS...]",
		Short: "Run a command inside a running actor and print its output; exits with its exit code",
		Long: `Run a command inside a running actor and print its output; exits with its exit code.

Flags go before ACTOR: what follows it is the command's own (exec a1 sh -c 'echo hi'),
as docker exec has it; flags between ACTOR and a -- are still read as stasis's
(exec a1 --json -- cat /etc/hostname). Its output is printed as it comes.

-i gives the command this command's standard input as it comes, its end the command's
end of file: echo hi | stasis actor exec -i a1 cat. -t runs it on a terminal of this
terminal's size (80x24 when there is none), its output all on standard output, resized as
this one is; with -i, standard input must be a terminal, which is put in raw mode while
the command runs: stasis actor exec -it a1 sh. A micro-VM actor's command gets its input
whole (at most 512 KiB) and no terminal.

With --json the result is printed as one object when it ends (standard input, with -i,
read whole first; no -t).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("exec needs an actor and a command: stasis actor exec [-i] [-t] ACTOR [--] COMMAND [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			command, err := execCommand(cmd, args[1:])
			if err != nil {
				return err
			}
			req := api.ExecRequest{ID: args[0], Args: command}
			var res api.ExecResult
			switch {
			case g.json && tty:
				return errdefs.Mark(errors.New("exec: --json prints the result as one object, which a terminal's output cannot be: drop -t or --json"), errdefs.ErrInvalidArgument)
			case g.json:
				// One object for machines, when it ends.
				if interactive {
					if req.Stdin, err = readStdin(cmd.InOrStdin()); err != nil {
						return err
					}
				}
				if res, err = g.client().Exec(cmd.Context(), req); err != nil {
					return err
				}
				if err := g.print(res, res.Stdout); err != nil {
					return err
				}
			case interactive || tty:
				if res.ExitCode, err = execAttached(cmd, g, req, interactive, tty); err != nil {
					return err
				}
			default:
				if res.ExitCode, err = g.client().ExecStream(cmd.Context(), req, g.stdout, g.stderr); err != nil {
					return err
				}
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode, msg: fmt.Sprintf("%s exited %d in %s", command[0], res.ExitCode, args[0])}
			}
			return nil
		},
	}
	// Everything after the actor is the command's, flags included.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "give the command this command's standard input, as it comes")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal (with -i, standard input must be one)")
	return cmd
}

// execAttached runs req over ExecAttach: standard input passed on with
// interactive, a terminal with tty, this one in raw mode while it runs and
// its resizes passed on.
func execAttached(cmd *cobra.Command, g *globals, req api.ExecRequest, interactive, tty bool) (int, error) {
	streams := api.ExecStreams{Stdout: g.stdout, Stderr: g.stderr}
	stdin, stdinIsFile := cmd.InOrStdin().(*os.File)
	stdinIsTerminal := stdinIsFile && term.IsTerminal(int(stdin.Fd()))
	if interactive {
		streams.Stdin = cmd.InOrStdin()
	}
	if tty {
		if interactive && !stdinIsTerminal {
			return 0, errdefs.Mark(errors.New("exec -it: the input device is not a terminal: drop -t to pipe input in, or run it from a terminal"), errdefs.ErrInvalidArgument)
		}
		req.TTY = true
		size, sized := terminalSize(stdin, g.stdout)
		req.Window = &size
		if interactive {
			state, err := term.MakeRaw(int(stdin.Fd()))
			if err != nil {
				return 0, fmt.Errorf("put the terminal in raw mode: %w", err)
			}
			defer func() { _ = term.Restore(int(stdin.Fd()), state) }()
		}
		if sized {
			resize := make(chan api.WindowSize, 1)
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			go func() {
				for {
					select {
					case <-winch:
						if size, ok := terminalSize(stdin, g.stdout); ok {
							select {
							case resize <- size:
							case <-ctx.Done():
								return
							}
						}
					case <-ctx.Done():
						return
					}
				}
			}()
			streams.Resize = resize
		}
	}
	return g.client().ExecAttach(cmd.Context(), req, streams)
}

// terminalSize is the size of the first of the terminals given, else 80x24
// (ok false).
func terminalSize(files ...any) (api.WindowSize, bool) {
	for _, f := range files {
		if f, isFile := f.(*os.File); isFile && f != nil && term.IsTerminal(int(f.Fd())) {
			if cols, rows, err := term.GetSize(int(f.Fd())); err == nil && rows > 0 && cols > 0 {
				return api.WindowSize{Rows: uint16(min(rows, math.MaxUint16)), Cols: uint16(min(cols, math.MaxUint16))}, true
			}
		}
	}
	return api.WindowSize{Rows: 24, Cols: 80}, false
}

// readStdin reads standard input whole, refusing more than an exec takes.
func readStdin(r io.Reader) ([]byte, error) {
	in, err := io.ReadAll(io.LimitReader(r, api.MaxExecStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	if len(in) > api.MaxExecStdin {
		return nil, errdefs.Mark(fmt.Errorf("standard input is over the %d KiB an exec takes whole; copy larger input through a durable folder", api.MaxExecStdin>>10), errdefs.ErrInvalidArgument)
	}
	return in, nil
}

// execCommand is the command an exec runs, from what follows the actor on
// the command line: all of it, as docker exec reads it; or, where stasis's
// own flags stand between the actor and a -- (the form before flags ended
// at the actor), what follows the --, those flags read.
func execCommand(cmd *cobra.Command, rest []string) ([]string, error) {
	if i := slices.Index(rest, "--"); i == 0 || i > 0 && strings.HasPrefix(rest[0], "-") {
		if err := cmd.Flags().Parse(rest[:i]); err != nil {
			return nil, errdefs.Mark(err, errdefs.ErrInvalidArgument)
		}
		if extra := cmd.Flags().Args(); len(extra) > 0 {
			return nil, errdefs.Mark(fmt.Errorf("exec: %q before -- is neither a flag nor its value", extra[0]), errdefs.ErrInvalidArgument)
		}
		rest = rest[i+1:]
	}
	if len(rest) == 0 {
		return nil, errdefs.Mark(errors.New("exec: no command given"), errdefs.ErrInvalidArgument)
	}
	return rest, nil
}
