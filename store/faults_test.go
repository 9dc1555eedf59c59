package store_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

// faulty is a backend whose pack reads go wrong after some bytes, the way
// networks do: a reset connection, a body that ends early, a stall.
type faulty struct {
	store.Backend
	// fault makes the nth Get of more than faultAfter bytes of a pack go
	// wrong (nil: it reads fine); a smaller read (a pack of a small file)
	// is never broken, as no fault would strike it.
	fault func(n int) *fault
	mu    sync.Mutex
	gets  int
}

type fault struct {
	after int64 // bytes read before it goes wrong, at most faultAfter
	kind  string
}

// faultAfter is where the faults of TestReadsResumedWhereTheyBroke strike.
const faultAfter = 64 << 10

func (f *faulty) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if !strings.HasPrefix(key, "data/") || length <= faultAfter {
		return f.Backend.Get(ctx, key, offset, length)
	}
	f.mu.Lock()
	f.gets++
	n := f.gets
	f.mu.Unlock()
	fl := f.fault(n)
	if fl != nil && fl.kind == "silent" {
		// The connection taken, no answer ever.
		<-ctx.Done()
		return nil, ctx.Err()
	}
	rc, err := f.Backend.Get(ctx, key, offset, length)
	if err != nil || fl == nil {
		return rc, err
	}
	return &faultyBody{ReadCloser: rc, ctx: ctx, fault: *fl}, nil
}

type faultyBody struct {
	io.ReadCloser
	ctx   context.Context
	fault fault
	read  int64
}

func (b *faultyBody) Read(p []byte) (int, error) {
	if b.read >= b.fault.after {
		switch b.fault.kind {
		case "reset":
			return 0, errors.New("read tcp 127.0.0.1:9000: connection reset by peer")
		case "early":
			return 0, io.ErrUnexpectedEOF
		case "stall":
			<-b.ctx.Done()
			return 0, b.ctx.Err()
		}
	}
	if rest := b.fault.after - b.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	return n, err
}

// TestReadsResumedWhereTheyBroke: pack reads the network breaks (reset in
// the middle of a body, a body cut short, a stalled connection) are
// resumed from the byte they reached, a request that is never answered is
// asked again once the stall time has passed, and the restore is whole; a read that
// breaks in place every time is unavailable, naming the store and the
// cause; a pack really shorter than its index says is truncated (corrupt),
// not retried as a network fault.
func TestReadsResumedWhereTheyBroke(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	src := makeFolder(t, 8, 0, 5)
	r, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	policy := store.RetryPolicy{Attempts: 4, Backoff: time.Millisecond, Stall: 200 * time.Millisecond}
	open := func(fn func(n int) *fault) (*store.Repository, store.Backend) {
		t.Helper()
		rbe := store.WithRetry(&faulty{Backend: be, fault: fn}, policy)
		r, err := store.Open(ctx, rbe)
		if err != nil {
			t.Fatal(err)
		}
		return r, rbe
	}
	for _, kind := range []string{"reset", "early", "stall", "silent"} {
		t.Run(kind, func(t *testing.T) {
			// Every third read of a pack breaks faultAfter bytes in.
			r, rbe := open(func(n int) *fault {
				if n%3 == 1 {
					return &fault{after: faultAfter, kind: kind}
				}
				return nil
			})
			dst := filepath.Join(t.TempDir(), "out")
			start := time.Now()
			if err := archiver.Restore(ctx, r, "s", dst, archiver.Options{}); err != nil {
				t.Fatalf("restore through %s faults: %v", kind, err)
			}
			sameFiles(t, src, dst)
			st := store.Stats(rbe)
			stalls := kind == "stall" || kind == "silent"
			// An unanswered request is asked again, not resumed.
			again := st.ResumedReads
			if kind == "silent" {
				again = st.Retries
			}
			if again == 0 || stalls != (st.Stalls > 0) {
				t.Fatalf("stats after %s faults: %+v", kind, st)
			}
			if stalls && time.Since(start) > time.Minute {
				t.Fatalf("stalls cost %s: each should cost the stall time", time.Since(start))
			}
		})
	}
	// Broken in place, every time: given up after the attempts.
	r2, _ := open(func(int) *fault { return &fault{after: 0, kind: "reset"} })
	err = archiver.Restore(ctx, r2, "s", filepath.Join(t.TempDir(), "out"), archiver.Options{})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "connection reset") || !strings.Contains(err.Error(), "after 4 attempts") || !strings.Contains(err.Error(), root) {
		t.Fatalf("a read that always breaks: %v; want unavailable naming the store and the cause", err)
	}
	if strings.Contains(err.Error(), "truncated") {
		t.Fatalf("a network fault was called damage: %v", err)
	}
	// A pack that is really short: damage, said at once.
	pack := packFiles(t, root)[0]
	if err := os.Truncate(pack, 1000); err != nil {
		t.Fatal(err)
	}
	r3, _ := open(func(int) *fault { return nil })
	err = archiver.Restore(ctx, r3, "s", filepath.Join(t.TempDir(), "out"), archiver.Options{})
	if !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "is truncated") {
		t.Fatalf("a truncated pack through the retrying backend: %v; want corrupt, truncated", err)
	}
}
