package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// Run is a stretch of one pack that holds chunks a restore needs, read
// with one request: a pull of a snapshot reads its packs in a few large
// reads rather than one small read per chunk.
type Run struct {
	Pack string
	// Offset and Length are the stretch's place in the pack.
	Offset, Length int64
	Chunks         []RunChunk
}

// RunChunk is one chunk of a Run.
type RunChunk struct {
	ID string
	// At is where the chunk starts in its run; Stored is its compressed
	// length there, Raw its own.
	At, Stored, Raw int64
}

// maxRunGap is the most bytes between two needed chunks of a pack that a
// run reads through: cheaper than a second request.
const maxRunGap = 256 << 10

// PackRead is the most bytes of one pack worth reading with one request:
// a whole pack, which closes at the first chunk that takes it past the
// pack size, so it holds at most that and one more chunk (a bound of the
// pack size alone split nearly every pack into a run and a last chunk read
// on its own, twice the requests); at most maxPackRead, which bounds a
// pull's memory whatever pack size a repository was made with.
func (r *Repository) PackRead() int64 {
	return min(r.cfg.PackSize+int64(r.maxChunk()), maxPackRead)
}

// maxPackRead bounds PackRead: 64 MiB, the local backend's largest direct
// read.
const maxPackRead = 64 << 20

// PlanReads groups chunks (each named once) into runs of at most maxRun
// bytes, in pack and offset order, so that a pull reads each pack front to
// back. A chunk that no pack's index holds is an error.
func (r *Repository) PlanReads(ids []string, maxRun int64) ([]Run, error) {
	type located struct {
		id  string
		loc blobLocation
	}
	all := make([]located, 0, len(ids))
	for _, id := range ids {
		loc, ok := r.lookup(id)
		if !ok {
			return nil, corrupt("chunk %s is in no pack's index", id)
		}
		if loc.Length <= 0 || loc.Length > maxStoredChunk || loc.Raw < 0 || loc.Raw > maxStoredChunk {
			return nil, fmt.Errorf("chunk %s: the index of pack %s claims %d stored and %d raw bytes (corrupt)", id, loc.Pack, loc.Length, loc.Raw)
		}
		all = append(all, located{id, loc})
	}
	slices.SortFunc(all, func(a, b located) int {
		return cmp.Or(cmp.Compare(a.loc.Pack, b.loc.Pack), cmp.Compare(a.loc.Offset, b.loc.Offset))
	})
	var runs []Run
	for _, c := range all {
		n := len(runs)
		if n > 0 {
			last := &runs[n-1]
			end := last.Offset + last.Length
			if last.Pack == c.loc.Pack && c.loc.Offset >= end && c.loc.Offset-end <= maxRunGap && c.loc.Offset+c.loc.Length-last.Offset <= maxRun {
				last.Chunks = append(last.Chunks, RunChunk{ID: c.id, At: c.loc.Offset - last.Offset, Stored: c.loc.Length, Raw: c.loc.Raw})
				last.Length = c.loc.Offset + c.loc.Length - last.Offset
				continue
			}
		}
		runs = append(runs, Run{Pack: c.loc.Pack, Offset: c.loc.Offset, Length: c.loc.Length,
			Chunks: []RunChunk{{ID: c.id, Stored: c.loc.Length, Raw: c.loc.Raw}}})
	}
	return runs, nil
}

// RunTimes is where the time of one ReadRun went: waiting for the stretch's
// bytes from the backend, decompressing its chunks, and hashing them.
type RunTimes struct {
	Read, Decode, Check time.Duration
}

// ReadRun fetches run with one request and passes each of its chunks,
// decompressed and checked against its id, to use, in order; the bytes are
// valid during the call only. A read the network breaks is resumed where
// it stopped by the retrying backend (WithRetry). It says where its own
// time went (use's not counted).
func (c *ChunkReader) ReadRun(ctx context.Context, run Run, use func(RunChunk, []byte) error) (RunTimes, error) {
	st, err := c.FetchRun(ctx, run)
	if err != nil {
		return RunTimes{}, err
	}
	return c.DecodeRun(ctx, st, use)
}

// Stretch is a run's stored bytes, fetched (FetchRun) and not yet decoded
// (DecodeRun): a pull reads stretches ahead of its decoding, so that the
// disk is not left idle while the cores are busy.
type Stretch struct {
	Run Run
	// Read is how long the backend took to deliver it.
	Read time.Duration
	buf  *[]byte
}

// FetchRun reads run's stored bytes with one request into one of the
// reader's stretch buffers, waiting for one to be free: at most stretches
// (NewChunkReader) are held at once. DecodeRun gives the buffer back.
func (c *ChunkReader) FetchRun(ctx context.Context, run Run) (*Stretch, error) {
	buf, err := c.stretches.get(ctx)
	if err != nil {
		return nil, err
	}
	*buf = slices.Grow((*buf)[:0], int(run.Length))[:run.Length]
	began := time.Now()
	if err := c.r.readFull(ctx, run.Pack, run.Offset, *buf); err != nil {
		c.stretches.put(buf)
		return nil, err
	}
	return &Stretch{Run: run, Read: time.Since(began), buf: buf}, nil
}

// Stretches is how many stretches the reader holds fetched at most.
func (c *ChunkReader) Stretches() int { return cap(c.stretches.free) }

// release gives a stretch's buffer back to its reader.
func (c *ChunkReader) release(st *Stretch) {
	if st.buf != nil {
		c.stretches.put(st.buf)
		st.buf = nil
	}
}

// DecodeRun passes each chunk of a fetched stretch, decompressed and
// checked against its id, to use, in order, as ReadRun does, and then
// releases the stretch. At most parallel (NewChunkReader) decode at once.
func (c *ChunkReader) DecodeRun(ctx context.Context, st *Stretch, use func(RunChunk, []byte) error) (RunTimes, error) {
	defer c.release(st)
	times := RunTimes{Read: st.Read}
	b, err := c.bufs.get(ctx)
	if err != nil {
		return times, err
	}
	defer c.bufs.put(b)
	run := st.Run
	compressed := *st.buf
	mark := time.Now()
	for _, ch := range run.Chunks {
		stored := compressed[ch.At : ch.At+ch.Stored]
		var data []byte
		if isGrouped(stored) {
			data, err = b.grouped.decode(b.raw, stored, int(ch.Raw))
		} else {
			data, err = c.dec.DecodeAll(stored, slices.Grow(b.raw[:0], int(ch.Raw)))
		}
		if err != nil {
			return times, fmt.Errorf("chunk %s in pack %s does not decompress (corrupt): %w", ch.ID, run.Pack, err)
		}
		b.raw = data[:0]
		decoded := time.Now()
		sum := sha256.Sum256(data)
		checked := time.Now()
		times.Decode += decoded.Sub(mark)
		times.Check += checked.Sub(decoded)
		if hex.EncodeToString(sum[:]) != ch.ID || int64(len(data)) != ch.Raw {
			return times, corrupt("chunk %s in pack %s does not match its hash", ch.ID, run.Pack)
		}
		if err := use(ch, data); err != nil {
			return times, err
		}
		mark = time.Now()
	}
	return times, nil
}
