package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/snapshot"
)

// Snapshot is a stored snapshot's manifest, the object snapshots/<name>.
type Snapshot struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// Meta is the snapshot folder's own manifest (snapshot.Manifest):
	// scope, runtime, GPU driver, block digests. Restore writes it back.
	Meta  json.RawMessage `json:"meta"`
	Files []File          `json:"files"`

	// folder is Meta parsed, once, when the stored snapshot was read.
	folder *snapshot.Manifest
}

// Folder is the snapshot folder's manifest (Meta), parsed and checked
// once when the stored snapshot was read (Repository.Snapshot), so that
// no caller parses it again; nil for one not read from a repository.
func (s *Snapshot) Folder() *snapshot.Manifest { return s.folder }

// File is one file of a stored snapshot: its chunks, in order.
type File struct {
	Path   string   `json:"path"`
	Size   int64    `json:"size"`
	Mode   uint32   `json:"mode"`
	Chunks []string `json:"chunks"`
}

// Size is the snapshot's logical size: the bytes of all its files.
func (s *Snapshot) Size() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}

var chunkID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// maxFileSize bounds a stored file (16 TiB): larger claims are corrupt.
const maxFileSize = 16 << 40

// Snapshot reads and checks a stored snapshot's manifest.
func (r *Repository) Snapshot(ctx context.Context, name string) (*Snapshot, error) {
	if err := CheckSnapshotName(name); err != nil {
		return nil, err
	}
	var s Snapshot
	if err := getJSON(ctx, r.be, snapshotsPrefix+name, &s); err != nil {
		if errors.Is(err, ErrNotExist) {
			return nil, fmt.Errorf("store %s: no snapshot %q: %w", r.be.Location(), name, err)
		}
		return nil, fmt.Errorf("store %s: snapshot %s: %w", r.be.Location(), name, err)
	}
	if err := s.check(); err != nil {
		return nil, corrupt("store %s: snapshot %s: %v", r.be.Location(), name, err)
	}
	// Another writer sharing the store (another node) may have stored it
	// after this repository read the index: then the index is read again.
	if r.lacksChunks(&s) {
		if err := r.loadIndex(ctx); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// lacksChunks tells whether the index misses a chunk s names.
func (r *Repository) lacksChunks(s *Snapshot) bool {
	for _, f := range s.Files {
		for _, id := range f.Chunks {
			if _, ok := r.lookup(id); !ok {
				return true
			}
		}
	}
	return false
}

func (s *Snapshot) check() error {
	if s.Version != manifestVersion {
		return fmt.Errorf("manifest format %d, this build reads format %d", s.Version, manifestVersion)
	}
	meta, err := snapshot.Parse(s.Meta)
	if err != nil {
		return fmt.Errorf("folder manifest: %w", err)
	}
	s.folder = meta
	if len(meta.Files) != len(s.Files) {
		return fmt.Errorf("folder manifest lists %d files, the snapshot %d", len(meta.Files), len(s.Files))
	}
	seen := map[string]bool{}
	for _, f := range s.Files {
		if err := snapshot.CheckPath(f.Path); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("file %q listed twice", f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 || f.Size > maxFileSize {
			return fmt.Errorf("file %s: absurd size %d", f.Path, f.Size)
		}
		if f.Size > 0 && len(f.Chunks) == 0 || int64(len(f.Chunks)) > f.Size {
			return fmt.Errorf("file %s: %d chunks for %d bytes", f.Path, len(f.Chunks), f.Size)
		}
		if i := slices.IndexFunc(f.Chunks, func(id string) bool { return !chunkID.MatchString(id) }); i >= 0 {
			return fmt.Errorf("file %s: chunk %d has a malformed id %q", f.Path, i, f.Chunks[i])
		}
	}
	for _, mf := range meta.Files {
		i := slices.IndexFunc(s.Files, func(f File) bool { return f.Path == mf.Path })
		if i < 0 || s.Files[i].Size != mf.Size {
			return fmt.Errorf("file %s: the folder manifest and the snapshot disagree", mf.Path)
		}
	}
	return nil
}

// Info is a stored snapshot in a listing; Damaged says why one whose
// manifest cannot be read is left out of every use.
type Info struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	Files     int       `json:"files"`
	Size      int64     `json:"size"`
	Damaged   string    `json:"damaged,omitempty"`
}

// List reads every stored snapshot's manifest, oldest first; those that
// cannot be read come last, each with its reason, and do not hide the rest.
func (r *Repository) List(ctx context.Context) ([]Info, error) {
	snaps, bad, err := r.snapshots(ctx)
	infos := make([]Info, 0, len(snaps)+len(bad))
	for _, s := range snaps {
		infos = append(infos, Info{Name: s.Name, CreatedAt: s.CreatedAt, Files: len(s.Files), Size: s.Size()})
	}
	for _, d := range bad {
		infos = append(infos, Info{Name: strings.TrimPrefix(d.Object, snapshotsPrefix), Damaged: d.Reason})
	}
	return infos, err
}

// Names lists the stored snapshots' names, reading no manifest: one
// listing of the backend, for a caller that picks a few to read.
func (r *Repository) Names(ctx context.Context) ([]string, error) {
	var names []string
	err := r.be.List(ctx, snapshotsPrefix, func(key string, _ int64) error {
		names = append(names, key[len(snapshotsPrefix):])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: list snapshots: %w", r.be.Location(), err)
	}
	return names, nil
}

// snapshots reads every stored snapshot's manifest once, oldest first, and
// sets aside those that cannot be read (damaged).
func (r *Repository) snapshots(ctx context.Context) ([]*Snapshot, []Damage, error) {
	var snaps []*Snapshot
	var bad []Damage
	err := r.be.List(ctx, snapshotsPrefix, func(key string, _ int64) error {
		s, err := r.Snapshot(ctx, key[len(snapshotsPrefix):])
		if err != nil {
			if ctx.Err() != nil || !isDamage(err) {
				return err
			}
			bad = append(bad, Damage{Object: key, Reason: err.Error()})
			return nil
		}
		snaps = append(snaps, s)
		return nil
	})
	slices.SortFunc(snaps, func(a, b *Snapshot) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return snaps, bad, err
}

// damage is every damaged object of the repository, as one error naming
// each (nil when there is none).
func (r *Repository) damage(manifests []Damage) error {
	all := append(r.DamagedIndexes(), manifests...)
	if len(all) == 0 {
		return nil
	}
	lines := make([]string, len(all))
	for i, d := range all {
		lines[i] = d.Object + ": " + d.Reason
	}
	return corrupt("store %s: %d damaged object(s): %s", r.be.Location(), len(all), strings.Join(lines, "; "))
}

// CheckChunks refuses, before anything is read, a snapshot that a restore
// could not complete: a chunk no pack's index holds, or a file whose
// chunks do not add up to its size. A restore (package archiver) and Verify
// both run it, so that a snapshot Verify passes is one a restore takes.
func (r *Repository) CheckChunks(s *Snapshot) error {
	for _, f := range s.Files {
		var total int64
		for i, id := range f.Chunks {
			loc, ok := r.lookup(id)
			if !ok {
				return corrupt("store %s: snapshot %s: file %s: chunk %d (%s) is in no pack's index: the repository is damaged", r.be.Location(), s.Name, f.Path, i, id)
			}
			total += loc.Raw
		}
		if total != f.Size {
			return corrupt("store %s: snapshot %s: file %s: its chunks hold %d bytes, the manifest says %d", r.be.Location(), s.Name, f.Path, total, f.Size)
		}
	}
	return nil
}

// corrupt is an error of the corrupt category: stored data that does not
// match its hash or its format.
func corrupt(format string, args ...any) error {
	return errdefs.Mark(fmt.Errorf(format+" (corrupt)", args...), errdefs.ErrCorrupt)
}

// Delete removes a snapshot's manifest, a damaged one too; the chunks only
// it used are freed by GC.
func (r *Repository) Delete(ctx context.Context, name string) error {
	if err := CheckSnapshotName(name); err != nil {
		return err
	}
	if _, err := r.be.Size(ctx, snapshotsPrefix+name); err != nil {
		if errors.Is(err, ErrNotExist) {
			return fmt.Errorf("store %s: no snapshot %q: %w", r.be.Location(), name, err)
		}
		return err
	}
	unlock, err := r.Lock(ctx, false)
	if err != nil {
		return err
	}
	defer unlock()
	return r.be.Delete(ctx, snapshotsPrefix+name)
}

// CheckNewName refuses a snapshot name that is invalid or taken, so that a
// save can fail before it moves any bytes.
func (r *Repository) CheckNewName(ctx context.Context, name string) error {
	if err := CheckSnapshotName(name); err != nil {
		return err
	}
	if _, err := r.be.Size(ctx, snapshotsPrefix+name); err == nil {
		return fmt.Errorf("store %s: snapshot %q exists already; delete it first or pick another name: %w", r.be.Location(), name, errdefs.ErrAlreadyExists)
	} else if !errors.Is(err, ErrNotExist) {
		return err
	}
	return nil
}

// AddSnapshot writes s's manifest, the commit point of a save: it is
// refused unless every chunk it names is stored and adds up to its file,
// so a snapshot in the repository is always one a restore can complete.
// The caller holds the repository's lock (Lock, shared) from before it
// stored the first chunk, so that GC cannot free them meanwhile.
func (r *Repository) AddSnapshot(ctx context.Context, s *Snapshot) error {
	if err := CheckSnapshotName(s.Name); err != nil {
		return err
	}
	s.Version = manifestVersion
	if err := r.CheckChunks(s); err != nil {
		return err
	}
	return putJSON(ctx, r.be, snapshotsPrefix+s.Name, s)
}
