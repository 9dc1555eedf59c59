package main

// stasis actor exec.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

func newActorExec(g *globals) *cobra.Command {
	var interactive bool
	cmd := &cobra.Command{
		Use:   "exec [-i] ACTOR [--] COMMAND [ARGS...]",
		Short: "Run a command inside a running actor and print its output; exits with its exit code",
		Long: `Run a command inside a running actor and print its output; exits with its exit code.

Flags go before ACTOR: what follows it is the command's own (exec a1 sh -c 'echo hi'),
as docker exec has it; flags between ACTOR and a -- are still read as stasis's
(exec a1 --json -- cat /etc/hostname). With -i the command reads this command's standard input, whole
(at most 512 KiB): echo hi | stasis actor exec -i a1 cat. Its output is printed as it
comes (ExecStream); with --json, the result is printed as one object when it ends.
No terminal yet (-t).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("exec needs an actor and a command: stasis actor exec [-i] ACTOR [--] COMMAND [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			command, err := execCommand(cmd, args[1:])
			if err != nil {
				return err
			}
			req := api.ExecRequest{ID: args[0], Args: command}
			if interactive {
				in, err := readStdin(cmd.InOrStdin())
				if err != nil {
					return err
				}
				req.Stdin = in
			}
			var res api.ExecResult
			if g.json {
				// One object for machines, when it ends.
				if res, err = g.client().Exec(cmd.Context(), req); err != nil {
					return err
				}
				if err := g.print(res, res.Stdout); err != nil {
					return err
				}
			} else if res.ExitCode, err = g.client().ExecStream(cmd.Context(), req, g.stdout, g.stderr); err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode, msg: fmt.Sprintf("%s exited %d in %s", command[0], res.ExitCode, args[0])}
			}
			return nil
		},
	}
	// Everything after the actor is the command's, flags included.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "give the command this command's standard input (read whole, at most 512 KiB)")
	return cmd
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
