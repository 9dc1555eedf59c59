// Package console keeps an actor's console log: the file its sandbox's
// standard output and error (a micro-VM's serial console) are written to by
// the sandbox itself, opened to append, so that they outlive stasisd and
// never wait for it. stasisd neither stamps each line nor rotates the file
// by renaming it (the sandbox holds it open); it keeps the log from beside:
//
//   - Marks: each look (Keeper.Look, every second) that finds the file grown
//     appends "UNIXNANO SIZE" to PATH.marks: what follows SIZE bytes was
//     written after that time. A read since a time starts at the last mark
//     at or before it, so it is exact to within a look.
//   - Rotation: a file over the size bound is copied to PATH.1 (older copies
//     shift to PATH.2 and on, Files in all with the one being written) and
//     cut to nothing in place, as logrotate's copytruncate does; the sandbox
//     appends, so it writes on at the new end. What it writes between the
//     copy's last read and the cut (a moment) is lost.
package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultMaxSize and DefaultFiles bound a console as the kubelet bounds a
// container's log by default.
const (
	DefaultMaxSize = 10 << 20
	DefaultFiles   = 5
)

// DefaultLook is how often stasisd looks at the consoles.
const DefaultLook = time.Second

// chunk is the most a read sends at once.
const chunk = 32 << 10

// Limits bound a console.
type Limits struct {
	// MaxSize: a console (or its marks) over this many bytes is rotated;
	// DefaultMaxSize when zero.
	MaxSize int64
	// Files is how many files a console keeps, the one being written among
	// them (1: it is only cut); DefaultFiles when zero.
	Files int
}

func (l Limits) withDefaults() Limits {
	if l.MaxSize <= 0 {
		l.MaxSize = DefaultMaxSize
	}
	if l.Files <= 0 {
		l.Files = DefaultFiles
	}
	return l
}

// Keeper marks and rotates consoles. It is safe for concurrent use.
type Keeper struct {
	limits Limits
	mu     sync.Mutex
	// marked is each console's size at its last mark; gens counts its
	// rotations (Cursor).
	marked map[string]int64
	gens   map[string]int64
}

// NewKeeper keeps consoles within limits.
func NewKeeper(limits Limits) *Keeper {
	return &Keeper{limits: limits.withDefaults(), marked: map[string]int64{}, gens: map[string]int64{}}
}

// Look marks each console in paths that grew since its last mark and
// rotates those over the bound, at now; it forgets consoles not in paths
// (removed: their followers end). A console that does not exist is
// skipped. It returns the first error after looking at them all.
func (k *Keeper) Look(paths []string, now time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var first error
	looked := map[string]bool{}
	for _, p := range paths {
		looked[p] = true
		if err := k.look(p, now); err != nil && first == nil {
			first = fmt.Errorf("console %s: %w", p, err)
		}
	}
	for p := range k.marked {
		if !looked[p] {
			delete(k.marked, p)
			delete(k.gens, p)
		}
	}
	return first
}

func (k *Keeper) look(path string, now time.Time) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		delete(k.marked, path)
		delete(k.gens, path)
		return nil
	}
	if err != nil {
		return err
	}
	last, known := k.marked[path]
	size := st.Size()
	if known && size == last {
		// Nothing written since the last look: nothing to mark, and what
		// was over the bound then was rotated then.
		return nil
	}
	if !known {
		// stasisd started since: the marks file has the last.
		marks, err := readMarks(marksOf(path))
		if err != nil {
			return err
		}
		if len(marks) > 0 {
			last = marks[len(marks)-1].Size
		}
	}
	if size < last {
		// Cut by someone else: the marks were of another file.
		if err := os.Truncate(marksOf(path), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if size != last {
		if err := appendMark(path, Mark{At: now, Size: size}); err != nil {
			return err
		}
	}
	k.marked[path] = size
	marksSize := int64(0)
	if st, err := os.Stat(marksOf(path)); err == nil {
		marksSize = st.Size()
	}
	if size > k.limits.MaxSize || marksSize > k.limits.MaxSize {
		if err := k.rotate(path, now); err != nil {
			// Looked at afresh next time, and rotated then.
			delete(k.marked, path)
			return fmt.Errorf("rotate: %w", err)
		}
	}
	return nil
}

// rotate copies the console at path to its first older file, shifting
// those before it, and cuts it to nothing; its marks move with it.
func (k *Keeper) rotate(path string, now time.Time) error {
	// One kept beyond the bound (by a stasisd with more --console-files)
	// would be read as the next older.
	for _, p := range []string{olderFile(path, k.limits.Files), marksOf(olderFile(path, k.limits.Files))} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for i := k.limits.Files - 1; i >= 2; i-- {
		from, to := olderFile(path, i-1), olderFile(path, i)
		for _, names := range [][2]string{{from, to}, {marksOf(from), marksOf(to)}} {
			if err := os.Rename(names[0], names[1]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if k.limits.Files > 1 {
		if err := copyOut(path, olderFile(path, 1)); err != nil {
			return err
		}
		if err := os.Rename(marksOf(path), marksOf(olderFile(path, 1))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Truncate(path, 0); err != nil {
		return err
	}
	if err := os.Truncate(marksOf(path), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	k.marked[path] = 0
	k.gens[path]++
	// What the new file holds was written from now on.
	return appendMark(path, Mark{At: now, Size: 0})
}

// copyOut copies the console at path to dst (through a temporary file, so
// that dst is whole or absent), reading again what was appended during the
// copy, so that as little as can be is written between its last read and
// the cut that follows.
func copyOut(path, dst string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	// A few reads at most: a writer faster than the copy is cut anyway.
	for range 4 {
		n, err := io.Copy(out, src)
		if err != nil {
			out.Close()
			return err
		}
		if n == 0 {
			break
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// Mark says that what a console holds after Size bytes was written after At.
type Mark struct {
	At   time.Time
	Size int64
}

func marksOf(path string) string { return path + ".marks" }

// olderFile is the n-th older copy of path (n ≥ 1).
func olderFile(path string, n int) string { return path + "." + strconv.Itoa(n) }

func appendMark(path string, m Mark) error {
	f, err := os.OpenFile(marksOf(path), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%d %d\n", m.At.UnixNano(), m.Size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readMarks reads a marks file; a missing one has none, and a line that
// does not read as a mark (one cut short by a crash) is skipped.
func readMarks(path string) ([]Mark, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var marks []Mark
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		at, size, ok := strings.Cut(lines.Text(), " ")
		ns, err1 := strconv.ParseInt(at, 10, 64)
		n, err2 := strconv.ParseInt(size, 10, 64)
		if ok && err1 == nil && err2 == nil {
			marks = append(marks, Mark{At: time.Unix(0, ns), Size: n})
		}
	}
	return marks, lines.Err()
}

// Pick is the part of a console a read sends.
type Pick struct {
	// Since: only what was written at or after it (zero: all kept).
	Since time.Time
	// Tail: then only the last *Tail lines (nil: all).
	Tail *int64
}

// Cursor is a place in a console: a generation of it and an offset in
// that. The file being written is the console's newest generation; each
// rotation makes it the next older file (PATH.1, then PATH.2), so a cursor
// stays good across rotations while its file is kept.
type Cursor struct {
	gen, off int64
}

// span is a range of one generation of a console.
type span struct {
	gen, from, to int64
}

// Remove removes the console at path with its marks and older copies, and
// forgets it. Under the keeper's lock, so that no look under way writes a
// mark beside it afterwards: the folder that held it can then be removed
// whole (a mark appended meanwhile would leave it not empty).
func (k *Keeper) Remove(path string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.marked, path)
	delete(k.gens, path)
	// The console first: a look that finds it gone writes nothing.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove console: %w", err)
	}
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove console: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), base+".") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove console: %w", err)
			}
		}
	}
	return nil
}

// nameOf is the file that holds generation gen of the console at path now.
// Under k.mu.
func (k *Keeper) nameOf(path string, gen int64) string {
	if back := k.gens[path] - gen; back > 0 {
		return olderFile(path, int(back))
	}
	return path
}

// Read sends the console at path, as pick chooses, to send in pieces,
// oldest first, and returns where it stopped, for Follow. A console that
// does not exist yet is empty.
func (k *Keeper) Read(path string, pick Pick, send func([]byte) error) (Cursor, error) {
	k.mu.Lock()
	spans, err := k.spans(path, pick)
	k.mu.Unlock()
	if err != nil {
		return Cursor{}, err
	}
	for _, sp := range spans {
		for off := sp.from; off < sp.to; {
			b, err := k.readAt(path, sp.gen, off, sp.to-off)
			if err != nil {
				return Cursor{}, err
			}
			if len(b) == 0 {
				// Rotated out of what is kept since the read began.
				break
			}
			if err := send(b); err != nil {
				return Cursor{}, err
			}
			off += int64(len(b))
		}
	}
	last := spans[len(spans)-1]
	return Cursor{gen: last.gen, off: last.to}, nil
}

// spans are the ranges of the console's generations, oldest first, that
// pick chooses; the last is of the file being written. Under k.mu.
func (k *Keeper) spans(path string, pick Pick) ([]span, error) {
	cur := k.gens[path]
	older := 0
	for ; ; older++ {
		if _, err := os.Stat(olderFile(path, older+1)); err != nil {
			break
		}
	}
	var spans []span
	for gen := cur - int64(older); gen <= cur; gen++ {
		name := k.nameOf(path, gen)
		st, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) && gen == cur {
			spans = append(spans, span{gen: gen})
			continue
		}
		if err != nil {
			return nil, err
		}
		sp := span{gen: gen, to: st.Size()}
		if !pick.Since.IsZero() {
			marks, err := readMarks(marksOf(name))
			if err != nil {
				return nil, err
			}
			for _, m := range marks {
				if m.At.After(pick.Since) {
					break
				}
				sp.from = min(m.Size, sp.to)
			}
		}
		spans = append(spans, sp)
	}
	if pick.Tail != nil {
		return k.tail(path, spans, *pick.Tail)
	}
	return spans, nil
}

// tail cuts spans to their last n lines (a last line without its newline
// counts as one). Under k.mu.
func (k *Keeper) tail(path string, spans []span, n int64) ([]span, error) {
	last := spans[len(spans)-1]
	if n <= 0 {
		return []span{{gen: last.gen, from: last.to, to: last.to}}, nil
	}
	var seen int64
	trailing := true
	buf := make([]byte, chunk)
	for i := len(spans) - 1; i >= 0; i-- {
		sp := spans[i]
		if sp.to <= sp.from {
			continue
		}
		f, err := os.Open(k.nameOf(path, sp.gen))
		if err != nil {
			return nil, err
		}
		for end := sp.to; end > sp.from; {
			start := max(sp.from, end-chunk)
			b := buf[:end-start]
			if _, err := f.ReadAt(b, start); err != nil {
				f.Close()
				return nil, err
			}
			for j := len(b) - 1; j >= 0; j-- {
				if b[j] != '\n' {
					trailing = false
					continue
				}
				if trailing {
					// The newline that ends the last line begins no other.
					trailing = false
					continue
				}
				if seen++; seen == n {
					f.Close()
					spans[i].from = start + int64(j) + 1
					return spans[i:], nil
				}
			}
			end = start
		}
		f.Close()
	}
	return spans, nil
}

// readAt reads at most limit bytes (and at most a chunk) of generation gen
// of the console at path from off: nothing when that generation is no
// longer kept or has nothing there.
func (k *Keeper) readAt(path string, gen, off, limit int64) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return readFile(k.nameOf(path, gen), off, min(limit, chunk))
}

func readFile(name string, off, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, limit)
	n, err := f.ReadAt(b, off)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return b[:n], nil
}

// next reads what follows c in the console at path, at most a chunk, and
// the cursor after it: nothing when nothing was written since. A cursor in
// an older generation reads on there, then in the next.
func (k *Keeper) next(path string, c Cursor) ([]byte, Cursor, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for cur := k.gens[path]; c.gen < cur; c = (Cursor{gen: c.gen + 1}) {
		b, err := readFile(k.nameOf(path, c.gen), c.off, chunk)
		if err != nil {
			return nil, c, err
		}
		if len(b) > 0 {
			c.off += int64(len(b))
			return b, c, nil
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, c, err
	}
	if c.off > st.Size() {
		// Cut by someone else: what it holds now is new.
		c.off = 0
	}
	b, err := readFile(path, c.off, chunk)
	c.off += int64(len(b))
	return b, c, err
}

// Follow sends what is written to the console at path after c as it comes,
// looking every interval, until ctx ends (its error), the console is
// removed (nil) or, when there is nothing new, ended says its writer is
// gone (nil, after a last look).
func (k *Keeper) Follow(ctx context.Context, path string, c Cursor, interval time.Duration, ended func() bool, send func([]byte) error) error {
	last := false
	for {
		b, next, err := k.next(path, c)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		c = next
		if len(b) > 0 {
			if err := send(b); err != nil {
				return err
			}
			continue
		}
		if last {
			return nil
		}
		if ended() {
			// Whatever it wrote before it went is read once more.
			last = true
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
