package store

// splitBlocks and interleaveBlocks move 16 bytes of each stream per step
// in SSE2 registers (every amd64 has them): a pull spent a sixth of its
// CPU interleaving the streams word by word on the H200 machine.

// splitBlocks puts data's bytes at even offsets in even and those at odd
// offsets in odd; data holds a multiple of 32 bytes, even and odd half as
// many each.
func splitBlocks(data, even, odd []byte) {
	if len(data) == 0 {
		return
	}
	_, _ = even[len(data)/2-1], odd[len(data)/2-1]
	splitSSE2(&data[0], &even[0], &odd[0], len(data)/32)
}

// interleaveBlocks puts even's bytes at dst's even offsets and odd's at
// its odd ones; even and odd hold the same multiple of 16 bytes, dst
// twice that.
func interleaveBlocks(dst, even, odd []byte) {
	if len(odd) == 0 {
		return
	}
	_, _ = dst[2*len(odd)-1], even[len(odd)-1]
	interleaveSSE2(&dst[0], &even[0], &odd[0], len(odd)/16)
}

//go:noescape
func splitSSE2(data, even, odd *byte, blocks int)

//go:noescape
func interleaveSSE2(dst, even, odd *byte, blocks int)
