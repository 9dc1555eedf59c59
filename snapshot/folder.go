package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/fsutil"
)

// ErrNoManifest means a folder is not a complete snapshot.
var ErrNoManifest = errdefs.New(errdefs.ErrNotFound, "no manifest: the snapshot is incomplete or was never written")

// maxFileSize bounds what a manifest may claim for one file (16 TiB); larger
// sizes are corruption, not snapshots.
const maxFileSize = 16 << 40

// Commit syncs every file under dir, hashes it, and writes m, with the file
// list filled in, as dir's manifest: last, and atomically. Only regular files
// and folders may be in dir. A cancelled ctx stops it between blocks, with
// no manifest written.
func Commit(ctx context.Context, dir string, m Manifest) (*Manifest, error) {
	return CommitHashed(ctx, dir, m, nil)
}

// CommitHashed is Commit where the caller read some files already as they
// were written and hashed their blocks in that pass (known: File.Blocks by
// path): those are synced, not read again. A file whose known blocks do not
// match its size now is hashed as any other.
func CommitHashed(ctx context.Context, dir string, m Manifest, known map[string][]string) (*Manifest, error) {
	paths, err := ListFiles(dir)
	if err != nil {
		return nil, err
	}
	files, err := hashFiles(ctx, dir, paths, true, known)
	if err != nil {
		return nil, err
	}
	subdirs := map[string]bool{}
	for _, p := range paths {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			subdirs[d] = true
		}
	}
	for d := range subdirs {
		if err := fsutil.SyncDir(filepath.Join(dir, filepath.FromSlash(d))); err != nil {
			return nil, fmt.Errorf("snapshot %s: sync %s: %w", dir, d, err)
		}
	}
	m.FormatVersion = FormatVersion
	m.Files = files
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now().UTC()
	}
	if err := WriteManifest(dir, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// WriteManifest writes m as dir's manifest through a temporary file and a
// rename, then syncs dir: a reader sees the whole manifest or none. Commit
// and a pull from a store both write manifests this way.
func WriteManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if err := fsutil.WriteAtomic(filepath.Join(dir, ManifestName), bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("snapshot %s: write manifest: %w", dir, err)
	}
	return nil
}

// Load reads and checks dir's manifest without reading the files.
func Load(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("snapshot %s: %w", dir, err), errdefs.ErrCorrupt)
	}
	return m, nil
}

// Parse reads and checks a manifest: its format version, its scope, and
// that every file path stays inside the folder with a sane size.
func Parse(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest is not valid JSON (truncated or corrupt): %w", err)
	}
	if m.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("manifest format version %d, this build reads version %d", m.FormatVersion, FormatVersion)
	}
	if m.Scope != ScopeFull && m.Scope != ScopeData {
		return nil, fmt.Errorf("unknown scope %q", m.Scope)
	}
	if len(m.OpenFiles) > MaxOpenFiles {
		return nil, fmt.Errorf("manifest lists %d open files, at most %d are kept", len(m.OpenFiles), MaxOpenFiles)
	}
	for _, p := range m.OpenFiles {
		if !sandboxPath(p) {
			return nil, fmt.Errorf("manifest open file %q: want an absolute, clean path inside the sandbox", p)
		}
	}
	if err := checkFirstReads(&m); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if err := CheckPath(f.Path); err != nil {
			return nil, fmt.Errorf("manifest file %q: %w", f.Path, err)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("manifest lists %q twice", f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 || f.Size > maxFileSize {
			return nil, fmt.Errorf("manifest file %q: absurd size %d", f.Path, f.Size)
		}
		if want := blockCount(f.Size); int64(len(f.Blocks)) != want {
			return nil, fmt.Errorf("manifest file %q: %d block digests for %d bytes, want %d", f.Path, len(f.Blocks), f.Size, want)
		}
	}
	return &m, nil
}

// Verify loads dir's manifest and reads every file, checking that the folder
// holds exactly the files listed, with their sizes and digests.
func Verify(ctx context.Context, dir string) (*Manifest, error) {
	m, err := Check(ctx, dir)
	if err != nil {
		return nil, err
	}
	return m, VerifyContents(ctx, dir, m)
}

// Check is Verify without reading the files: the manifest loads and the
// folder holds exactly its files, each of the size the manifest says. It
// finds a missing, extra or truncated file, not a corrupt one: it is for
// snapshots whose bytes were checked when they arrived (committed on this
// node, or pulled chunk by chunk from a store), where reading many
// gigabytes again would only delay the restore.
func Check(ctx context.Context, dir string) (*Manifest, error) {
	m, err := Load(dir)
	if err != nil {
		return nil, err
	}
	return m, CheckFiles(ctx, dir, m)
}

// CheckFiles is Check of a manifest already in hand.
func CheckFiles(ctx context.Context, dir string, m *Manifest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	paths, err := ListFiles(dir)
	if err != nil {
		return err
	}
	listed := map[string]File{}
	for _, f := range m.Files {
		listed[f.Path] = f
	}
	for _, p := range paths {
		if _, ok := listed[p]; !ok {
			return corrupt("snapshot %s: file %s is not in the manifest", dir, p)
		}
	}
	for _, f := range m.Files {
		if !slices.Contains(paths, f.Path) {
			return corrupt("snapshot %s: file %s is missing", dir, f.Path)
		}
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", dir, err)
		}
		if st.Size() != f.Size {
			return sizeMismatch(dir, f.Path, st.Size(), f.Size)
		}
	}
	return nil
}

// VerifyContents reads every file m lists under dir, on every core, and
// checks each block against its SHA-256. It is the part of Verify that
// reads the bytes, for a caller that checked the files (CheckFiles) and
// hashes while it does something else with them.
func VerifyContents(ctx context.Context, dir string, m *Manifest) error {
	paths := make([]string, len(m.Files))
	for i, f := range m.Files {
		paths[i] = f.Path
	}
	got, err := hashFiles(ctx, dir, paths, false, nil)
	if err != nil {
		return err
	}
	for i, g := range got {
		want := m.Files[i]
		if g.Size != want.Size {
			return sizeMismatch(dir, g.Path, g.Size, want.Size)
		}
		for b := range want.Blocks {
			if g.Blocks[b] != want.Blocks[b] {
				return corrupt("snapshot %s: file %s: bytes %d to %d do not match their SHA-256", dir, g.Path, int64(b)*BlockSize, min(int64(b+1)*BlockSize, g.Size))
			}
		}
	}
	return nil
}

func sizeMismatch(dir, path string, got, want int64) error {
	return corrupt("snapshot %s: file %s is %d bytes, the manifest says %d (truncated or overwritten)", dir, path, got, want)
}

// corrupt is an error of the corrupt category (errdefs.ErrCorrupt): the
// folder is not the snapshot its manifest describes.
func corrupt(format string, args ...any) error {
	return errdefs.Mark(fmt.Errorf(format+" (corrupt)", args...), errdefs.ErrCorrupt)
}

// CheckPath refuses a file path that could reach outside a snapshot folder
// (empty, absolute, unclean, climbing out with "..") or name the manifest.
func CheckPath(p string) error {
	switch {
	case p == "" || p == ".":
		return errors.New("empty path")
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return errors.New("absolute path")
	case strings.Contains(p, "\\"):
		return errors.New("backslash in path")
	case path.Clean(p) != p:
		return errors.New("path is not clean")
	case p == ".." || strings.HasPrefix(p, "../"):
		return errors.New("path escapes the snapshot folder")
	case p == ManifestName:
		return errors.New("the manifest cannot list itself")
	}
	return nil
}

// ListFiles returns the regular files under dir, the manifest aside, as
// clean slash paths; anything else (a symlink, a device) is refused.
func ListFiles(dir string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return errdefs.Mark(fmt.Errorf("%s is %s, not a regular file: snapshots hold only files and folders", rel, fsutil.DescribeType(d.Type())), errdefs.ErrCorrupt)
		case rel == ManifestName || !strings.Contains(rel, "/") && strings.HasPrefix(rel, fsutil.TempPrefix):
			return nil
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	slices.Sort(paths)
	return paths, nil
}

func blockCount(size int64) int64 {
	if size == 0 {
		return 0
	}
	return (size + BlockSize - 1) / BlockSize
}

type blockJob struct {
	file  int
	block int64
}

// hashFiles digests every block of every file on all cores, but for the
// files whose blocks are known (by path, as many as the file's size has).
// With durable it also fsyncs each file, so the digests describe durable
// bytes. A cancelled ctx stops it at the next block.
func hashFiles(ctx context.Context, dir string, paths []string, durable bool, known map[string][]string) ([]File, error) {
	files := make([]File, len(paths))
	handles := make([]*os.File, len(paths))
	defer func() {
		for _, h := range handles {
			if h != nil {
				h.Close()
			}
		}
	}()
	var jobs []blockJob
	for i, p := range paths {
		h, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", dir, err)
		}
		handles[i] = h
		st, err := h.Stat()
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", dir, err)
		}
		files[i] = File{Path: p, Size: st.Size(), Mode: uint32(st.Mode().Perm()), Blocks: make([]string, blockCount(st.Size()))}
		if blocks, ok := known[p]; ok && int64(len(blocks)) == blockCount(st.Size()) {
			copy(files[i].Blocks, blocks)
			continue
		}
		for b := range blockCount(st.Size()) {
			jobs = append(jobs, blockJob{i, b})
		}
	}
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	if durable {
		// The disk starts writing while the blocks are hashed, rather than
		// only at the fsync after: the two overlap.
		for _, h := range handles {
			wg.Go(func() { _ = fsutil.Writeback(h) })
		}
	}
	next := make(chan blockJob)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for j := range next {
				if err := ctx.Err(); err != nil {
					errs[j.file] = err
					continue
				}
				h := sha256.New()
				section := io.NewSectionReader(handles[j.file], j.block*BlockSize, BlockSize)
				if _, err := io.CopyBuffer(h, section, buf); err != nil {
					errs[j.file] = err
					continue
				}
				files[j.file].Blocks[j.block] = hex.EncodeToString(h.Sum(nil))
			}
		})
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- j
	}
	close(next)
	wg.Wait()
	if durable {
		for i, h := range handles {
			if err := h.Sync(); err != nil {
				errs[i] = err
			}
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: file %s: %w", dir, paths[i], err)
		}
	}
	return files, nil
}

// checkFirstReads: m's first reads are few enough, each of a path inside
// the sandbox, in order and apart.
func checkFirstReads(m *Manifest) error {
	if len(m.FirstReads) > MaxFirstReads {
		return fmt.Errorf("manifest lists %d first reads, at most %d are kept", len(m.FirstReads), MaxFirstReads)
	}
	var total int64
	for i, r := range m.FirstReads {
		if !sandboxPath(r.Path) {
			return fmt.Errorf("manifest first read of %q: want an absolute, clean path inside the sandbox", r.Path)
		}
		if r.Offset < 0 || r.Length <= 0 || r.Length > MaxFirstReadBytes || r.Offset > maxFileSize {
			return fmt.Errorf("manifest first read of %q: absurd stretch of %d bytes at %d", r.Path, r.Length, r.Offset)
		}
		if i > 0 {
			prev := m.FirstReads[i-1]
			if prev.Path > r.Path || prev.Path == r.Path && prev.Offset+prev.Length > r.Offset {
				return fmt.Errorf("manifest first reads out of order or overlapping at %q %d", r.Path, r.Offset)
			}
		}
		if total += r.Length; total > MaxFirstReadBytes {
			return fmt.Errorf("manifest first reads add up to more than %d bytes", int64(MaxFirstReadBytes))
		}
	}
	return nil
}

// sandboxPath says whether p can name a file inside a sandbox: absolute,
// clean, of a sane length.
func sandboxPath(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && len(p) <= 4096 && !strings.ContainsRune(p, 0)
}
