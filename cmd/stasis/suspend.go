package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/transfer"
)

// actorFlags name a sandbox the engine acts on.
type actorFlags struct {
	bundle  string
	gpu     bool
	durable []string
	console string
}

func (a *actorFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.bundle, "bundle", "", "the actor's OCI bundle (required)")
	cmd.Flags().BoolVar(&a.gpu, "gpu", false, "a GPU actor: run the stasis-cuda helper inside the sandbox")
	cmd.Flags().StringSliceVar(&a.durable, "durable", nil, "durable folders inside the sandbox (bind mounts), for Data snapshots")
	cmd.Flags().StringVar(&a.console, "console-log", "", "file for the sandbox's output after a resume")
	_ = cmd.MarkFlagRequired("bundle")
}

func (a *actorFlags) actor(id string) engine.Actor {
	return engine.Actor{ID: id, Bundle: a.bundle, GPU: a.gpu, DurableDirs: a.durable, ConsoleLog: a.console}
}

func newSuspend(g *globals) *cobra.Command {
	var af actorFlags
	var dir, scope, push string
	cmd := &cobra.Command{
		Use:   "suspend CONTAINER --bundle DIR --snapshot DIR",
		Short: "Snapshot a running sandbox (GPU state included) and stop it",
		Long: `Suspend moves the GPU state of every CUDA process into host memory (with --gpu),
checkpoints the sandbox into a new snapshot folder, syncs and hashes it, writes its
manifest last, and stops the sandbox. On any failure the actor keeps running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			eng, release, err := g.sandboxEngine(cmd.Context())
			if err != nil {
				return err
			}
			defer release()
			var to transfer.Stored
			if push != "" {
				// The store is opened before anything is touched, so that a
				// wrong --repo is refused with the actor still running.
				r, err := g.OpenRepo(cmd.Context())
				if err != nil {
					return err
				}
				to = transfer.Stored{Repo: r, Name: push, Options: g.transferProgress("push")}
			}
			obs := g.observer()
			opts := engine.SuspendOptions{Dir: dir, Scope: snapshot.Scope(scope), Observer: obs}
			if push != "" {
				// The push starts on the image while the checkpoint writes it.
				follower := archiver.NewFollower(to.Repo, 0)
				defer follower.Close()
				opts.Follower, to.Options.Followed = follower, follower
			}
			m, err := eng.Suspend(cmd.Context(), af.actor(args[0]), opts)
			if err != nil {
				return err
			}
			text := fmt.Sprintf("suspended %s into %s (%s snapshot, %d files)\n", args[0], dir, m.Scope, len(m.Files))
			if push != "" {
				// The sandbox is stopped: the snapshot is whole here
				// whatever the push does.
				if err := transfer.Push(cmd.Context(), obs, args[0], "suspend", dir, m, to, nil); err != nil {
					return fmt.Errorf("the snapshot %s is whole on this node, but it was not stored (push it with stasis store push): %w", dir, err)
				}
				text += fmt.Sprintf("pushed as %s to %s\n", push, to.Repo.Backend().Location())
			}
			return g.print(m, text)
		},
	}
	af.register(cmd)
	cmd.Flags().StringVar(&dir, "snapshot", "", "new snapshot folder (required; must be empty or absent)")
	cmd.Flags().StringVar(&scope, "scope", string(snapshot.ScopeFull), "Full (memory, GPU state, rootfs) or Data (durable folders only)")
	cmd.Flags().StringVar(&push, "push", "", "also store the snapshot in the repository (--repo) under this name")
	_ = cmd.MarkFlagRequired("snapshot")
	return cmd
}
