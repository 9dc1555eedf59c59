package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
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

// RetryPolicy is how a backend's transient failures are retried.
type RetryPolicy struct {
	// Attempts is how many times a call is tried in all; a read broken in
	// the middle of its body counts one more each time it breaks before
	// it has read resumeCredit bytes more.
	Attempts int
	// Backoff is the wait after the first failure; each later one waits
	// twice the one before, up to MaxBackoff (no bound when zero). Each
	// wait is taken at random between half and all of it, so that the
	// calls a burst of failures struck together do not retry together.
	Backoff, MaxBackoff time.Duration
	// Stall, when positive, bounds how long a read may go without a byte:
	// a stalled request is cancelled and resumed where it stopped, so that
	// a hung connection costs this long per try, not the caller's whole
	// deadline.
	Stall time.Duration
}

// resumeCredit is how many bytes a broken read must have gained since it
// last broke for the break not to count against its attempts: a link that
// keeps breaking but moves on finishes, one that breaks in place gives up.
const resumeCredit = 1 << 20

// RetryStats counts what a retrying backend did about failures.
type RetryStats struct {
	// Retries counts calls tried again after a transient failure.
	Retries int64
	// ResumedReads counts reads broken in the middle of a body (a reset
	// connection, a stall) and resumed where they stopped.
	ResumedReads int64
	// Stalls counts reads cancelled for making no progress.
	Stalls int64
	// BytesReread counts bytes asked for again by resumed reads: with a
	// resume from where a read stopped, only the rest.
	BytesReread int64
}

// Since is what happened between before and s.
func (s RetryStats) Since(before RetryStats) RetryStats {
	return RetryStats{Retries: s.Retries - before.Retries, ResumedReads: s.ResumedReads - before.ResumedReads,
		Stalls: s.Stalls - before.Stalls, BytesReread: s.BytesReread - before.BytesReread}
}

// retrying is a Backend that retries failed calls with exponential backoff,
// except those that cannot succeed: a permanent error, one with a category
// other than unavailable (a missing object, an invalid key: errdefs), a
// cancelled context, or a Put whose reader cannot be rewound. A read that
// breaks in the middle of its body is resumed from the byte it reached.
type retrying struct {
	Backend
	policy RetryPolicy
	stats  struct{ retries, resumed, stalls, reread atomic.Int64 }
}

// WithRetry wraps be so that transient failures are retried as policy says
// (at least one attempt).
func WithRetry(be Backend, policy RetryPolicy) Backend {
	policy.Attempts = max(policy.Attempts, 1)
	return &retrying{Backend: be, policy: policy}
}

// OnNodeDisk is the wrapped backend's (NodeDisk).
func (r *retrying) OnNodeDisk() bool { return OnNodeDisk(r.Backend) }

// Stats is what the retrying backend be did about failures; the zero
// value for a backend without retries.
func Stats(be Backend) RetryStats {
	r, ok := be.(*retrying)
	if !ok {
		return RetryStats{}
	}
	return RetryStats{Retries: r.stats.retries.Load(), ResumedReads: r.stats.resumed.Load(), Stalls: r.stats.stalls.Load(), BytesReread: r.stats.reread.Load()}
}

func (r *retrying) do(ctx context.Context, fn func() error) error {
	wait := r.policy.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(); err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		if attempt >= r.policy.Attempts {
			return r.spent(err, attempt)
		}
		r.stats.retries.Add(1)
		if err := sleep(ctx, wait/2+rand.N(wait/2+1)); err != nil {
			return errors.Join(err, ctx.Err())
		}
		wait *= 2
		if m := r.policy.MaxBackoff; m > 0 && wait > m {
			wait = m
		}
	}
}

// spent is the error of a transient failure that outlasted the retries:
// unavailable, naming the store and the last error.
func (r *retrying) spent(err error, attempts int) error {
	return errdefs.Mark(fmt.Errorf("store %s did not answer after %d attempts: %w", r.Location(), attempts, err), errdefs.ErrUnavailable)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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

// Get opens the object for reading; the reader resumes a body that breaks
// (see resumingReader).
func (r *retrying) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	rr := &resumingReader{r: r, ctx: ctx, key: key, offset: offset, length: length, attempt: 1, freshAt: -1}
	if err := rr.open(); err != nil {
		return nil, err
	}
	return rr, nil
}

// resumingReader reads an object through the retrying backend. When the
// body breaks (a reset connection, a stall past the policy's Stall) it asks
// for the rest, from the byte it reached, within the policy's attempts: a
// broken connection is not damage. A body that ends cleanly before the
// bytes asked for ends the read there (io.EOF) once a fresh request from
// that byte gives nothing more: the object is short, which the caller
// calls truncated.
type resumingReader struct {
	r      *retrying
	ctx    context.Context
	key    string
	offset int64
	// length is how many bytes were asked for; < 0 to the end.
	length int64
	// pos is how many bytes have been read.
	pos int64
	// attempt counts the tries that count; credit is where the read stood
	// when it last broke.
	attempt, credit int64

	// freshAt is where the last request (other than the first) began:
	// a body that ends there, at once, says the object is short.
	freshAt int64
	// err is a failure to resume, given on the next Read.
	err error

	rc     io.ReadCloser
	cancel context.CancelFunc
	stall  *time.Timer
	// stalled is set when the watchdog cancelled the request.
	stalled atomic.Bool
}

// open asks for what is left, from the byte reached, retrying the request
// itself as any call.
func (rr *resumingReader) open() error {
	rest := int64(-1)
	if rr.length >= 0 {
		rest = rr.length - rr.pos
	}
	return rr.r.do(rr.ctx, func() error {
		actx, cancel := context.WithCancel(rr.ctx)
		rr.stalled.Store(false)
		// The watchdog covers the request as well as its body: a store
		// that takes the connection and never answers is a stall too.
		var stall *time.Timer
		if d := rr.r.policy.Stall; d > 0 {
			stall = time.AfterFunc(d, func() {
				rr.stalled.Store(true)
				cancel()
			})
		}
		rc, err := rr.r.Backend.Get(actx, rr.key, rr.offset+rr.pos, rest)
		if err != nil {
			if stall != nil {
				stall.Stop()
			}
			cancel()
			if rr.stalled.Load() && rr.ctx.Err() == nil {
				rr.r.stats.stalls.Add(1)
				return errdefs.Mark(fmt.Errorf("%s: no answer for %s: %w", rr.key, rr.r.policy.Stall, err), errdefs.ErrUnavailable)
			}
			return err
		}
		rr.rc, rr.cancel, rr.stall = rc, cancel, stall
		return nil
	})
}

func (rr *resumingReader) closeBody() {
	if rr.stall != nil {
		rr.stall.Stop()
	}
	if rr.rc != nil {
		rr.rc.Close()
		rr.cancel()
		rr.rc = nil
	}
}

func (rr *resumingReader) Read(p []byte) (int, error) {
	for {
		if rr.err != nil {
			return 0, rr.err
		}
		n, err := rr.rc.Read(p)
		rr.pos += int64(n)
		if n > 0 && rr.stall != nil {
			rr.stall.Reset(rr.r.policy.Stall)
		}
		if err == nil || errors.Is(err, io.EOF) && !rr.short() {
			return n, err
		}
		// The body ended before the bytes asked for, or broke.
		if errors.Is(err, io.EOF) && n == 0 && rr.freshAt == rr.pos {
			return 0, io.EOF // a fresh request from here gave nothing: the object is short
		}
		if rr.ctx.Err() != nil {
			return n, rr.ctx.Err()
		}
		if !errors.Is(err, io.EOF) && !transient(err) && !rr.stalled.Load() {
			return n, err
		}
		if rerr := rr.resume(err); rerr != nil {
			if n > 0 {
				rr.err = rerr
				return n, nil
			}
			return 0, rerr
		}
		if n > 0 {
			return n, nil
		}
	}
}

// short says whether a read asked for more than it has read.
func (rr *resumingReader) short() bool { return rr.length >= 0 && rr.pos < rr.length }

// resume asks for the rest after a body broke with cause: counted as an
// attempt unless it moved resumeCredit bytes since it last broke.
func (rr *resumingReader) resume(cause error) error {
	if rr.stalled.Load() {
		rr.r.stats.stalls.Add(1)
		cause = fmt.Errorf("no byte for %s: %w", rr.r.policy.Stall, cause)
	}
	rr.closeBody()
	if rr.pos-rr.credit < resumeCredit {
		rr.attempt++
	}
	rr.credit = rr.pos
	if rr.attempt > int64(rr.r.policy.Attempts) {
		return rr.r.spent(fmt.Errorf("%s broke at byte %d of the read from %d: %w", rr.key, rr.pos, rr.offset, cause), int(rr.attempt-1))
	}
	rr.r.stats.resumed.Add(1)
	if rr.length >= 0 {
		rr.r.stats.reread.Add(rr.length - rr.pos)
	}
	if err := rr.open(); err != nil {
		return err
	}
	rr.freshAt = rr.pos
	return nil
}

func (rr *resumingReader) Close() error {
	rr.closeBody()
	return nil
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

// List lists every key first, retried as a whole, then calls fn: a listing
// broken half way is not seen twice.
func (r *retrying) List(ctx context.Context, prefix string, fn func(string, int64) error) error {
	type entry struct {
		key  string
		size int64
	}
	var all []entry
	err := r.do(ctx, func() error {
		all = all[:0]
		return r.Backend.List(ctx, prefix, func(key string, size int64) error {
			all = append(all, entry{key, size})
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, e := range all {
		if err := fn(e.key, e.size); err != nil {
			return err
		}
	}
	return nil
}

func (r *retrying) Delete(ctx context.Context, key string) error {
	return r.do(ctx, func() error { return r.Backend.Delete(ctx, key) })
}
