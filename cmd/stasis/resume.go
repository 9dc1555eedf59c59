package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/transfer"
)

func newResume(g *globals) *cobra.Command {
	var af actorFlags
	var dir, newID, deviceMap, probeURL, pull string
	var probeCmd []string
	var probeTimeout time.Duration
	var verify string
	cmd := &cobra.Command{
		Use:   "resume CONTAINER --bundle DIR --snapshot DIR",
		Short: "Verify a snapshot and resume the actor from it in a new sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			devices, err := gpu.ParseDeviceMap(deviceMap)
			if err != nil {
				return errdefs.Mark(fmt.Errorf("--device-map: %w", err), errdefs.ErrInvalidArgument)
			}
			if err := checkProbeCommand(probeCmd); err != nil {
				return err
			}
			opts := engine.ResumeOptions{DeviceMap: devices, Probe: engine.Probe{Command: probeCmd, URL: probeURL, Timeout: probeTimeout}, Observer: g.observer()}
			switch verify {
			case "blocks":
			case "while-restoring":
				opts.Verify = engine.VerifyWhileRestoring
			case "sizes":
				opts.Verify = engine.VerifySizes
			default:
				return errdefs.Mark(fmt.Errorf("--verify %q: want while-restoring, blocks or sizes", verify), errdefs.ErrInvalidArgument)
			}
			eng, release, err := g.sandboxEngine(cmd.Context())
			if err != nil {
				return err
			}
			defer release()
			a := af.actor(args[0])
			if newID != "" {
				// The same actor, called as before, in a sandbox of the new id.
				a.Name, a.ID = a.ID, newID
			}
			if pull != "" {
				// The stored manifest is checked against this node before any
				// byte is fetched, every chunk as it arrives.
				r, err := g.OpenRepo(cmd.Context())
				if err != nil {
					return err
				}
				p, err := transfer.PullAndResume(cmd.Context(), eng, a, dir, transfer.Stored{Repo: r, Name: pull, Options: g.transferProgress("pull")}, opts)
				if err != nil {
					return err
				}
				if err := p.Written(); err != nil {
					return fmt.Errorf("resumed, but the pulled copy in %s was not written (the store holds the snapshot): %w", dir, err)
				}
			} else if _, err := eng.Resume(cmd.Context(), a, dir, opts); err != nil {
				return err
			}
			return g.print(map[string]string{"container": a.ID, "snapshot": dir}, fmt.Sprintf("resumed %s from %s\n", a.ID, dir))
		},
	}
	af.register(cmd)
	cmd.Flags().StringVar(&dir, "snapshot", "", "snapshot folder (required; with --pull, an empty folder to fetch into)")
	cmd.Flags().StringVar(&pull, "pull", "", "first fetch this stored snapshot from the repository (--repo) into --snapshot")
	cmd.Flags().StringVar(&newID, "new-id", "", "container id for the resumed sandbox (default: CONTAINER)")
	cmd.Flags().StringVar(&deviceMap, "device-map", "", "restore GPU state onto other GPUs: OLD_UUID=NEW_UUID,...")
	cmd.Flags().StringSliceVar(&probeCmd, "probe-cmd", nil, "readiness command run inside the sandbox, its argv comma-separated: python3,/app/get.py")
	cmd.Flags().StringVar(&probeURL, "probe-url", "", "readiness URL that must answer 2xx")
	cmd.Flags().DurationVar(&probeTimeout, "probe-timeout", 30*time.Second, "how long to wait for readiness")
	cmd.Flags().StringVar(&verify, "verify", "while-restoring", "how the snapshot is proven whole: hash every block while it restores and refuse it before it is ready (while-restoring), hash before restoring (blocks), or check files and sizes only (sizes: for snapshots checked when they arrived; a pull is always checked chunk by chunk)")
	_ = cmd.MarkFlagRequired("snapshot")
	return cmd
}
