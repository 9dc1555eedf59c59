package archiver

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// stageSegment is the bytes of a staged file each anonymous memory file
// holds: writers of one file take turns (outFile), and a restore's
// workers write near one another (the stretches in flight, 16 MiB each),
// so that segments this size let most of them write at once.
const stageSegment = 64 << 20

// stagedFile is a file of the snapshot filled in memory (Options.Stage),
// in segments, each an anonymous memory file (memfd) of its own, and
// written into the folder once every chunk is fetched. Its memory is
// freed when the restore and every reader that opened it let go.
type stagedFile struct {
	path string      // in the folder
	mode os.FileMode // its permission bits
	size int64
	seg  int64 // the bytes of a segment
	segs []*outFile

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
func (sf *stagedFile) writeAt(b []byte, at int64) error {
	for len(b) > 0 {
		i, off := at/sf.seg, at%sf.seg
		n := min(int64(len(b)), sf.seg-off)
		if err := sf.segs[i].writeAt(b[:n], off); err != nil {
			return err
		}
		b, at = b[n:], at+n
	}
	return nil
}

// readAt reads from the segments; io.EOF past the end.
func (sf *stagedFile) readAt(b []byte, at int64) (int, error) {
	if at >= sf.size {
		return 0, io.EOF
	}
	done := 0
	for done < len(b) && at < sf.size {
		i, off := at/sf.seg, at%sf.seg
		n := int(min(int64(len(b)-done), sf.seg-off, sf.size-at))
		got, err := sf.segs[i].f.ReadAt(b[done:done+n], off)
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

// write writes the file into the folder from memory (by the kernel, one
// segment after another, ctx checked between them): readers opened after
// it read the folder's copy.
func (sf *stagedFile) write(ctx context.Context, sync bool) error {
	out, err := os.OpenFile(sf.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, sf.mode)
	if err != nil {
		return err
	}
	defer out.Close()
	for i, seg := range sf.segs {
		in, n := int(seg.f.Fd()), min(sf.seg, sf.size-int64(i)*sf.seg)
		var off int64
		for off < n {
			if err := ctx.Err(); err != nil {
				return err
			}
			// sendfile writes at out's position, which follows on.
			got, err := unix.Sendfile(int(out.Fd()), in, &off, int(n-off))
			if err != nil {
				return err
			}
			if got == 0 {
				return fmt.Errorf("%d of %d bytes in memory", int64(i)*sf.seg+off, sf.size)
			}
		}
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
