package main

// stasis actor exec.

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

func newActorExec(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "exec ACTOR -- COMMAND [ARGS...]",
		Short: "Run a command inside a running actor and print its output; exits with its exit code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Exec(cmd.Context(), api.ExecRequest{ID: args[0], Args: args[1:]})
			if err != nil {
				return err
			}
			if err := g.print(res, res.Stdout); err != nil {
				return err
			}
			if !g.json {
				fmt.Fprint(g.stderr, res.Stderr)
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode, msg: fmt.Sprintf("%s exited %d in %s", args[1], res.ExitCode, args[0])}
			}
			return nil
		},
	}
}
