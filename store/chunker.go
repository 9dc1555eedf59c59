package store

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"

	chunkers "github.com/PlakarKorp/go-cdc-chunkers"
	_ "github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers fastcdc-v1.0.0
	"github.com/restic/chunker"
)

// FastCDC is the chunking algorithm of format 2 repositories: the library's
// versioned name, whose cut points its authors keep stable.
const FastCDC = "fastcdc-v1.0.0"

// Chunking says how a repository cuts files. Every writer of one repository
// must cut the same way for equal bytes to give equal chunks.
type Chunking struct {
	Algorithm string `json:"algorithm"`
	// Key, 32 random bytes per repository, derives the Gear table, so that
	// chunk sizes say nothing about content to someone without the config
	// (restic's random polynomial does the same for Rabin).
	Key        []byte `json:"key"`
	MinSize    int    `json:"minSize"`
	NormalSize int    `json:"normalSize"`
	MaxSize    int    `json:"maxSize"`
}

// newChunking is the chunking of a new repository: chunks of about 1 MiB,
// the same bounds as the Rabin chunker of format 1.
func newChunking() (*Chunking, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &Chunking{Algorithm: FastCDC, Key: key, MinSize: 512 << 10, NormalSize: 1 << 20, MaxSize: 8 << 20}, nil
}

// maxChunkSize bounds MaxSize: a config asking for more is corrupt, and each
// cutter holds a few of them in memory.
const maxChunkSize = 64 << 20

func (c *Chunking) check() error {
	switch {
	case c.Algorithm != FastCDC:
		return fmt.Errorf("chunking algorithm %q is not known to this build (it knows %s)", c.Algorithm, FastCDC)
	case len(c.Key) != 32:
		return fmt.Errorf("chunking key has %d bytes, want 32", len(c.Key))
	case c.MinSize < 64 || c.MinSize >= c.NormalSize || c.NormalSize >= c.MaxSize || c.MaxSize > maxChunkSize:
		return fmt.Errorf("chunk sizes %d/%d/%d: want 64 <= min < normal < max <= %d", c.MinSize, c.NormalSize, c.MaxSize, maxChunkSize)
	case c.NormalSize&(c.NormalSize-1) != 0:
		return fmt.Errorf("normal chunk size %d is not a power of two", c.NormalSize)
	}
	return nil
}

// Chunker cuts a stream into chunks. A chunk returned by Next is valid until
// the next call; Next returns io.EOF, and no chunk, at the end.
type Chunker interface {
	Next() ([]byte, error)
}

// maxChunk is the largest chunk the repository's cutters return.
func (r *Repository) maxChunk() int {
	if r.cfg.Chunking != nil {
		return r.cfg.Chunking.MaxSize
	}
	return chunker.MaxSize
}

// ChunkerBufferSize is the buffer a Chunker reads into. FastCDC's reader slides
// the unread rest to the front whenever fewer than MaxSize bytes remain, so
// four times MaxSize moves at most a third of the bytes once more. The
// Rabin chunker reads through its own buffer and only copies each chunk
// into this one.
func (r *Repository) ChunkerBufferSize() int {
	if r.cfg.Chunking == nil {
		return chunker.MaxSize
	}
	return 4 * r.maxChunk()
}

// NewChunker cuts rd the repository's way, reading through buf (of
// ChunkerBufferSize bytes). Every writer of a repository must cut the same
// way for its chunks to match, so the way is the repository's.
func (r *Repository) NewChunker(rd io.Reader, buf []byte) (Chunker, error) {
	c := r.cfg.Chunking
	if c == nil {
		return &rabinCutter{c: chunker.New(rd, r.cfg.ChunkerPolynomial), buf: buf}, nil
	}
	// The library keeps the options it is given; each Chunker gets its own.
	opts := &chunkers.ChunkerOpts{MinSize: c.MinSize, NormalSize: c.NormalSize, MaxSize: c.MaxSize, Key: c.Key}
	fc, err := chunkers.NewChunkerBuffer(c.Algorithm, rd, opts, buf)
	if err != nil {
		return nil, fmt.Errorf("chunker %s: %w", c.Algorithm, err)
	}
	return &fastCDCCutter{c: fc}, nil
}

// rabinCutter is format 1's chunker, which copies each chunk into buf (of
// chunker.MaxSize bytes).
type rabinCutter struct {
	c   *chunker.Chunker
	buf []byte
}

func (r *rabinCutter) Next() ([]byte, error) {
	c, err := r.c.Next(r.buf)
	return c.Data, err
}

// fastCDCCutter turns the library's last chunk, which comes with io.EOF,
// into a chunk and then io.EOF.
type fastCDCCutter struct {
	c    *chunkers.Chunker
	done bool
}

func (f *fastCDCCutter) Next() ([]byte, error) {
	if f.done {
		return nil, io.EOF
	}
	data, err := f.c.Next()
	if errors.Is(err, io.EOF) {
		f.done = true
		if len(data) > 0 {
			return data, nil
		}
	}
	return data, err
}
