package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/klauspost/compress/huff0"
)

// A chunk is stored in one of two encodings, told apart by its first bytes:
// a zstd frame (every format), or, in format 3, grouped bytes. A model's
// bf16 weights defeat zstd (each value's high byte, its sign and exponent,
// takes a handful of values, but it alternates with a random low byte, so
// no byte repeats and the byte histogram is nearly flat), while the high
// bytes on their own take two or three bits each. Grouped bytes are the
// chunk's bytes at even offsets and those at odd offsets as two streams,
// each entropy-coded apart (as ZipNN does), unit by unit:
//
//	chunk  := groupedMagic unit*
//	unit   := stream(even bytes) stream(odd bytes)   of up to groupedUnit chunk bytes
//	stream := 0x00 bytes                  raw, as many as the stream holds
//	        | 0x01 uvarint(n) huff0[n]    Huffman-coded (huff0 4X, its table first)
//	        | 0x02 byte                   every byte the same
//
// A unit's streams hold (n+1)/2 and n/2 bytes for n chunk bytes; every unit
// but the last holds groupedUnit. The split does not depend on where the
// chunk starts: a chunk cut at an odd offset only swaps the streams.
const groupedMagic = "\xb7SG2"

// groupedUnit is the chunk bytes per unit: each stream stays under huff0's
// block limit (128 KiB), and a table per unit follows the data's changes.
const groupedUnit = 128 << 10

const (
	streamRaw byte = iota
	streamHuffman
	streamSame
)

// groupedCoder encodes and decodes grouped chunks; it holds its scratch
// buffers, so one goroutine uses it at a time.
type groupedCoder struct {
	enc       huff0.Scratch
	dec       [2]huff0.Scratch
	same      [2][]byte
	even, odd []byte
	out       []byte // the encoding
}

// isGrouped says whether a stored chunk is grouped bytes.
func isGrouped(stored []byte) bool {
	return bytes.HasPrefix(stored, []byte(groupedMagic))
}

// encode appends data's grouped encoding to dst.
func (g *groupedCoder) encode(dst, data []byte) []byte {
	g.enc.Reuse = huff0.ReusePolicyNone // every stream carries its own table
	dst = append(dst, groupedMagic...)
	for len(data) > 0 {
		n := min(len(data), groupedUnit)
		g.even, g.odd = split(data[:n], g.even[:0], g.odd[:0])
		dst = g.appendStream(dst, g.even)
		dst = g.appendStream(dst, g.odd)
		data = data[n:]
	}
	return dst
}

func (g *groupedCoder) appendStream(dst, s []byte) []byte {
	if len(s) < 32 {
		return append(append(dst, streamRaw), s...)
	}
	coded, _, err := huff0.Compress4X(s, &g.enc)
	switch {
	case err == nil && len(coded) < len(s):
		dst = binary.AppendUvarint(append(dst, streamHuffman), uint64(len(coded)))
		return append(dst, coded...)
	case errors.Is(err, huff0.ErrUseRLE):
		return append(dst, streamSame, s[0])
	default: // incompressible (huff0.ErrIncompressible) or no smaller
		return append(append(dst, streamRaw), s...)
	}
}

// decode decodes stored, a grouped chunk of raw bytes, into dst's backing
// array (grown as needed) and returns the chunk.
func (g *groupedCoder) decode(dst, stored []byte, raw int) ([]byte, error) {
	src := stored[len(groupedMagic):]
	if cap(dst) < raw {
		dst = make([]byte, raw)
	}
	dst = dst[:raw]
	for at := 0; at < raw; at += groupedUnit {
		n := min(raw-at, groupedUnit)
		var streams [2][]byte
		for i := range streams {
			var err error
			if streams[i], src, err = g.readStream(i, src, (n+1-i)/2); err != nil {
				return nil, fmt.Errorf("grouped bytes at %d: %w", at, err)
			}
		}
		interleave(dst[at:at+n], streams[0], streams[1])
	}
	if len(src) != 0 {
		return nil, fmt.Errorf("grouped bytes: %d bytes past the chunk's end", len(src))
	}
	return dst, nil
}

// readStream reads stream i (0 even, 1 odd) of size bytes from src and
// returns it and what follows it.
func (g *groupedCoder) readStream(i int, src []byte, size int) (stream, rest []byte, err error) {
	if len(src) == 0 {
		return nil, nil, errors.New("cut short")
	}
	kind, src := src[0], src[1:]
	switch kind {
	case streamRaw:
		if len(src) < size {
			return nil, nil, errors.New("cut short")
		}
		return src[:size], src[size:], nil
	case streamSame:
		if len(src) < 1 {
			return nil, nil, errors.New("cut short")
		}
		if cap(g.same[i]) < size {
			g.same[i] = make([]byte, groupedUnit)
		}
		out := g.same[i][:size]
		for j := range out {
			out[j] = src[0]
		}
		return out, src[1:], nil
	case streamHuffman:
		n, k := binary.Uvarint(src)
		if k <= 0 {
			return nil, nil, errors.New("bad Huffman stream length")
		}
		if n > uint64(len(src)-k) {
			return nil, nil, errors.New("cut short")
		}
		coded := src[k : k+int(n)]
		sc := &g.dec[i]
		sc.MaxDecodedSize = groupedUnit
		sc, body, err := huff0.ReadTable(coded, sc)
		if err != nil {
			return nil, nil, fmt.Errorf("the Huffman table: %w", err)
		}
		if cap(sc.Out) < size {
			sc.Out = make([]byte, groupedUnit)
		}
		out, err := sc.Decoder().Decompress4X(sc.Out[:0:size], body)
		if err != nil {
			return nil, nil, fmt.Errorf("the Huffman stream: %w", err)
		}
		if len(out) != size {
			return nil, nil, fmt.Errorf("a Huffman stream of %d bytes, want %d", len(out), size)
		}
		return out, src[k+int(n):], nil
	default:
		return nil, nil, fmt.Errorf("unknown stream kind %d", kind)
	}
}

// split appends data's bytes at even offsets to even and those at odd
// offsets to odd: 32 bytes at a time by splitBlocks, the rest one by one.
func split(data, even, odd []byte) ([]byte, []byte) {
	if n := len(data) / 32 * 32; n > 0 {
		e, o := len(even), len(odd)
		even, odd = slices.Grow(even, n/2)[:e+n/2], slices.Grow(odd, n/2)[:o+n/2]
		splitBlocks(data[:n], even[e:], odd[o:])
		data = data[n:]
	}
	for i, b := range data {
		if i%2 == 0 {
			even = append(even, b)
		} else {
			odd = append(odd, b)
		}
	}
	return even, odd
}

// splitWords is splitBlocks in portable Go, sixteen bytes at a time: data
// holds a multiple of 32 bytes, even and odd half as many each.
func splitWords(data, even, odd []byte) {
	for len(data) >= 16 {
		lo, hi := binary.LittleEndian.Uint64(data[:8]), binary.LittleEndian.Uint64(data[8:16])
		binary.LittleEndian.PutUint64(even, uint64(gather(lo))|uint64(gather(hi))<<32)
		binary.LittleEndian.PutUint64(odd, uint64(gather(lo>>8))|uint64(gather(hi>>8))<<32)
		data, even, odd = data[16:], even[8:], odd[8:]
	}
}

// interleave puts even's bytes at dst's even offsets and odd's at its odd
// ones: 32 bytes at a time by interleaveBlocks, the rest one by one;
// len(dst) is len(even)+len(odd), and even holds as many bytes as odd or
// one more.
func interleave(dst, even, odd []byte) {
	if n := len(odd) / 16 * 16; n > 0 {
		interleaveBlocks(dst[:2*n], even[:n], odd[:n])
		dst, even, odd = dst[2*n:], even[n:], odd[n:]
	}
	for i := range odd {
		dst[2*i], dst[2*i+1] = even[i], odd[i]
	}
	if len(even) > len(odd) {
		dst[2*len(odd)] = even[len(odd)]
	}
}

// interleaveWords is interleaveBlocks in portable Go, sixteen bytes at a
// time: even and odd hold the same multiple of 16 bytes, dst twice that.
func interleaveWords(dst, even, odd []byte) {
	for len(odd) >= 8 {
		e, o := binary.LittleEndian.Uint64(even[:8]), binary.LittleEndian.Uint64(odd[:8])
		binary.LittleEndian.PutUint64(dst[:8], scatter(uint32(e))|scatter(uint32(o))<<8)
		binary.LittleEndian.PutUint64(dst[8:16], scatter(uint32(e>>32))|scatter(uint32(o>>32))<<8)
		dst, even, odd = dst[16:], even[8:], odd[8:]
	}
}

// gather takes bytes 0, 2, 4 and 6 of w.
func gather(w uint64) uint32 {
	w &= 0x00ff00ff00ff00ff
	w = (w | w>>8) & 0x0000ffff0000ffff
	w = (w | w>>16) & 0x00000000ffffffff
	return uint32(w)
}

// scatter spreads x's four bytes to bytes 0, 2, 4 and 6.
func scatter(x uint32) uint64 {
	w := uint64(x)
	w = (w | w<<16) & 0x0000ffff0000ffff
	w = (w | w<<8) & 0x00ff00ff00ff00ff
	return w
}
