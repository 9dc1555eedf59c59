package archiver

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestStagedFileSegments: a file held in memory in segments reads back
// what was written into it, pieces that cross segments included, whatever
// the order of the writes; a reader opened before the restore lets go
// keeps reading it; it is written into the folder whole, and once it is,
// readers open the folder's copy.
func TestStagedFileSegments(t *testing.T) {
	const seg, size = 1000, 3500
	want := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	path := filepath.Join(t.TempDir(), "pages.img")
	freed := false
	sf, err := newStagedFile(path, 0o600, size, seg, func() { freed = true })
	if err != nil {
		t.Fatal(err)
	}
	if len(sf.segs) != 4 {
		t.Fatalf("%d bytes in segments of %d: %d segments, want 4", size, seg, len(sf.segs))
	}
	// Pieces of 1 to 1500 bytes, in a shuffled order.
	var starts []int
	for at := 0; at < size; {
		starts = append(starts, at)
		at += 1 + rng.IntN(1500)
	}
	rng.Shuffle(len(starts), func(i, j int) { starts[i], starts[j] = starts[j], starts[i] })
	for _, at := range starts {
		end := size
		for _, s := range starts {
			if s > at && s < end {
				end = s
			}
		}
		if _, err := sf.writeAt(want[at:end], int64(at)); err != nil {
			t.Fatal(err)
		}
	}
	r := sf.open()
	if r == nil {
		t.Fatal("no reader of the file in memory")
	}
	got := make([]byte, size)
	if n, err := r.ReadAt(got, 0); n != size || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (%v): equal %v", n, err, bytes.Equal(got, want))
	}
	if n, err := r.ReadAt(make([]byte, 600), 2999); n != 501 || err != io.EOF {
		t.Fatalf("a read past the end: %d bytes, %v; want 501 and EOF", n, err)
	}
	if err := sf.write(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	sf.release() // the restore's hold
	if n, err := r.ReadAt(got, 0); n != size || err != nil || !bytes.Equal(got, want) || freed {
		t.Fatalf("the open reader, once the restore let go: %d bytes (%v), memory freed %v", n, err, freed)
	}
	r.Close()
	if !freed {
		t.Fatal("the memory was not given back once the restore and the reader let go")
	}
	written, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(written, want) {
		t.Fatalf("the folder's copy: %d bytes (%v), equal %v", len(written), err, bytes.Equal(written, want))
	}
	if sf.open() != nil {
		t.Fatal("a reader of the memory opened after the folder holds the file")
	}
}
