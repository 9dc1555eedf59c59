// Package transfer sequences a snapshot store around the engine, which
// moves snapshot folders only: a committed folder pushed to the store, and
// a stored snapshot checked against this node, pulled into a folder and
// resumed. stasisd's service and the daemon-less CLI both go through it, so
// that a push and a pull are the same steps, reported the same way, for
// both.
package transfer

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
)

// Stored names a snapshot in a store: the repository and the name in it,
// with how to report the transfer's progress.
type Stored struct {
	Repo    *store.Repository
	Name    string
	Options archiver.Options
}

// The steps of a transfer, as an Observer sees them.
const (
	StepPush = "push"
	StepPull = "pull"
)

// Push stores the committed snapshot in dir, whose manifest is m, as the
// step "push" of operation opName on actor, reported to obs. recorded, when
// set, runs inside the step once the store holds the snapshot, so that a
// journal records it before the step is over; its error fails the step.
func Push(ctx context.Context, obs engine.Observer, actor, opName, dir string, m *snapshot.Manifest, to Stored, recorded func() error) error {
	return obs.Step(actor, opName, StepPush, func() (string, error) {
		if _, err := archiver.SaveManifest(ctx, to.Repo, to.Name, dir, m, to.Options); err != nil {
			return "", err
		}
		msg := fmt.Sprintf("stored as %s in %s", to.Name, to.Repo.Backend().Location())
		if recorded != nil {
			return msg, recorded()
		}
		return msg, nil
	})
}

// PullAndResume resumes actor a from a stored snapshot: its stored manifest
// is read once and checked against this node (engine.CheckRestore) before
// any byte moves, the snapshot is pulled into dir (empty or absent), every
// chunk checked against its hash as it arrives, and the engine resumes it,
// checking the folder by size only. The manifest is returned once the
// folder is whole, with the error of a later step if one failed: a caller
// may keep the pulled folder as a copy of the stored snapshot. What the pull
// moved is returned too.
func PullAndResume(ctx context.Context, eng *engine.Engine, a engine.Actor, dir string, from Stored, opts engine.ResumeOptions) (*snapshot.Manifest, archiver.Pulled, error) {
	var pulled archiver.Pulled
	name := a.Name
	if name == "" {
		name = a.ID
	}
	stored, err := from.Repo.Snapshot(ctx, from.Name)
	if err != nil {
		return nil, pulled, err
	}
	m, err := snapshot.Parse(stored.Meta)
	if err != nil {
		return nil, pulled, errdefs.Mark(fmt.Errorf("stored snapshot %s: %w", from.Name, err), errdefs.ErrCorrupt)
	}
	if opts.DeviceMap, err = eng.CheckRestore(ctx, a, m, opts); err != nil {
		return nil, pulled, err
	}
	err = opts.Observer.Step(name, "resume", StepPull, func() (string, error) {
		p, err := archiver.RestoreSnapshot(ctx, from.Repo, stored, dir, from.Options)
		pulled = p
		if err != nil {
			return "", err
		}
		msg := fmt.Sprintf("%s (%s): %s fetched from %s (%s stored)", from.Name, units.Bytes(p.Bytes), units.Bytes(p.Fetched), from.Repo.Backend().Location(), units.Bytes(p.Stored))
		if p.Seeded > 0 {
			msg += fmt.Sprintf(", %s copied from this node's copies", units.Bytes(p.Seeded))
		}
		return msg + ", every chunk hash-checked", nil
	})
	if err != nil {
		return nil, pulled, err
	}
	opts.Checked = m
	_, err = eng.Resume(ctx, a, dir, opts)
	return m, pulled, err
}
