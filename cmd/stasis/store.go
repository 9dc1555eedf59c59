package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/transfer"
)

// transferProgress prints a transfer's progress on stderr (a JSON line each
// with --json).
func (g *globals) transferProgress(verb string) archiver.Options {
	return archiver.Options{ProgressEvery: time.Second, Progress: func(p archiver.Progress) {
		if g.json {
			g.emit(map[string]any{"progress": verb, "snapshot": p.Snapshot, "bytesDone": p.BytesDone, "bytes": p.Bytes, "stored": p.Stored, "filesDone": p.FilesDone, "files": p.Files})
			return
		}
		pct := 100.0
		if p.Bytes > 0 {
			pct = 100 * float64(p.BytesDone) / float64(p.Bytes)
		}
		fmt.Fprintf(g.stderr, "  %s %s: %5.1f%% of %s, %d/%d files, %s moved\n", verb, p.Snapshot, pct, units.Bytes(p.Bytes), p.FilesDone, p.Files, units.Bytes(p.Stored))
	}}
}

func newStore(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "The snapshot repository: content-addressed, deduplicated, local, S3 or GCS",
		Long: `The repository is a local folder (default: DATA/store), an S3 bucket given with
--repo s3://BUCKET/PREFIX?endpoint=HOST:PORT[&insecure=true][&region=R] (credentials from
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or a GCS bucket, gs://BUCKET/PREFIX.`,
	}
	g.RegisterStore(cmd.PersistentFlags())
	cmd.AddCommand(newStoreInit(g), newStorePush(g), newStorePull(g), newStoreLs(g), newStoreInspect(g), newStoreVerify(g), newStoreDU(g), newStoreRm(g), newStoreGC(g), newStoreUpgrade(g))
	return cmd
}

// repoCommand is a store subcommand that works on the opened repository.
func repoCommand(g *globals, cmd *cobra.Command, run func(ctx context.Context, r *store.Repository, args []string) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		r, err := g.OpenRepo(cmd.Context())
		if err != nil {
			return err
		}
		return run(cmd.Context(), r, args)
	}
	return cmd
}

func newStoreInit(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "init", Short: "Create a repository", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			be, err := location.FromEnv(cmd.Context(), g.RepoLocation())
			if err != nil {
				return err
			}
			if _, err := store.Init(cmd.Context(), be); err != nil {
				return err
			}
			return g.print(map[string]string{"repository": be.Location()}, fmt.Sprintf("created a repository at %s\n", be.Location()))
		},
	}
}

func newStorePush(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "push SNAPSHOT-FOLDER NAME", Short: "Store a snapshot folder under NAME", Args: cobra.ExactArgs(2)},
		func(ctx context.Context, r *store.Repository, args []string) error {
			s, err := archiver.Save(ctx, r, args[1], args[0], g.transferProgress(transfer.StepPush))
			if err != nil {
				return err
			}
			return g.print(s, fmt.Sprintf("stored %s (%s, %d files)\n", s.Name, units.Bytes(s.Size()), len(s.Files)))
		})
}

func newStorePull(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "pull NAME FOLDER", Short: "Fetch and verify a stored snapshot into an empty folder", Args: cobra.ExactArgs(2)},
		func(ctx context.Context, r *store.Repository, args []string) error {
			if err := archiver.Restore(ctx, r, args[0], args[1], g.transferProgress(transfer.StepPull)); err != nil {
				return err
			}
			return g.print(map[string]string{"snapshot": args[0], "folder": args[1]}, fmt.Sprintf("pulled %s into %s\n", args[0], args[1]))
		})
}

func newStoreLs(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "ls", Short: "List stored snapshots", Args: cobra.NoArgs},
		func(ctx context.Context, r *store.Repository, _ []string) error {
			infos, err := r.List(ctx)
			if err != nil {
				return err
			}
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCREATED\tSIZE\tFILES")
			damaged := 0
			for _, i := range infos {
				if i.Damaged != "" {
					damaged++
					fmt.Fprintf(w, "%s\tDAMAGED: %s\n", i.Name, i.Damaged)
					continue
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", i.Name, i.CreatedAt.Local().Format("2006-01-02 15:04:05"), units.Bytes(i.Size), i.Files)
			}
			for _, d := range r.DamagedIndexes() {
				damaged++
				fmt.Fprintf(w, "%s\tDAMAGED: %s\n", d.Object, d.Reason)
			}
			w.Flush()
			if damaged > 0 && !g.json {
				fmt.Fprintf(g.stderr, "stasis: %d damaged object(s) in the store; the other snapshots are listed and usable (stasis store verify checks them all)\n", damaged)
			}
			if infos == nil {
				infos = []store.Info{}
			}
			return g.print(infos, b.String())
		})
}

func newStoreInspect(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "inspect NAME", Short: "Print a stored snapshot's manifest", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, r *store.Repository, args []string) error {
			s, err := r.Snapshot(ctx, args[0])
			if err != nil {
				return err
			}
			return g.print(s, fmt.Sprintf("%s: %s in %d files, created %s\n", s.Name, units.Bytes(s.Size()), len(s.Files), s.CreatedAt.Format(time.RFC3339)))
		})
}

func newStoreVerify(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "verify [NAME...]", Short: "Read every chunk of the snapshots (all when none named) and check its hash"},
		func(ctx context.Context, r *store.Repository, args []string) error {
			if err := r.Verify(ctx, args...); err != nil {
				return err
			}
			return g.print(map[string]any{"ok": true}, "ok: every chunk matches its hash\n")
		})
}

func newStoreDU(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "du", Short: "Logical against stored bytes, and the dedup ratio", Args: cobra.NoArgs},
		func(ctx context.Context, r *store.Repository, _ []string) error {
			u, err := r.DU(ctx)
			if err != nil {
				return err
			}
			return g.print(u, fmt.Sprintf("%d snapshots: %s logical, %s unique, %s stored in %d packs, dedup %.2fx\n",
				u.Snapshots, units.Bytes(u.Logical), units.Bytes(u.Unique), units.Bytes(u.Stored), u.Packs, u.Dedup))
		})
}

func newStoreRm(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "rm NAME", Short: "Delete a stored snapshot (gc frees its chunks)", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, r *store.Repository, args []string) error {
			if err := r.Delete(ctx, args[0]); err != nil {
				return err
			}
			return g.print(map[string]string{"deleted": args[0]}, fmt.Sprintf("deleted %s\n", args[0]))
		})
}

func newStoreGC(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "gc", Short: "Delete the packs no snapshot uses (takes the repository's exclusive lock)", Args: cobra.NoArgs},
		func(ctx context.Context, r *store.Repository, _ []string) error {
			res, err := r.GC(ctx)
			if err != nil {
				return err
			}
			return g.print(res, fmt.Sprintf("deleted %d packs (%s), kept %d, removed %d stale locks\n", res.PacksDeleted, units.Bytes(res.BytesFreed), res.PacksKept, res.StaleLocks))
		})
}

func newStoreUpgrade(g *globals) *cobra.Command {
	return repoCommand(g, &cobra.Command{Use: "upgrade", Short: "Move a format 2 repository to the current format in place (takes the exclusive lock)", Args: cobra.NoArgs,
		Long: `Upgrade moves a format 2 repository to format 3 by rewriting its config: what is
stored stays as it is and valid, and snapshots pushed from then on keep chunks that
zstd cannot shrink (a model's bf16 weights) as grouped bytes, in about two thirds of
their bytes (docs/store.md). Builds that read formats up to 2 refuse the repository
afterwards: upgrade stasis on every node that uses it first. A stasisd that has the
repository open keeps writing format 2 chunks (valid in format 3) until it restarts.
A format 1 repository cannot be upgraded in place (its chunking differs): make a new
one. The command fails, changing nothing, while a push or gc holds a lock.`},
		func(ctx context.Context, r *store.Repository, _ []string) error {
			up, err := r.Upgrade(ctx)
			if err != nil {
				return err
			}
			text := fmt.Sprintf("%s: format %d, already current\n", r.Backend().Location(), up.To)
			if up.From != up.To {
				text = fmt.Sprintf("%s: format %d -> %d\n", r.Backend().Location(), up.From, up.To)
			}
			return g.print(up, text)
		})
}
