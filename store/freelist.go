package store

import "context"

// freeList hands out reusable values: up to size of them exist, each made
// when first needed, and a get while all are out waits for a put, so the
// pipeline's buffers stay within the sizes ingest gives, whatever the pace
// of its stages.
type freeList[T any] struct {
	free  chan T
	make  chan struct{} // a token for each value that may still be made
	fresh func() T
}

func newFreeList[T any](size int, fresh func() T) *freeList[T] {
	f := &freeList[T]{free: make(chan T, size), make: make(chan struct{}, size), fresh: fresh}
	for range size {
		f.make <- struct{}{}
	}
	return f
}

func (f *freeList[T]) get(ctx context.Context) (T, error) {
	select {
	case v := <-f.free:
		return v, nil
	default:
	}
	select {
	case v := <-f.free:
		return v, nil
	case <-f.make:
		return f.fresh(), nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// put returns a value; it never blocks, since no more values exist than
// the list holds.
func (f *freeList[T]) put(v T) { f.free <- v }
