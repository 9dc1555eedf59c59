package archiver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// Restore writes stored snapshot name into dir, which must be empty or
// absent: every chunk is fetched, decompressed and checked against its hash,
// and the folder's manifest is written last, so dir becomes a snapshot
// folder only when it is whole. On failure dir is emptied again.
func Restore(ctx context.Context, repo *store.Repository, name, dir string, opts Options) error {
	s, err := repo.Snapshot(ctx, name)
	if err != nil {
		return err
	}
	_, err = RestoreSnapshot(ctx, repo, s, dir, opts)
	return err
}

// Seed is a folder on this node that holds a stored snapshot whole (a
// snapshot pulled before, or pushed from here): a restore copies the chunks
// it shares from it, checked against their hashes, rather than fetching
// them. A seed whose file is gone or changed costs a fetch, nothing more.
type Seed struct {
	Dir      string
	Snapshot *store.Snapshot
}

// Pulled is what a restore moved.
type Pulled struct {
	// Bytes is the snapshot's size; Fetched the raw bytes of the chunks
	// fetched from the store (Stored of them, compressed); Seeded the raw
	// bytes copied from seeds. A chunk found in several places of the
	// snapshot is fetched or copied once.
	Bytes, Fetched, Stored, Seeded int64
}

// pullRun bounds the bytes of a pack read with one request: a pack's worth.
const pullRun = 16 << 20

// destination is where a chunk's bytes go: a file and an offset.
type destination struct {
	f  *os.File
	at int64
}

// RestoreSnapshot is Restore of a stored manifest the caller read already
// (with Snapshot, to check it before fetching anything), copying what it
// can from opts.Seeds. The packs are read in large stretches
// (Repository.PlanReads), opts.Downloads of them at once (the cores, and at
// least 8, by default), each chunk decompressed, hash-checked and written
// where the snapshot has it by the goroutine that read it; memory is
// bounded by the stretches in flight (16 MiB each, with 8 MiB for a chunk).
func RestoreSnapshot(ctx context.Context, repo *store.Repository, s *store.Snapshot, dir string, opts Options) (pulled Pulled, err error) {
	name := s.Name
	// Every chunk must be known, and add up to its file, before anything
	// is written.
	if err := repo.CheckChunks(s); err != nil {
		return pulled, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return pulled, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return pulled, fmt.Errorf("restore into %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return pulled, fmt.Errorf("restore into %s: the folder holds %d entries; restore into an empty folder", dir, len(entries))
	}
	defer func() {
		if err != nil {
			_ = fsutil.RemoveContents(dir)
			err = fmt.Errorf("store %s: snapshot %s: %w", repo.Backend().Location(), name, err)
		}
	}()
	files, dests, order, err := createFiles(repo, s, dir)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		return pulled, err
	}
	pulled.Bytes = s.Size()
	rep := newReporter(opts, Progress{Snapshot: name, Files: len(s.Files), Bytes: pulled.Bytes})
	workers := opts.Downloads
	if workers <= 0 {
		workers = max(8, runtime.GOMAXPROCS(0))
	}
	var mu sync.Mutex // guards pulled's counts
	write := func(id string, data []byte) error {
		for _, d := range dests[id] {
			if _, err := d.f.WriteAt(data, d.at); err != nil {
				return err
			}
		}
		rep.add(int64(len(data))*int64(len(dests[id])), 0, 0)
		return nil
	}
	chunks, err := repo.NewChunkReader(workers)
	if err != nil {
		return pulled, err
	}
	defer chunks.Close()
	// fetchAll reads ids from the store, in stretches of packs.
	fetchAll := func(g *errgroup.Group, gctx context.Context, ids []string) error {
		runs, err := repo.PlanReads(ids, pullRun)
		if err != nil {
			return err
		}
		for _, run := range runs {
			g.Go(func() error {
				err := chunks.ReadRun(gctx, run, func(c store.RunChunk, data []byte) error {
					mu.Lock()
					pulled.Fetched += c.Raw
					pulled.Stored += c.Stored
					mu.Unlock()
					rep.add(0, c.Stored, 0)
					return write(c.ID, data)
				})
				if err != nil {
					return fmt.Errorf("pack %s: %w", run.Pack, err)
				}
				return nil
			})
		}
		return nil
	}
	// The chunks this node holds are copied while the others are fetched;
	// a copy that is no longer what it was is fetched after.
	seeded, fetch := seedChunks(repo, opts.Seeds, order)
	var missed []string
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var submitted sync.WaitGroup
	if len(seeded) > 0 {
		from := &seedFiles{files: map[string]*os.File{}}
		defer from.close()
		buffers := make(chan []byte, workers)
		// Submitted beside the fetches, so that both share the workers.
		submitted.Go(func() {
			for _, c := range seeded {
				g.Go(func() error {
					var buf []byte
					select {
					case buf = <-buffers:
					default:
					}
					buf, ok := from.copy(c, buf)
					defer func() { buffers <- buf }()
					mu.Lock()
					if !ok {
						missed = append(missed, c.id)
					} else {
						pulled.Seeded += c.raw
					}
					mu.Unlock()
					if !ok {
						return nil
					}
					return write(c.id, buf)
				})
			}
		})
	}
	ferr := fetchAll(g, gctx, fetch)
	submitted.Wait()
	if err := g.Wait(); err != nil {
		return pulled, err
	}
	if ferr != nil {
		return pulled, ferr
	}
	if len(missed) > 0 {
		g, gctx = errgroup.WithContext(ctx)
		g.SetLimit(workers)
		if err := fetchAll(g, gctx, missed); err != nil {
			return pulled, err
		}
		if err := g.Wait(); err != nil {
			return pulled, err
		}
	}
	rep.add(0, 0, len(s.Files))
	rep.finish()
	if !opts.NoSync {
		for _, f := range files {
			if err := f.Sync(); err != nil {
				return pulled, err
			}
		}
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			return pulled, err
		}
	}
	files = nil
	// The folder becomes a snapshot when its manifest appears, whole.
	if err := fsutil.WriteAtomic(filepath.Join(dir, snapshot.ManifestName), bytes.NewReader(s.Meta), int64(len(s.Meta))); err != nil {
		return pulled, err
	}
	_, err = snapshot.Load(dir)
	return pulled, err
}

// createFiles makes the snapshot's files in dir at their sizes, and says
// where each chunk goes, and the chunks in the order the files hold them,
// each once.
func createFiles(repo *store.Repository, s *store.Snapshot, dir string) ([]*os.File, map[string][]destination, []string, error) {
	var files []*os.File
	dests := map[string][]destination{}
	var order []string
	for _, f := range s.Files {
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return files, nil, nil, err
		}
		out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(f.Mode)&0o777)
		if err != nil {
			return files, nil, nil, err
		}
		files = append(files, out)
		if err := out.Truncate(f.Size); err != nil {
			return files, nil, nil, err
		}
		var at int64
		for _, id := range f.Chunks {
			c, _ := repo.Chunk(id)
			if _, seen := dests[id]; !seen {
				order = append(order, id)
			}
			dests[id] = append(dests[id], destination{f: out, at: at})
			at += c.Raw
		}
	}
	return files, dests, order, nil
}

// seededChunk is a chunk a seed holds: in file path at offset at.
type seededChunk struct {
	id   string
	path string
	at   int64
	raw  int64
}

// seedFiles keeps the seeds' files open while a restore copies from them.
type seedFiles struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func (s *seedFiles) open(path string) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s.files[path] = f
	return f, nil
}

func (s *seedFiles) close() {
	for _, f := range s.files {
		f.Close()
	}
}

// copy reads chunk c from its seed into buf and checks it against its id;
// false when it is not there as it was.
func (s *seedFiles) copy(c seededChunk, buf []byte) ([]byte, bool) {
	if int64(cap(buf)) < c.raw {
		buf = make([]byte, c.raw)
	}
	buf = buf[:c.raw]
	f, err := s.open(c.path)
	if err != nil {
		return buf, false
	}
	if n, _ := f.ReadAt(buf, c.at); int64(n) != c.raw {
		return buf, false
	}
	sum := sha256.Sum256(buf)
	return buf, hex.EncodeToString(sum[:]) == c.id
}

// seedChunks splits the chunks a restore needs into those seeds hold
// (where) and those to fetch.
func seedChunks(repo *store.Repository, seeds []Seed, need []string) (seeded []seededChunk, fetch []string) {
	if len(seeds) == 0 {
		return nil, need
	}
	where := map[string]seededChunk{}
	for _, sd := range seeds {
		if sd.Snapshot == nil {
			continue
		}
		for _, f := range sd.Snapshot.Files {
			path := filepath.Join(sd.Dir, filepath.FromSlash(f.Path))
			if st, err := os.Stat(path); err != nil || st.Size() != f.Size {
				continue
			}
			var at int64
			for _, id := range f.Chunks {
				c, ok := repo.Chunk(id)
				if !ok {
					break
				}
				if _, dup := where[id]; !dup {
					where[id] = seededChunk{id: id, path: path, at: at, raw: c.Raw}
				}
				at += c.Raw
			}
		}
	}
	for _, id := range need {
		if c, ok := where[id]; ok {
			seeded = append(seeded, c)
		} else {
			fetch = append(fetch, id)
		}
	}
	return seeded, fetch
}
