package store

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/stasis-run/stasis/errdefs"
)

// ChunkReader fetches chunks and proves each is the chunk its id names,
// holding at most its stretches fetched and decoding at most parallel at
// once (NewChunkReader), reusing its buffers: allocating two fresh buffers
// per chunk of a 10 GB restore kept the garbage collector and the page
// fault handler busier than the hashing.
type ChunkReader struct {
	r    *Repository
	dec  *zstd.Decoder
	bufs *freeList[*chunkBuffers]
	// stretches holds the stored bytes fetched and not yet decoded.
	stretches *freeList[*[]byte]
}

type chunkBuffers struct {
	raw     []byte
	grouped groupedCoder
}

// NewChunkReader returns a reader that decodes parallel stretches at once
// and holds at most stretches of them fetched (at least parallel; each up
// to the run's length, Repository.PackRead for a pull's); Close it.
func (r *Repository) NewChunkReader(parallel, stretches int) (*ChunkReader, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(parallel), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		return nil, err
	}
	return &ChunkReader{r: r, dec: dec,
		bufs:      newFreeList(parallel, func() *chunkBuffers { return &chunkBuffers{} }),
		stretches: newFreeList(max(parallel, stretches), func() *[]byte { return new([]byte) }),
	}, nil
}

// Close frees the decoder.
func (c *ChunkReader) Close() { c.dec.Close() }

// maxStoredChunk bounds what an index entry may claim for a chunk; more is
// corrupt, and reading it would only exhaust memory.
const maxStoredChunk = 2 * maxChunkSize

// readFull reads len(buf) bytes of pack from offset. A pack that ends
// before them is corrupt (truncated); any other failure is the backend's,
// which, retrying (WithRetry), resumes a read the network broke and calls
// one that outlasts its attempts unavailable.
func (r *Repository) readFull(ctx context.Context, pack string, offset int64, buf []byte) error {
	rc, err := r.be.Get(ctx, packKey(pack), offset, int64(len(buf)))
	if errors.Is(err, ErrNotExist) {
		return fmt.Errorf("pack %s is missing: %w", pack, err)
	}
	if err != nil {
		return fmt.Errorf("pack %s: %w", pack, err)
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, buf)
	switch {
	case errors.Is(err, errdefs.ErrUnavailable):
		return fmt.Errorf("pack %s: %w", pack, err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return corrupt("pack %s is truncated: %d of %d bytes at offset %d", pack, n, len(buf), offset)
	case err != nil:
		return fmt.Errorf("pack %s: %w", pack, err)
	}
	return nil
}

// Read fetches chunk id, checks it against its id, and passes its bytes,
// valid during the call only, to use (when not nil): a run of one chunk,
// read and proved the way a pull reads its runs.
func (c *ChunkReader) Read(ctx context.Context, id string, use func([]byte) error) error {
	runs, err := c.r.PlanReads([]string{id}, maxStoredChunk)
	if err != nil {
		return err
	}
	_, err = c.ReadRun(ctx, runs[0], func(_ RunChunk, data []byte) error {
		if use == nil {
			return nil
		}
		return use(data)
	})
	return err
}
