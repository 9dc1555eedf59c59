package archiver

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/internal/fsutil"
)

// stageSegment is the bytes of a staged file each anonymous memory file
// holds: writers of one file take turns (outFile), and a restore's
// workers write near one another (the stretches in flight, 16 MiB each),
// so that segments this size let most of them write at once.
const stageSegment = 64 << 20

// stagedFile is a file of the snapshot filled in memory (Options.Stage),
// in segments, each an anonymous memory file (memfd) of its own, and
// written into the folder once every chunk is fetched. A chunk checked in
// a seed is not copied into memory: it is read from the seed, and written
// into the folder from there. Its memory is freed when the restore and
// every reader that opened it let go.
type stagedFile struct {
	path string      // in the folder
	mode os.FileMode // its permission bits
	size int64
	seg  int64 // the bytes of a segment
	segs []*outFile
	// layout is where the file's chunks lie, and chunks their states
	// (which of them a seed holds); without them, every byte is in the
	// segments.
	layout *fileChunks
	chunks map[string]*chunkState

	mu      sync.Mutex
	refs    int  // the restore's, and one per reader open
	written bool // the folder holds the file
	freed   func()
}

// newStagedFile makes a file of size bytes in memory; freed is called
// once its memory is (Options.Stage's release), or at once on failure.
func newStagedFile(path string, mode os.FileMode, size, seg int64, freed func()) (*stagedFile, error) {
	sf := &stagedFile{path: path, mode: mode, size: size, seg: seg, refs: 1, freed: freed}
	for at := int64(0); at < size; at += seg {
		fd, err := unix.MemfdCreate("stasis-pull", unix.MFD_CLOEXEC)
		if err != nil {
			sf.release()
			return nil, fmt.Errorf("%s in memory: %w", path, err)
		}
		mem := os.NewFile(uintptr(fd), "memfd:stasis-pull")
		sf.segs = append(sf.segs, &outFile{f: mem})
		if err := mem.Truncate(min(seg, size-at)); err != nil {
			sf.release()
			return nil, fmt.Errorf("%s in memory: %w", path, err)
		}
	}
	return sf, nil
}

// writeAt writes b at offset at, into the segments it spans.
func (sf *stagedFile) writeAt(b []byte, at int64) (time.Duration, error) {
	var waited time.Duration
	for len(b) > 0 {
		i, off := at/sf.seg, at%sf.seg
		n := min(int64(len(b)), sf.seg-off)
		w, err := sf.segs[i].writeAt(b[:n], off)
		waited += w
		if err != nil {
			return waited, err
		}
		b, at = b[n:], at+n
	}
	return waited, nil
}

// writeSeeded writes nothing: a chunk checked in a seed is read from the
// seed (its chunkState), and the folder's copy made from there (write).
func (sf *stagedFile) writeSeeded([]byte, int64) (time.Duration, error) { return 0, nil }

// seedExtent says whether the bytes from at on, up to end, lie in a
// seed: the file and the offset there, and how many of them lie there in
// one piece; or, with a nil file, how many lie in the segments before the
// next byte that a seed holds. It looks at the states of the chunks
// before end only: those a reader awaited, or every one once all are
// there.
func (sf *stagedFile) seedExtent(at, end int64) (file *os.File, fileAt, n int64) {
	if sf.layout == nil {
		return nil, 0, end - at
	}
	fc := sf.layout
	i := fc.chunkAt(at)
	st := sf.chunks[fc.ids[i]]
	if st.seed != nil {
		file, fileAt = st.seed, st.seedAt+(at-fc.starts[i])
		stop := fc.starts[i+1]
		for i++; i < len(fc.ids) && stop < end; i++ {
			next := sf.chunks[fc.ids[i]]
			if next.seed != file || next.seedAt != fileAt+(stop-at) {
				break
			}
			stop = fc.starts[i+1]
		}
		return file, fileAt, min(stop, end) - at
	}
	for i++; i < len(fc.ids) && fc.starts[i] < end && sf.chunks[fc.ids[i]].seed == nil; i++ {
	}
	return nil, 0, min(fc.starts[i], end) - at
}

// readAt reads from the segments, and the seeds of the chunks they hold;
// io.EOF past the end. A reader reads bytes only once they are there
// (Filling.Await).
func (sf *stagedFile) readAt(b []byte, at int64) (int, error) {
	if at >= sf.size {
		return 0, io.EOF
	}
	done := 0
	for done < len(b) && at < sf.size {
		file, fileAt, n := sf.seedExtent(at, min(sf.size, at+int64(len(b)-done)))
		var got int
		var err error
		if file != nil {
			got, err = file.ReadAt(b[done:done+int(n)], fileAt)
		} else {
			got, err = sf.readSegments(b[done:done+int(n)], at)
		}
		done += got
		at += int64(got)
		if err != nil {
			return done, err
		}
	}
	if done < len(b) {
		return done, io.EOF
	}
	return done, nil
}

// readSegments reads len(b) bytes from at out of the segments; the caller
// keeps within the file.
func (sf *stagedFile) readSegments(b []byte, at int64) (int, error) {
	done := 0
	for done < len(b) {
		i, off := at/sf.seg, at%sf.seg
		n := int(min(int64(len(b)-done), sf.seg-off))
		got, err := sf.segs[i].f.ReadAt(b[done:done+n], off)
		done += got
		at += int64(got)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// open is a reader of the file in memory, or nil once the folder holds it.
func (sf *stagedFile) open() *stagedReader {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.written || sf.refs == 0 {
		return nil
	}
	sf.refs++
	return &stagedReader{sf: sf}
}

// release lets go of one hold on the memory, freed with the last.
func (sf *stagedFile) release() {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.refs--; sf.refs > 0 {
		return
	}
	for _, seg := range sf.segs {
		seg.f.Close()
	}
	sf.freed()
}

// write writes the file into the folder from memory, and what seeds hold
// from them (by the kernel, a piece after another, ctx checked between
// them): readers opened after it read the folder's copy.
func (sf *stagedFile) write(ctx context.Context, sync bool) error {
	out, err := os.OpenFile(sf.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, sf.mode)
	if err != nil {
		return err
	}
	defer out.Close()
	for at := int64(0); at < sf.size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		file, fileAt, n := sf.seedExtent(at, sf.size)
		if file != nil {
			if err := fsutil.CopyRange(out, at, file, fileAt, n); err != nil {
				return err
			}
		} else if err := sf.writeSegments(ctx, out, at, n); err != nil {
			return err
		}
		at += n
	}
	if sync {
		if err := out.Sync(); err != nil {
			return err
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	sf.mu.Lock()
	sf.written = true
	sf.mu.Unlock()
	return nil
}

// writeSegments writes bytes [at, at+n) of the segments into out at the
// same place, by sendfile.
func (sf *stagedFile) writeSegments(ctx context.Context, out *os.File, at, n int64) error {
	// sendfile writes at out's position.
	if _, err := out.Seek(at, io.SeekStart); err != nil {
		return err
	}
	for end := at + n; at < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		i, off := at/sf.seg, at%sf.seg
		in := int(sf.segs[i].f.Fd())
		want := int(min(sf.seg-off, end-at))
		got, err := unix.Sendfile(int(out.Fd()), in, &off, want)
		if err != nil {
			return err
		}
		if got == 0 {
			return fmt.Errorf("%d of %d bytes in memory", at, sf.size)
		}
		at += int64(got)
	}
	return nil
}

// stagedReader reads a staged file from memory until closed.
type stagedReader struct {
	sf   *stagedFile
	once sync.Once
}

func (r *stagedReader) ReadAt(b []byte, at int64) (int, error) { return r.sf.readAt(b, at) }

func (r *stagedReader) Close() error {
	r.once.Do(r.sf.release)
	return nil
}
