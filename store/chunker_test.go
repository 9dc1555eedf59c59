package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/restic/chunker"
)

// testRepos are a repository of each format, with fixed keys so that runs
// compare.
func testRepos() map[string]*Repository {
	fastcdc := &Chunking{Algorithm: FastCDC, Key: bytes.Repeat([]byte{7}, 32), MinSize: 512 << 10, NormalSize: 1 << 20, MaxSize: 8 << 20}
	return map[string]*Repository{
		"rabin":   {cfg: Config{Version: 1, ChunkerPolynomial: chunker.Pol(0x3DA3358B4DC173)}},
		"fastcdc": {cfg: Config{Version: 2, Chunking: fastcdc}},
	}
}

func pseudoRandom(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// cutAll returns the chunks of data by hash, with their sizes.
func cutAll(t testing.TB, r *Repository, data []byte) map[[32]byte]int {
	t.Helper()
	c, err := r.NewChunker(bytes.NewReader(data), make([]byte, r.ChunkerBufferSize()))
	if err != nil {
		t.Fatal(err)
	}
	chunks := map[[32]byte]int{}
	total := 0
	for {
		chunk, err := c.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk) == 0 || len(chunk) > r.maxChunk() {
			t.Fatalf("a chunk of %d bytes", len(chunk))
		}
		chunks[sha256.Sum256(chunk)] = len(chunk)
		total += len(chunk)
	}
	if total != len(data) {
		t.Fatalf("the chunks hold %d bytes of %d", total, len(data))
	}
	return chunks
}

// TestCuttersResynchronise checks what dedup rests on: a copy of the data
// with pages inserted here and there shares most of its chunks with the
// original, each insertion costing only the chunks around it.
func TestCuttersResynchronise(t *testing.T) {
	src := pseudoRandom(1, 64<<20)
	const edits = 8
	var edited []byte
	step := len(src) / (edits + 1)
	for i := range edits + 1 {
		edited = append(edited, src[i*step:(i+1)*step]...)
		if i < edits {
			edited = append(edited, pseudoRandom(uint64(i+2), 4096)...)
		}
	}
	edited = append(edited, src[(edits+1)*step:]...)
	for name, r := range testRepos() {
		a, b := cutAll(t, r, src), cutAll(t, r, edited)
		shared := 0
		for h, n := range b {
			if _, ok := a[h]; ok {
				shared += n
			}
		}
		// Each insertion breaks the chunk it lands in and, at worst, the
		// next one: 2 of about 60 chunks each.
		if frac := float64(shared) / float64(len(edited)); frac < 0.6 {
			t.Errorf("%s: %d edits left %.0f%% of the copy in shared chunks", name, edits, 100*frac)
		} else {
			t.Logf("%s: %d chunks, %.0f%% of the copy shared after %d inserted pages", name, len(b), 100*frac, edits)
		}
	}
}

func TestCuttersEmptyAndShortInput(t *testing.T) {
	for name, r := range testRepos() {
		for _, n := range []int{0, 1, 4096, 512 << 10, 512<<10 + 1} {
			if got := cutAll(t, r, pseudoRandom(3, n)); n > 0 && len(got) != 1 {
				t.Errorf("%s: %d bytes cut into %d chunks, want 1", name, n, len(got))
			}
		}
	}
}

// BenchmarkCut measures each format's chunker alone over 256 MiB of random
// bytes: `go test -run xxx -bench Cut ./store`.
func BenchmarkCut(b *testing.B) {
	data := pseudoRandom(4, 256<<20)
	for name, r := range testRepos() {
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, r.ChunkerBufferSize())
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				c, err := r.NewChunker(bytes.NewReader(data), buf)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := c.Next(); err != nil {
						break
					}
				}
			}
		})
	}
}
