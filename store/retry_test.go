package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/backendtest"
	"github.com/stasis-run/stasis/store/local"
)

// flaky fails the first failures calls of Put with err.
type flaky struct {
	store.Backend
	failures int
	err      error
	calls    int
	got      []string
}

func (f *flaky) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	f.calls++
	data, _ := io.ReadAll(r)
	f.got = append(f.got, string(data))
	if f.calls <= f.failures {
		return f.err
	}
	return f.Backend.Put(ctx, key, bytes.NewReader(data), size)
}

func TestRetryRewindsAndGivesUpOnPermanentErrors(t *testing.T) {
	ctx := context.Background()
	be, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Backend: be, failures: 2, err: errors.New("connection reset")}
	r := store.WithRetry(f, store.RetryPolicy{Attempts: 4, Backoff: time.Millisecond})
	if err := r.Put(ctx, "k", strings.NewReader("payload"), 7); err != nil {
		t.Fatalf("a transient failure was not retried: %v", err)
	}
	if f.calls != 3 || f.got[2] != "payload" {
		t.Errorf("%d calls, bodies %q: the retry must resend the whole body", f.calls, f.got)
	}

	f = &flaky{Backend: be, failures: 5, err: store.Permanent(errors.New("credentials refused"))}
	r = store.WithRetry(f, store.RetryPolicy{Attempts: 4, Backoff: time.Millisecond})
	if err := r.Put(ctx, "k", strings.NewReader("x"), 1); err == nil || f.calls != 1 {
		t.Errorf("a permanent error was retried: %d calls, %v", f.calls, err)
	}
	if _, err := r.Size(ctx, "missing"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("size of a missing key: %v", err)
	}
}

// unreliable fails the first try of every call with a transient error and
// then delegates, so the retry wrapper over it must behave as the backend.
type unreliable struct {
	store.Backend
	tries map[string]int
}

func (u *unreliable) fail(call, key string) error {
	u.tries[call+" "+key]++
	if u.tries[call+" "+key]%2 == 1 {
		return errors.New("connection reset by peer")
	}
	return nil
}

func (u *unreliable) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := u.fail("put", key); err != nil {
		return err
	}
	return u.Backend.Put(ctx, key, r, size)
}

func (u *unreliable) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := u.fail("get", key); err != nil {
		return nil, err
	}
	return u.Backend.Get(ctx, key, offset, length)
}

func (u *unreliable) Size(ctx context.Context, key string) (int64, error) {
	if err := u.fail("size", key); err != nil {
		return 0, err
	}
	return u.Backend.Size(ctx, key)
}

func (u *unreliable) Delete(ctx context.Context, key string) error {
	if err := u.fail("delete", key); err != nil {
		return err
	}
	return u.Backend.Delete(ctx, key)
}

// TestRetryConformance runs the backend suite on the retry wrapper over a
// backend whose every call fails once before it works.
func TestRetryConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) store.Backend {
		be, err := local.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return store.WithRetry(&unreliable{Backend: be, tries: map[string]int{}}, store.RetryPolicy{Attempts: 3, Backoff: time.Millisecond})
	})
}
