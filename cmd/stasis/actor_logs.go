package main

// stasis actor logs.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

func newActorLogs(g *globals) *cobra.Command {
	var follow bool
	var tail, since string
	cmd := &cobra.Command{
		Use:   "logs ACTOR",
		Short: "Print an actor's console: what its process writes to standard output and error (a micro-VM's serial console)",
		Long: `Print an actor's console: what its process writes to standard output and
error (a micro-VM's serial console), kept by stasisd in DATA/actors/ID/console.log
and the files it rotates it into (stasisd --console-max-size, --console-files).

--since takes a duration back from now (10m, 1h30m) or a time (2026-12-06T10:00:00Z,
2026-12-06); it is exact to within a second, the interval at which stasisd marks
the console as it grows. --tail then keeps the last N lines. With -f the command
goes on printing what is written until interrupted or the actor is deleted, exits
or crashes. --json prints one object a piece, {"data": "..."}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.LogsRequest{ID: args[0], Follow: follow}
			if tail != "all" {
				n, err := strconv.ParseInt(tail, 10, 64)
				if err != nil || n < 0 {
					return errdefs.Mark(fmt.Errorf("--tail %q: want a number of lines, or all", tail), errdefs.ErrInvalidArgument)
				}
				req.Tail = &n
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return errdefs.Mark(err, errdefs.ErrInvalidArgument)
				}
				req.Since = t
			}
			return g.client().Logs(cmd.Context(), req, func(b []byte) error {
				if g.json {
					return json.NewEncoder(g.stdout).Encode(struct {
						Data string `json:"data"`
					}{strings.ToValidUTF8(string(b), "\uFFFD")})
				}
				_, err := g.stdout.Write(b)
				return err
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then print what is written as it comes, until interrupted or the actor is deleted, exits or crashes")
	cmd.Flags().StringVarP(&tail, "tail", "n", "all", "print only the last N lines (all: every line kept)")
	cmd.Flags().StringVar(&since, "since", "", "print only what was written since a time (2026-12-06T10:00:00Z, 2026-12-06) or a duration back from now (10m)")
	return cmd
}

// parseSince reads --since: a duration back from now, or a time in
// RFC 3339 or as a date (UTC).
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration back from now (10m, 1h30m) or a time (2026-12-06T10:00:00Z, 2026-12-06)", s)
}
