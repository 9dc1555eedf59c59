package engine

import (
	"context"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/runtime"
)

// ReadMappedPieces reads, as Prefetch does beside a restore but before it
// returns, at most max bytes of the mapped files found through the bundle
// at dir: the bytes read, the bytes asked for and of how many files.
func ReadMappedPieces(ctx context.Context, spec *specs.Spec, dir string, mapped []runtime.MappedFile, max int64) (read, size int64, files int) {
	pieces, size, files := mappedPieces(spec, dir, mapped, max)
	return readPieces(ctx, pieces), size, files
}

// FirstRanges keeps the first max ranges of files.
var FirstRanges = firstRanges
