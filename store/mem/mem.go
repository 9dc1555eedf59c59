// Package mem is a store.Backend in memory, for fast tests of what runs
// over a repository (as restic's mem backend is): it passes the backend
// conformance suite, and keeps nothing after the process ends.
package mem

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
)

// Backend holds objects in a map. Safe for concurrent use.
type Backend struct {
	name string

	mu      sync.Mutex
	objects map[string][]byte
}

// New is an empty backend, named name in messages.
func New(name string) *Backend {
	return &Backend{name: name, objects: map[string][]byte{}}
}

// Location names the backend in messages.
func (b *Backend) Location() string { return "mem:" + b.name }

// Put stores the object once all size bytes are read: a source that fails
// or gives another size leaves the old object as it was.
func (b *Backend) Put(_ context.Context, key string, r io.Reader, size int64) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("%s: put %s: %w", b.Location(), key, err)
	}
	if int64(len(data)) != size {
		return errdefs.Mark(fmt.Errorf("%s: put %s: %d bytes given for %d declared", b.Location(), key, len(data), size), errdefs.ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objects[key] = data
	return nil
}

func (b *Backend) object(key string) ([]byte, error) {
	if err := store.CheckKey(key); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: %s: %w", b.Location(), key, store.ErrNotExist)
	}
	return data, nil
}

// Get reads length bytes of key from offset (to the end when length < 0).
func (b *Backend) Get(_ context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	data, err := b.object(key)
	if err != nil {
		return nil, err
	}
	if offset < 0 || offset > int64(len(data)) {
		return nil, errdefs.Mark(fmt.Errorf("%s: get %s: offset %d of %d bytes", b.Location(), key, offset, len(data)), errdefs.ErrInvalidArgument)
	}
	end := int64(len(data))
	if length >= 0 && offset+length < end {
		end = offset + length
	}
	return io.NopCloser(bytes.NewReader(data[offset:end])), nil
}

// Size is the object's size.
func (b *Backend) Size(_ context.Context, key string) (int64, error) {
	data, err := b.object(key)
	return int64(len(data)), err
}

// List calls fn with every key under prefix.
func (b *Backend) List(_ context.Context, prefix string, fn func(string, int64) error) error {
	if err := store.CheckPrefix(prefix); err != nil {
		return err
	}
	b.mu.Lock()
	sizes := map[string]int64{}
	for k, v := range b.objects {
		if strings.HasPrefix(k, prefix) {
			sizes[k] = int64(len(v))
		}
	}
	b.mu.Unlock()
	for k, n := range sizes {
		if err := fn(k, n); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes key; a missing key is no error.
func (b *Backend) Delete(_ context.Context, key string) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.objects, key)
	return nil
}
