package store

import (
	"context"
	"io"

	"github.com/stasis-run/stasis/errdefs"
)

// Backend is where a repository's objects live: a local folder, an S3
// bucket. Keys are slash-separated paths such as "data/ab/ab12…". Put must
// be atomic: a reader sees the whole object or none.
type Backend interface {
	// Put stores size bytes from r under key, replacing any object there.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get reads length bytes of key from offset; length < 0 reads to the end.
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Size is the object's size; ErrNotExist when there is none.
	Size(ctx context.Context, key string) (int64, error)
	// List calls fn with every key under prefix and its size.
	List(ctx context.Context, prefix string, fn func(key string, size int64) error) error
	// Delete removes key; deleting a missing key succeeds.
	Delete(ctx context.Context, key string) error
	// Location names the backend in messages.
	Location() string
}

// ErrNotExist is returned (wrapped) for a key with no object.
var ErrNotExist = errdefs.New(errdefs.ErrNotFound, "object does not exist")
