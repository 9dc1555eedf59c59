package store

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

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
	// List calls fn with every key under prefix, a folder ("" or a key
	// ending in "/"), and its size, in no particular order.
	List(ctx context.Context, prefix string, fn func(key string, size int64) error) error
	// Delete removes key; deleting a missing key succeeds.
	Delete(ctx context.Context, key string) error
	// Location names the backend in messages.
	Location() string
}

// NodeDisk is implemented by a backend that can say whether its objects
// are read from this node's own disks (a folder store on a local file
// system), as a copy this node holds is: a pull then weighs the bytes each
// would read from them (archiver.Seed). A backend without it is taken to
// be elsewhere (an object store, a network file system).
type NodeDisk interface {
	OnNodeDisk() bool
}

// OnNodeDisk says whether b's objects are read from this node's own disks.
func OnNodeDisk(b Backend) bool {
	d, ok := b.(NodeDisk)
	return ok && d.OnNodeDisk()
}

// ErrNotExist is returned (wrapped) for a key with no object.
var ErrNotExist = errdefs.New(errdefs.ErrNotFound, "object does not exist")

// ErrInvalidKey is returned (wrapped) for a key that is not a clean
// relative slash path: empty, absolute, with empty, "." or ".." elements.
var ErrInvalidKey = errdefs.New(errdefs.ErrInvalidArgument, "invalid object key")

// CheckKey refuses a key that could name something outside a backend's
// root (a folder, a bucket prefix that a gateway maps onto a folder).
// Every backend calls it before acting on a key; the repository only makes
// clean keys, so a refusal means a bug or hostile input.
func CheckKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || path.Clean(key) != key || key == ".." || strings.HasPrefix(key, "../") {
		return fmt.Errorf("%w %q", ErrInvalidKey, key)
	}
	return nil
}

// CheckPrefix refuses a List prefix that is not "" or a clean key ending
// in "/".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") || CheckKey(strings.TrimSuffix(prefix, "/")) != nil {
		return fmt.Errorf("%w: list prefix %q must be \"\" or a folder such as \"data/\"", ErrInvalidKey, prefix)
	}
	return nil
}
