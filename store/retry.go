package store

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/stasis-run/stasis/errdefs"
)

// permanentError marks an error that a retry cannot fix.
type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

// Permanent marks err as one that retrying cannot fix, such as refused
// credentials.
func Permanent(err error) error { return permanentError{err} }

// IsPermanent tells whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// retrying is a Backend that retries failed calls with exponential backoff,
// except those that cannot succeed: a permanent error, one with a category
// other than unavailable (a missing object, an invalid key: errdefs), a
// cancelled context, or a Put whose reader cannot be rewound.
type retrying struct {
	Backend
	attempts int
	base     time.Duration
}

// WithRetry wraps be so that transient failures are retried: attempts in
// all, waiting base, 4*base, 16*base ... between them.
func WithRetry(be Backend, attempts int, base time.Duration) Backend {
	return &retrying{Backend: be, attempts: attempts, base: base}
}

func (r *retrying) do(ctx context.Context, fn func() error) error {
	wait := r.base
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(); err == nil || attempt >= r.attempts || !transient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
		wait *= 4
	}
}

// transient tells whether another try may succeed: the error has no
// category (a network failure, an I/O error) or says the service is
// unavailable, and is not marked Permanent.
func transient(err error) bool {
	return !IsPermanent(err) && (errdefs.Of(err) == errdefs.Internal || errors.Is(err, errdefs.ErrUnavailable))
}

func (r *retrying) Put(ctx context.Context, key string, rd io.Reader, size int64) error {
	seeker, rewindable := rd.(io.Seeker)
	first := true
	return r.do(ctx, func() error {
		if !first {
			if !rewindable {
				return Permanent(errors.New("the upload cannot be retried: its source cannot be rewound"))
			}
			if _, err := seeker.Seek(0, io.SeekStart); err != nil {
				return Permanent(err)
			}
		}
		first = false
		return r.Backend.Put(ctx, key, rd, size)
	})
}

func (r *retrying) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := r.do(ctx, func() error {
		var err error
		rc, err = r.Backend.Get(ctx, key, offset, length)
		return err
	})
	return rc, err
}

func (r *retrying) Size(ctx context.Context, key string) (int64, error) {
	var n int64
	err := r.do(ctx, func() error {
		var err error
		n, err = r.Backend.Size(ctx, key)
		return err
	})
	return n, err
}

func (r *retrying) Delete(ctx context.Context, key string) error {
	return r.do(ctx, func() error { return r.Backend.Delete(ctx, key) })
}
