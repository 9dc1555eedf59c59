package store

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// bf16Weights is n bytes of bf16 values drawn from N(0, 0.02), rounded as
// torch rounds float32 to bf16: a randomly initialised model's weights.
func bf16Weights(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i+2 <= n; i += 2 {
		u := math.Float32bits(float32(r.NormFloat64() * 0.02))
		u = (u + 0x7fff + (u>>16)&1) >> 16
		binary.LittleEndian.PutUint16(b[i:], uint16(u))
	}
	return b
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

func groupedInputs() map[string][]byte {
	random := randomBytes(300 << 10)
	weights := bf16Weights(1, 1<<20+3)
	return map[string][]byte{
		"empty":             {},
		"one byte":          {7},
		"short":             weights[:31],
		"weights":           weights,
		"weights, odd cut":  weights[1 : 2*groupedUnit+1],
		"one unit":          weights[:groupedUnit],
		"a unit and a byte": weights[:groupedUnit+1],
		"zeros":             make([]byte, 3*groupedUnit+5),
		"random":            random,
		"text":              []byte(strings.Repeat("the same bytes again and again, ", 9000)),
	}
}

func TestGroupedRoundTrip(t *testing.T) {
	var g groupedCoder
	for name, data := range groupedInputs() {
		enc := g.encode(nil, data)
		if !isGrouped(enc) {
			t.Fatalf("%s: the encoding does not start with the magic", name)
		}
		// Decode into a buffer that holds something else: nothing of it may
		// show through.
		dst := bytes.Repeat([]byte{0xee}, len(data)/2)
		got, err := g.decode(dst, enc, len(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: the round trip changed the bytes", name)
		}
	}
}

// TestGroupedShrinksWeights is why the encoding exists: bf16 weights, which
// zstd stores as they are, lose about a third of their bytes, wherever the
// chunk was cut.
func TestGroupedShrinksWeights(t *testing.T) {
	var g groupedCoder
	weights := bf16Weights(2, 4<<20)
	for _, off := range []int{0, 1} {
		data := weights[off:]
		ratio := float64(len(g.encode(nil, data))) / float64(len(data))
		if ratio > 0.72 {
			t.Errorf("cut at offset %d: grouped bytes are %.3f of the weights, want at most 0.72", off, ratio)
		}
		t.Logf("cut at offset %d: %.3f", off, ratio)
	}
	random := randomBytes(1 << 20)
	if n := len(g.encode(nil, random)); n > len(random)+len(random)/1000+len(groupedMagic) {
		t.Errorf("bytes Huffman cannot shrink grew from %d to %d", len(random), n)
	}
}

func TestGroupedRefusesDamage(t *testing.T) {
	var g groupedCoder
	data := bf16Weights(4, groupedUnit+1000)
	enc := g.encode(nil, data)
	for _, c := range []struct {
		name   string
		stored []byte
		raw    int
		want   string
	}{
		{"cut short", enc[:len(enc)-1], len(data), "cut short"},
		{"only the magic", enc[:len(groupedMagic)], len(data), "cut short"},
		{"a byte too many", append(bytes.Clone(enc), 0), len(data), "past the chunk's end"},
		{"longer than stored", enc, len(data) + 4096, "cut short"},
		{"unknown stream", append([]byte(groupedMagic), 9, 1, 2), 4, "unknown stream kind 9"},
		{"huge Huffman length", append([]byte(groupedMagic), streamHuffman, 0xff, 0xff, 0xff, 0x7f), 4, "cut short"},
		{"bad Huffman length", append([]byte(groupedMagic), streamHuffman, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 4, "bad Huffman stream length"},
		{"bad Huffman table", append([]byte(groupedMagic), streamHuffman, 2, 0xff, 0xff), 64, "Huffman"},
	} {
		_, err := g.decode(nil, c.stored, c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// A flipped bit in a Huffman stream either fails or gives other
	// bytes, which the chunk's hash then refuses; it never panics.
	for i := len(groupedMagic); i < len(enc); i += 97 {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x10
		if got, err := g.decode(nil, bad, len(data)); err == nil && len(got) != len(data) {
			t.Fatalf("flipped byte %d: %d bytes decoded, want %d or an error", i, len(got), len(data))
		}
	}
}

func FuzzGroupedDecode(f *testing.F) {
	var g groupedCoder
	for _, data := range groupedInputs() {
		f.Add(g.encode(nil, data), len(data))
	}
	f.Fuzz(func(t *testing.T, stored []byte, raw int) {
		if raw < 0 || raw > 1<<20 || !isGrouped(stored) {
			return
		}
		var g groupedCoder
		got, err := g.decode(nil, stored, raw)
		if err == nil && len(got) != raw {
			t.Fatalf("decoded %d bytes, want %d", len(got), raw)
		}
	})
}

func BenchmarkGrouped(b *testing.B) {
	weights := bf16Weights(5, 1<<20)
	var g groupedCoder
	enc := g.encode(nil, weights)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(weights)))
		for b.Loop() {
			g.out = g.encode(g.out[:0], weights)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(weights)))
		dst := make([]byte, len(weights))
		for b.Loop() {
			if _, err := g.decode(dst, enc, len(weights)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestBlocksMatchWords: the streams split and interleaved by the
// architecture's blocks (SSE2 on amd64) are those of the portable code,
// for every size and alignment up to a few blocks.
func TestBlocksMatchWords(t *testing.T) {
	data := randomBytes(32*9 + 7)
	for off := range 7 {
		for n := 0; off+n <= len(data); n += 32 {
			in := data[off : off+n]
			even, odd := make([]byte, n/2), make([]byte, n/2)
			wantEven, wantOdd := make([]byte, n/2), make([]byte, n/2)
			splitBlocks(in, even, odd)
			splitWords(in, wantEven, wantOdd)
			if !bytes.Equal(even, wantEven) || !bytes.Equal(odd, wantOdd) {
				t.Fatalf("split of %d bytes at %d: the blocks differ from the words", n, off)
			}
			out, want := make([]byte, n+1), make([]byte, n+1)
			out[n], want[n] = 0xee, 0xee // nothing written past dst
			interleaveBlocks(out[:n], even, odd)
			interleaveWords(want[:n], even, odd)
			if !bytes.Equal(out, want) || !bytes.Equal(out[:n], in) {
				t.Fatalf("interleave of %d bytes at %d: the blocks differ from the words or the input", n, off)
			}
		}
	}
}
