package engine

import (
	"slices"
	"testing"

	"github.com/stasis-run/stasis/snapshot"
)

// TestJoinRanges: stretches sorted by path and offset, those of one file
// that overlap or lie at most firstReadsGap apart made one, others of it
// and of other files kept apart.
func TestJoinRanges(t *testing.T) {
	r := func(p string, off, n int64) snapshot.FileRange {
		return snapshot.FileRange{Path: p, Offset: off, Length: n}
	}
	got := joinRanges([]snapshot.FileRange{
		r("/b", 0, 10),
		r("/a", 1<<20, 4096),
		r("/a", 0, 8192),
		r("/a", 4096, 8192), // overlaps the one before
		r("/a", 12288+firstReadsGap, 100),
		r("/b", 10+firstReadsGap+1, 5), // one byte too far
	})
	want := []snapshot.FileRange{
		r("/a", 0, 12288+firstReadsGap+100),
		r("/a", 1<<20, 4096),
		r("/b", 0, 10),
		r("/b", 10+firstReadsGap+1, 5),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("joinRanges = %v, want %v", got, want)
	}
}
