package archiver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// followPoll is how often a Follower looks how far the image files have
// been written: a segment (256 MiB) takes the runtime about 0.1 s to write.
const followPoll = 20 * time.Millisecond

// errStopped ends a Follower that Stop ended.
var errStopped = errors.New("the image's follower was stopped")

// A Follower pushes a snapshot's image while the runtime writes it, so that
// the push overlaps the checkpoint rather than follows it (engine's
// ImageFollower): each 256 MiB segment of each image file is cut, hashed
// and packed into the store as soon as the file has been written past it,
// the file's SHA-256 blocks (the manifest's) hashed in the same pass. Once
// the checkpoint is over, Written reads what is left and returns the
// blocks for the commit; the push of the committed folder (Save with
// Options.Followed) then takes the segments as they were cut, and only the
// snapshot's record is left to write. It holds a shared lock on the
// repository from Follow to Close, so that no GC takes its chunks before
// a snapshot refers to them.
//
// It relies on the runtime writing each file front to back, each byte once
// (runtime.Capabilities.AppendImage): what lies below a file's size, and
// below its first hole, is final. A file that ends elsewhere than the
// follower saw it end is cut again by the push (a segment is taken only
// at the committed length) and hashed again by the commit (the blocks
// must cover the committed size); bytes rewritten in place would not be
// seen, which is why the runtime must say it never does that.
type Follower struct {
	repo    *store.Repository
	uploads int

	// Set by Follow.
	dir, image string
	started    bool
	cancel     context.CancelCauseFunc
	unlock     func()      // set once the follower holds the lock
	locked     atomic.Bool // the same, for Written
	todo       chan followedSegment
	written    chan struct{} // closed by Written: the image is whole
	writtenSet sync.Once
	done       chan struct{} // closed once the goroutines and the packer are over
	err        error         // their first failure, once done

	mu    sync.Mutex
	files map[string]*followedFile // by slash path in the snapshot folder
	taken map[string]bool          // chunks this follower stores
	whole bool                     // Written succeeded: its segments may be taken

	// cutHook, when set (tests), is told of each segment once it is cut.
	cutHook func(path string, index int)
}

// followedFile is what a Follower cut of one file.
type followedFile struct {
	next     int   // the next segment to cut
	size     int64 // the file's size once the image is whole
	segments map[int]followedSegment
	blocks   map[int64]string // SHA-256 by block index
}

// followedSegment is a segment of an image file, and once cut its chunks.
type followedSegment struct {
	path           string
	index          int
	offset, length int64
	ids            []string
}

// NewFollower returns a Follower into repo, its packs written uploads at a
// time (store.DefaultUploads when zero); it starts at Follow.
func NewFollower(repo *store.Repository, uploads int) *Follower {
	return &Follower{repo: repo, uploads: uploads, files: map[string]*followedFile{}, taken: map[string]bool{}}
}

// Follow starts reading the files the runtime writes into image, a slash
// path inside the snapshot folder dir. It returns at once: the lock on the
// repository is taken as the follower starts, so that a store out of
// reach holds up nothing (Written then says why).
func (f *Follower) Follow(ctx context.Context, dir, image string) error {
	if f.started {
		return errors.New("the follower follows an image already")
	}
	fctx, cancel := context.WithCancelCause(ctx)
	f.dir, f.image, f.started, f.cancel = dir, image, true, cancel
	f.todo, f.written, f.done = make(chan followedSegment, runtime.GOMAXPROCS(0)), make(chan struct{}), make(chan struct{})
	go func() {
		f.err = f.follow(fctx)
		close(f.done)
	}()
	return nil
}

// follow locks the repository and runs the watch and the cutters until
// the image is whole and every chunk stored, or the first failure.
func (f *Follower) follow(ctx context.Context) error {
	unlock, err := f.repo.Lock(ctx, false)
	if err != nil {
		return err
	}
	f.unlock = unlock
	f.locked.Store(true)
	packer, err := f.repo.NewPacker(ctx, f.uploads, nil)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.watch(gctx) })
	for range runtime.GOMAXPROCS(0) {
		g.Go(func() error {
			c := segmentCutter{repo: f.repo, dir: f.dir, packs: packer.Lane(), rep: newReporter(Options{}, Progress{}), scan: make([]byte, f.repo.ChunkerBufferSize())}
			for seg := range f.todo {
				if err := f.cut(gctx, &c, seg); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err = g.Wait()
	if cerr := packer.Close(); err == nil {
		err = cerr
	}
	return err
}

// watch hands the cutters each segment of each image file once the file
// has been written past it, every followPoll, and the rest once Written
// says the image is whole.
func (f *Follower) watch(ctx context.Context) error {
	defer close(f.todo)
	folder := filepath.Join(f.dir, filepath.FromSlash(f.image))
	open := map[string]*os.File{}
	defer func() {
		for _, fh := range open {
			fh.Close()
		}
	}()
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-f.written:
		case <-tick.C:
		}
		whole := closed(f.written)
		entries, err := os.ReadDir(folder)
		if errors.Is(err, fs.ErrNotExist) && !whole {
			continue // not made yet
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			p := path.Join(f.image, e.Name())
			fh := open[p]
			if fh == nil {
				if fh, err = os.Open(filepath.Join(folder, e.Name())); err != nil {
					return err
				}
				open[p] = fh
			}
			if err := f.dispatch(ctx, p, fh, whole); err != nil {
				return err
			}
		}
		if whole {
			return nil
		}
	}
}

// dispatch hands the cutters the segments of file p (open as fh) written
// since the last time: those below its size and its first hole, or, once
// the image is whole, all the rest.
func (f *Follower) dispatch(ctx context.Context, p string, fh *os.File, whole bool) error {
	f.mu.Lock()
	ff := f.files[p]
	if ff == nil {
		ff = &followedFile{segments: map[int]followedSegment{}, blocks: map[int64]string{}}
		f.files[p] = ff
	}
	f.mu.Unlock()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	var segs []followedSegment
	if whole {
		ff.size = size
		for n := int(max(1, (size+segmentSize-1)/segmentSize)); ff.next < n; ff.next++ {
			off := int64(ff.next) * segmentSize
			segs = append(segs, followedSegment{path: p, index: ff.next, offset: off, length: min(segmentSize, size-off)})
		}
	} else {
		ready := writtenBelow(fh, int64(ff.next)*segmentSize, size)
		for ; int64(ff.next+1)*segmentSize <= ready; ff.next++ {
			segs = append(segs, followedSegment{path: p, index: ff.next, offset: int64(ff.next) * segmentSize, length: segmentSize})
		}
	}
	for _, seg := range segs {
		select {
		case f.todo <- seg:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// writtenBelow is how far fh, of size bytes, is written without a hole
// from offset from on: a writer that extends the file through one region
// ahead of another leaves a hole until the first lands.
func writtenBelow(fh *os.File, from, size int64) int64 {
	if size <= from {
		return size
	}
	hole, err := unix.Seek(int(fh.Fd()), from, unix.SEEK_HOLE)
	if err != nil {
		return from
	}
	return min(size, hole)
}

// cut chunks one segment with c, hashing its blocks as it reads, and
// records its chunks and blocks.
func (f *Follower) cut(ctx context.Context, c *segmentCutter, seg followedSegment) error {
	blocks := &blockHasher{h: sha256.New(), block: seg.offset / snapshot.BlockSize, sums: map[int64]string{}}
	err := c.chunk(ctx, seg.path, seg.offset, seg.length, blocks.tee, func(id string) bool {
		seg.ids = append(seg.ids, id)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.taken[id] || f.repo.HasChunk(id) {
			return false
		}
		f.taken[id] = true
		return true
	})
	if err != nil {
		return err
	}
	blocks.end()
	f.mu.Lock()
	defer f.mu.Unlock()
	ff := f.files[seg.path]
	ff.segments[seg.index] = seg
	for b, sum := range blocks.sums {
		ff.blocks[b] = sum
	}
	if f.cutHook != nil {
		f.cutHook(seg.path, seg.index)
	}
	return nil
}

// Written says the image is whole: the follower reads what is left of it
// and returns, once every chunk is stored, the SHA-256 blocks of each
// file it read (snapshot.File.Blocks, by slash path in the snapshot
// folder). When ctx ends first, it is stopped.
func (f *Follower) Written(ctx context.Context) (map[string][]string, error) {
	if !f.started {
		return nil, errors.New("the follower was never started")
	}
	f.writtenSet.Do(func() { close(f.written) })
	if !f.locked.Load() {
		// The store has not answered while the whole image was written:
		// nothing was read, and waiting for it would only hold the suspend.
		f.Stop()
		return nil, fmt.Errorf("store %s did not answer while the image was written", f.repo.Backend().Location())
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		f.Stop()
		return nil, fmt.Errorf("the store took the image slower than the checkpoint wrote it: %w", context.Cause(ctx))
	}
	if f.err != nil {
		return nil, fmt.Errorf("store %s: %w", f.repo.Backend().Location(), f.err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	known := map[string][]string{}
	for p, ff := range f.files {
		n := (ff.size + snapshot.BlockSize - 1) / snapshot.BlockSize
		blocks := make([]string, 0, n)
		for b := range n {
			sum, ok := ff.blocks[b]
			if !ok {
				return nil, fmt.Errorf("%s: block %d was not read", p, b)
			}
			blocks = append(blocks, sum)
		}
		known[p] = blocks
	}
	f.whole = true
	return known, nil
}

// Stop ends the follower's work, if any, without a result.
func (f *Follower) Stop() {
	if f == nil || !f.started {
		return
	}
	f.cancel(errStopped)
	<-f.done
}

// Close stops the follower and releases its lock on the repository: after
// the push that took its segments, or when there is none.
func (f *Follower) Close() {
	if f == nil || !f.started {
		return
	}
	f.Stop()
	if f.unlock != nil {
		f.unlock()
		f.unlock = nil
	}
	f.started = false
}

// segment returns the chunks of file p's segment index, when the follower
// cut it at offset with length bytes (the committed file's) and the image
// was whole; false otherwise, and for a nil Follower.
func (f *Follower) segment(p string, index int, offset, length int64) ([]string, bool) {
	if f == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.whole || f.files[p] == nil {
		return nil, false
	}
	ff := f.files[p]
	seg, ok := ff.segments[index]
	if !ok || seg.offset != offset || seg.length != length || ff.size < offset+length {
		return nil, false
	}
	return seg.ids, true
}

// blockHasher hashes the snapshot blocks (snapshot.BlockSize) of a segment
// as its chunker reads it; a segment starts on a block's boundary.
type blockHasher struct {
	h     hash.Hash
	block int64 // the block being hashed
	in    int64 // its bytes hashed so far
	sums  map[int64]string
}

// tee returns r, whose every byte read is hashed too.
func (b *blockHasher) tee(r io.Reader) io.Reader { return blockReader{r, b} }

type blockReader struct {
	r io.Reader
	b *blockHasher
}

func (br blockReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		k := min(int64(len(rest)), snapshot.BlockSize-br.b.in)
		br.b.h.Write(rest[:k])
		br.b.in += k
		rest = rest[k:]
		if br.b.in == snapshot.BlockSize {
			br.b.sum()
		}
	}
	return n, err
}

// sum ends the block being hashed.
func (b *blockHasher) sum() {
	b.sums[b.block] = hex.EncodeToString(b.h.Sum(nil))
	b.h.Reset()
	b.block++
	b.in = 0
}

// end ends a last block shorter than the rest (the file's end).
func (b *blockHasher) end() {
	if b.in > 0 {
		b.sum()
	}
}

// closed says whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
