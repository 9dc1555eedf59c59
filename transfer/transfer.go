// Package transfer sequences a snapshot store around the engine, which
// moves snapshot folders only: a committed folder pushed to the store, and
// a stored snapshot checked against this node, pulled into a folder and
// resumed. stasisd's service and the daemon-less CLI both go through it, so
// that a push and a pull are the same steps, reported the same way, for
// both.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/lazyfs"
	"github.com/stasis-run/stasis/internal/procfs"
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
	// Views, when set, is a private folder in which PullAndResume mounts
	// a view of the folder it pulls into (lazyfs; the view is named after
	// the new sandbox's id, and gone once the resume is over), for a runtime that
	// reads its image lazily: the sandbox is then restored while the pull
	// goes on, each read waiting for its bytes, which are fetched ahead of
	// the rest. Where no view can be mounted (no FUSE), the snapshot is
	// pulled whole first.
	Views string
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

// Pull is what PullAndResume pulled: the snapshot's manifest, what moved,
// and the folder it was pulled into, which may still be being written.
type Pull struct {
	Manifest *snapshot.Manifest
	Pulled   archiver.Pulled
	// filling is the restore into the folder; stop ends it.
	filling *archiver.Filling
	stop    context.CancelFunc
}

// Written waits until the pulled folder is whole, its manifest written,
// and says why not when it never will be (the folder is then empty; the
// store holds the snapshot). A pull through a view that held the memory
// image in memory (archiver.Options.Stage) writes it into the folder after
// the resume; otherwise the folder is whole already.
func (p *Pull) Written() error {
	if p.filling == nil {
		return nil
	}
	_, err := p.filling.Wait()
	return err
}

// Done is closed once the folder's writing has ended (Written then
// returns at once).
func (p *Pull) Done() <-chan struct{} {
	if p.filling == nil {
		// The folder was whole when the Pull was returned.
		done := make(chan struct{})
		close(done)
		return done
	}
	return p.filling.Done()
}

// Stop stops writing the folder, if it is still being written, and
// waits: the folder is then empty, or whole.
func (p *Pull) Stop() {
	if p.filling == nil {
		return
	}
	p.stop()
	_, _ = p.filling.Wait()
}

// PullAndResume resumes actor a from a stored snapshot: its stored manifest
// is read once and checked against this node (engine.CheckRestore) before
// any byte moves, the snapshot is pulled into dir (empty or absent), every
// chunk checked against its hash as it arrives, and the engine resumes it,
// checking the folder by size only. The Pull is returned once every chunk
// is checked, with the error of a later step if one failed: a caller may
// keep the pulled folder as a copy of the stored snapshot, once it is
// written (Pull.Written; it then outlives ctx, and Pull.Stop ends it).
// Without a Pull, nothing is left in dir.
func PullAndResume(ctx context.Context, eng *engine.Engine, a engine.Actor, dir string, from Stored, opts engine.ResumeOptions) (*Pull, error) {
	name := a.Label()
	stored, err := from.Repo.Snapshot(ctx, from.Name)
	if err != nil {
		return nil, err
	}
	m := stored.Folder()
	if opts.DeviceMap, err = eng.CheckRestore(ctx, a, m, opts); err != nil {
		return nil, err
	}
	if from.Views != "" && m.Scope == snapshot.ScopeFull && eng.Runtime.Capabilities().LazyImage {
		return pullWhileResuming(ctx, eng, a, name, dir, stored, m, from, opts)
	}
	pull := &Pull{Manifest: m}
	// Pulled whole first: nothing to hold in memory.
	whole := from.Options
	whole.Stage = nil
	err = opts.Observer.Step(name, "resume", StepPull, func() (string, error) {
		p, err := archiver.RestoreSnapshot(ctx, from.Repo, stored, dir, whole)
		pull.Pulled = p
		if err != nil {
			return "", err
		}
		return pulledMessage(from, p), nil
	})
	if err != nil {
		return nil, err
	}
	opts.Checked = m
	_, err = eng.Resume(ctx, a, dir, opts)
	return pull, err
}

// Fetch pulls the stored snapshot from.Name whole into dir, once check,
// given its manifest (read and parsed once), passes: a snapshot check
// refuses fetches nothing. Every chunk is hash-checked on arrival; the
// manifest is written last.
func Fetch(ctx context.Context, from Stored, dir string, check func(*snapshot.Manifest) error) (archiver.Pulled, error) {
	stored, err := from.Repo.Snapshot(ctx, from.Name)
	if err != nil {
		return archiver.Pulled{}, err
	}
	if err := check(stored.Folder()); err != nil {
		return archiver.Pulled{}, err
	}
	return archiver.RestoreSnapshot(ctx, from.Repo, stored, dir, from.Options)
}

func pulledMessage(from Stored, p archiver.Pulled) string {
	msg := fmt.Sprintf("%s (%s): %s fetched from %s (%s stored)", from.Name, units.Bytes(p.Bytes), units.Bytes(p.Fetched), from.Repo.Backend().Location(), units.Bytes(p.Stored))
	if p.Seeded > 0 {
		msg += fmt.Sprintf(", %s taken from this node's copies", units.Bytes(p.Seeded))
	}
	return msg + ", every chunk hash-checked"
}

// viewCloseTimeout bounds how long a resume waits, once every chunk of
// its pull is checked, for the runtime to close the image it opened
// through the view (runsc reads the rest of the memory from the page cache
// by then).
const viewCloseTimeout = time.Minute

// pullWhileResuming is PullAndResume through a view (Stored.Views): the
// pull starts, the engine restores from the view while it goes on, and
// the resume is over (the actor running, its probe passed) only once every
// chunk is checked and the runtime has closed what it read through the
// view, so that nothing the sandbox runs on depends on this process after.
// A file the pull holds in memory (archiver.Options.Stage) is written into
// the folder after that: the pull's reads do not share the disk with the
// write-back of its copy.
func pullWhileResuming(ctx context.Context, eng *engine.Engine, a engine.Actor, name, dir string, stored *store.Snapshot, m *snapshot.Manifest, from Stored, opts engine.ResumeOptions) (*Pull, error) {
	var pulled archiver.Pulled
	// The pull ends with ctx until the resume is over; the writing of the
	// folder after it, with Pull.Stop.
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, stop)
	kept := false
	defer func() {
		if !kept {
			stop()
		}
	}()
	var filling *archiver.Filling
	var view *lazyfs.View
	// Named after the sandbox, so that a stasisd that restarts knows
	// which sandbox read through a view it left behind.
	id := a.ID
	mnt := filepath.Join(from.Views, id)
	// Before the pull reads the disk hard, what the restore reads from
	// it beside the image.
	var prefetched string
	if !opts.Prefetched {
		prefetched, opts.Prefetched = eng.Prefetch(ctx, a, m), true
	}
	started := time.Now()
	before := store.Stats(from.Repo.Backend())
	err := opts.Observer.Step(name, "resume", StepPull, func() (string, error) {
		f, err := archiver.StartRestore(pctx, from.Repo, stored, dir, from.Options)
		if err != nil {
			return "", err
		}
		filling = f
		if view, err = mountView(mnt, dir, stored, f); err != nil {
			// Resumed once whole, as without a view.
			p, werr := f.Wait()
			pulled = p
			if werr != nil {
				return "", werr
			}
			return fmt.Sprintf("%s; no view to resume from while it pulled (%v)", pulledMessage(from, p), err), nil
		}
		msg := fmt.Sprintf("%s (%s) from %s: restored through %s while it pulls, each chunk hash-checked before it is read", from.Name, units.Bytes(stored.Size()), from.Repo.Backend().Location(), mnt)
		if prefetched != "" {
			msg += "; " + prefetched
		}
		return msg, nil
	})
	if err != nil {
		return nil, err
	}
	opts.Checked = m
	if view == nil {
		_, err = eng.Resume(ctx, a, dir, opts)
		return &Pull{Manifest: m, Pulled: pulled}, err
	}
	closeView := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, viewCloseTimeout)
		defer cancel()
		if err := view.Close(ctx); err != nil {
			return err
		}
		return os.Remove(mnt)
	}
	opts.Arriving = func(ctx context.Context) (string, error) {
		p, err := filling.Fetched()
		pulled = p
		if err != nil {
			return "", err
		}
		msg := fmt.Sprintf("%s; every chunk checked %.1f s after the pull began", pulledMessage(from, p), time.Since(started).Seconds())
		if filling.Staged() {
			msg += "; the memory image, held in memory, is being written into " + dir
		}
		if err := closeView(ctx); err != nil {
			// The folder is whole: what is still open through the view is
			// served from it while this process runs.
			msg += fmt.Sprintf("; %v", err)
		}
		return msg, nil
	}
	_, err = eng.Resume(ctx, a, view.Dir(), opts)
	if err != nil {
		// A pull that failed first is why the restore failed (its reads
		// through the view did): its error comes first, and its category
		// with it. A store that stalled, broke or failed requests while
		// the restore read through the view kept it waiting for its bytes
		// (runsc gives up on its image after about 20 s, even where the
		// pull then finishes): said so, as unavailable, not as the
		// runtime's internal failure to read its image.
		faults := store.Stats(from.Repo.Backend()).Since(before)
		stop()
		var perr error
		pulled, perr = filling.Wait()
		switch {
		case perr != nil && !errors.Is(perr, context.Canceled) && !errors.Is(err, perr):
			err = fmt.Errorf("pull %s: %w; the restore read its image through the view, and failed with it: %w", from.Name, perr, err)
		case faults.Stalls+faults.ResumedReads+faults.Retries > 0:
			err = errdefs.Mark(fmt.Errorf("pull %s from %s: the store stalled %d reads, broke %d and failed %d requests while the restore waited for the image's bytes, and the restore failed: %w",
				from.Name, from.Repo.Backend().Location(), faults.Stalls, faults.ResumedReads, faults.Retries, err), errdefs.ErrUnavailable)
		}
		_ = closeView(context.WithoutCancel(ctx))
		return nil, err
	}
	// From here the folder's writing ends with Pull.Stop (or has ended
	// with ctx, which Written then says).
	detach()
	kept = true
	return &Pull{Manifest: m, Pulled: pulled, filling: filling, stop: stop}, nil
}

// mountView shows the files of stored snapshot s, being restored into dir
// by f, at mnt.
func mountView(mnt, dir string, s *store.Snapshot, f *archiver.Filling) (*lazyfs.View, error) {
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, err
	}
	// The largest file is the memory image, which the runtime reads in
	// large requests as it loads memory; the others (its state, the
	// image's metadata) it reads from the start in small ones.
	largest := 0
	files := make([]lazyfs.File, 0, len(s.Files))
	for i, sf := range s.Files {
		files = append(files, lazyfs.File{Path: sf.Path, Size: sf.Size, Mode: os.FileMode(sf.Mode).Perm()})
		if sf.Size > s.Files[largest].Size {
			largest = i
		}
	}
	if len(files) > 0 {
		files[largest].Direct = true
	}
	v, err := lazyfs.Mount(mnt, dir, files, viewSource{f})
	if err != nil {
		_ = os.Remove(mnt)
		return nil, err
	}
	return v, nil
}

// PullMemory lends this node's memory to pulls that hold their memory
// image in memory while the resume reads it (archiver.Options.Stage: set
// it to Stage). An image is held there when, with the images lent before
// and not yet given back counted, a quarter of the node's memory stays
// available with each counted twice (the held copy and the sandbox's own
// memory), and a quarter of this process's cgroup's room where it has a
// limit (the held copy is charged to it). Its zero value is ready; it is
// safe for concurrent use.
type PullMemory struct {
	mu   sync.Mutex
	lent int64
}

// Stage lends size bytes, or says nil when they are not there.
func (m *PullMemory) Stage(size int64) (release func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if size+m.lent > stageRoom() {
		return nil
	}
	m.lent += size
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.lent -= size
		})
	}
}

// stageRoom is the bytes of images the node can hold in memory now, by
// PullMemory's rule; 0 when its memory cannot be read.
func stageRoom() int64 {
	m, err := procfs.Meminfo("/proc/meminfo")
	if err != nil {
		return 0
	}
	available, total := m["MemAvailable"], m["MemTotal"]
	room := (available - min(available, total/4)) / 2
	if cg, limited, err := procfs.CgroupMemoryRoom("/proc", "/sys/fs/cgroup", os.Getpid()); err != nil {
		return 0
	} else if limited {
		room = min(room, cg-cg/4)
	}
	return int64(room)
}

// viewSource is a restore as the view reads it: each read waits for its
// bytes (Await) and a file is read where the restore writes it (Open: a
// file held in memory until the folder has it).
type viewSource struct{ *archiver.Filling }

func (v viewSource) Open(path string) (lazyfs.Reader, error) { return v.Filling.Open(path) }

var _ lazyfs.Opener = viewSource{}
