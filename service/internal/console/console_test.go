package console

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writer is a sandbox's side of a console: the file opened to append, as
// runsc's standard output is.
func writer(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func read(t *testing.T, k *Keeper, path string, pick Pick) (string, Cursor) {
	t.Helper()
	var out bytes.Buffer
	c, err := k.Read(path, pick, func(b []byte) error { out.Write(b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), c
}

func lines(t *testing.T, w *os.File, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := fmt.Fprintf(w, "line %04d\n", i); err != nil {
			t.Fatal(err)
		}
	}
}

func want(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line %04d\n", i)
	}
	return b.String()
}

func tailOf(n int64) *int64 { return &n }

// TestSinceStartsAtTheMarks: a read since a time starts at the last mark
// at or before it; what no look has marked yet is read whole.
func TestSinceStartsAtTheMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	k := NewKeeper(Limits{})
	w := writer(t, path)
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for i := range 3 {
		lines(t, w, i, i+1)
		if err := k.Look([]string{path}, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	lines(t, w, 3, 4)
	for _, c := range []struct {
		since time.Time
		want  string
	}{
		{time.Time{}, want(0, 4)},
		{t0.Add(-time.Second), want(0, 4)},
		{t0, want(1, 4)},
		{t0.Add(1500 * time.Millisecond), want(2, 4)},
		{t0.Add(time.Hour), want(3, 4)},
	} {
		if got, _ := read(t, k, path, Pick{Since: c.since}); got != c.want {
			t.Errorf("since %s: got %q, want %q", c.since.Format(time.TimeOnly), got, c.want)
		}
	}
	// A look that finds nothing new adds no mark.
	before, _ := os.ReadFile(marksOf(path))
	if err := k.Look([]string{path}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := k.Look([]string{path}, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(marksOf(path))
	if got := strings.Count(string(after), "\n") - strings.Count(string(before), "\n"); got != 1 {
		t.Errorf("two looks after one write added %d marks, want 1", got)
	}
	// A keeper started anew (stasisd restarted) goes on from the marks file.
	k2 := NewKeeper(Limits{})
	if err := k2.Look([]string{path}, t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(marksOf(path)); !bytes.Equal(again, after) {
		t.Errorf("a new keeper marked a console that did not grow:\n%s", again)
	}
}

// TestTail: the last lines, with and without the last newline, none, more
// than there are.
func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	k := NewKeeper(Limits{})
	if got, _ := read(t, k, path, Pick{Tail: tailOf(3)}); got != "" {
		t.Errorf("a console not yet written: %q", got)
	}
	if err := os.WriteFile(path, []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int64]string{0: "", 1: "three\n", 2: "two\nthree\n", 3: "one\ntwo\nthree\n", 10: "one\ntwo\nthree\n"} {
		if got, _ := read(t, k, path, Pick{Tail: tailOf(n)}); got != want {
			t.Errorf("tail %d: got %q, want %q", n, got, want)
		}
	}
	if err := os.WriteFile(path, []byte("one\ntwo\nthree"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, k, path, Pick{Tail: tailOf(2)}); got != "two\nthree" {
		t.Errorf("tail 2 without the last newline: %q", got)
	}
	// Longer than a chunk: the lines are found across reads.
	long := strings.Repeat("x", 3*chunk)
	if err := os.WriteFile(path, []byte("first\n"+long+"\nlast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, k, path, Pick{Tail: tailOf(2)}); got != long+"\nlast\n" {
		t.Errorf("tail 2 over a long line: %d bytes, want %d", len(got), len(long)+6)
	}
}

// TestRotation: a console over its bound is copied aside and cut; the
// sandbox writes on at the start of the cut file; a read gets every line in
// order across the files kept, the oldest dropped past the bound; a cursor
// taken before the rotations reads on through them.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	k := NewKeeper(Limits{MaxSize: 4 << 10, Files: 3})
	w := writer(t, path)
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	look := func() {
		t.Helper()
		now = now.Add(time.Second)
		if err := k.Look([]string{path}, now); err != nil {
			t.Fatal(err)
		}
	}
	// 500 lines of 10 bytes: over 4 KiB once.
	lines(t, w, 0, 500)
	look()
	_, cursor := read(t, k, path, Pick{Tail: tailOf(0)})
	st, err := os.Stat(path)
	if err != nil || st.Size() != 0 {
		t.Fatalf("after a rotation the console is %v bytes (%v), want 0", st.Size(), err)
	}
	if got, _ := os.ReadFile(olderFile(path, 1)); string(got) != want(0, 500) {
		t.Fatalf("the rotated copy holds %d bytes, want the 500 lines", len(got))
	}
	// The writer appends at the new end: no hole where the old bytes were.
	lines(t, w, 500, 510)
	if got, _ := read(t, k, path, Pick{}); got != want(0, 510) {
		t.Errorf("read across one rotation: %d bytes, want %d", len(got), len(want(0, 510)))
	}
	// A follower from before the writes reads them, through the rotations
	// that come before it looks.
	lines(t, w, 510, 1000)
	look()
	lines(t, w, 1000, 1500)
	look()
	lines(t, w, 1500, 1510)
	var followed bytes.Buffer
	err = k.Follow(context.Background(), path, cursor, time.Millisecond, func() bool { return true }, func(b []byte) error { followed.Write(b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Three rotations with three files kept: the first copy is gone.
	if _, err := os.Stat(olderFile(path, 3)); err == nil {
		t.Errorf("%s kept beyond the bound of 3 files", olderFile(path, 3))
	}
	// The cursor was at the start of the file after the first rotation.
	if followed.String() != want(500, 1510) {
		t.Errorf("followed across rotations: %d bytes, want %d (lines 500-1509)", followed.Len(), len(want(500, 1510)))
	}
	// Kept: lines 500-999 (.2), 1000-1499 (.1), 1500-1509 (being written).
	if got, _ := read(t, k, path, Pick{}); got != want(500, 1510) {
		t.Errorf("read after three rotations: %d bytes, want lines 500-1509 (%d)", len(got), len(want(500, 1510)))
	}
	if got, _ := read(t, k, path, Pick{Tail: tailOf(3)}); got != want(1507, 1510) {
		t.Errorf("tail 3 after rotations: %q", got)
	}
	// Since the last look (it rotated): what came after it. Since half a
	// look before it: from the look before, as exact as the looks are.
	if got, _ := read(t, k, path, Pick{Since: now}); got != want(1500, 1510) {
		t.Errorf("since the last rotation: %q", got)
	}
	if got, _ := read(t, k, path, Pick{Since: now.Add(-500 * time.Millisecond)}); got != want(1000, 1510) {
		t.Errorf("since half a look before the last rotation: %d bytes, want lines 1000-1509", len(got))
	}
}

// TestFollowEnds: a follow sends what comes, ends when its writer is gone
// (after reading what it wrote last) or when the console is removed, and
// stops with its context.
func TestFollowEnds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "console.log")
	k := NewKeeper(Limits{})
	w := writer(t, path)
	lines(t, w, 0, 2)
	out, c := read(t, k, path, Pick{})
	if out != want(0, 2) {
		t.Fatalf("read %q", out)
	}
	looks := 0
	var got bytes.Buffer
	ended := func() bool {
		looks++
		if looks == 1 {
			// The writer's last words, written as it goes.
			lines(t, w, 2, 3)
			return false
		}
		lines(t, w, 3, 4)
		return true
	}
	if err := k.Follow(context.Background(), path, c, time.Millisecond, ended, func(b []byte) error { got.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	if got.String() != want(2, 4) {
		t.Errorf("followed %q, want lines 2-3", got.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := k.Follow(ctx, path, c, time.Millisecond, func() bool { return false }, func([]byte) error { return nil }); err != context.Canceled {
		t.Errorf("a follow whose context ended: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := k.Follow(context.Background(), path, c, time.Millisecond, func() bool { return false }, func([]byte) error { return nil }); err != nil {
		t.Errorf("a follow of a removed console: %v", err)
	}
}

// TestRemoveLeavesNothingToMark: a console removed while looks run (as
// stasisd's keeper looks every second while an actor is deleted) leaves its
// folder empty, with no mark written after it, and is forgotten; its
// rotated copies and marks go with it, and nothing beside them.
func TestRemoveLeavesNothingToMark(t *testing.T) {
	for round := range 50 {
		dir := t.TempDir()
		path := filepath.Join(dir, "console.log")
		k := NewKeeper(Limits{MaxSize: 64, Files: 3})
		w := writer(t, path)
		lines(t, w, 0, 10)
		if err := k.Look([]string{path}, time.Now()); err != nil {
			t.Fatal(err)
		}
		lines(t, w, 10, 12)
		if err := os.WriteFile(filepath.Join(dir, "console.logger"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		looked := make(chan error)
		go func() {
			// A look that found the console before the removal.
			looked <- k.Look([]string{path}, time.Now())
		}()
		if err := k.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := <-looked; err != nil {
			t.Fatalf("round %d: a look racing the removal: %v", round, err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "console.logger" {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("round %d: the folder holds %v after the removal, want only console.logger", round, names)
		}
		if _, known := k.marked[path]; known {
			t.Fatalf("round %d: the removed console is still known", round)
		}
	}
}
