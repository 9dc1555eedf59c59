//go:build !amd64

package store

func splitBlocks(data, even, odd []byte) { splitWords(data, even, odd) }

func interleaveBlocks(dst, even, odd []byte) { interleaveWords(dst, even, odd) }
