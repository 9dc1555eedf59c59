package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/backendtest"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/store/s3"
	"github.com/stasis-run/stasis/testkit/faultproxy"
	"github.com/stasis-run/stasis/testkit/s3test"
)

func TestBackendAgainstVersitygw(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	be, err := location.Open(ctx, srv.Location("objects"), srv.Env)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("0123456789abcdef")
	if err := be.Put(ctx, "data/ab/pack", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rc, err := be.Get(ctx, "data/ab/pack", 4, 6)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "456789" {
		t.Fatalf("range read %q %v", got, err)
	}
	if n, err := be.Size(ctx, "data/ab/pack"); n != 16 || err != nil {
		t.Errorf("size %d %v", n, err)
	}
	var keys []string
	if err := be.List(ctx, "data/", func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil || len(keys) != 1 || keys[0] != "data/ab/pack" {
		t.Errorf("list %v %v", keys, err)
	}
	if _, err := be.Size(ctx, "nothing"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("size of a missing key: %v", err)
	}
	rc, err = be.Get(ctx, "nothing", 0, -1)
	if err == nil {
		_, err = io.ReadAll(rc)
	}
	if !errors.Is(err, store.ErrNotExist) {
		t.Errorf("get of a missing key: %v", err)
	}
	if err := be.Delete(ctx, "data/ab/pack"); err != nil {
		t.Fatal(err)
	}
}

func TestWrongCredentialsAreNamed(t *testing.T) {
	srv := s3test.Start(t)
	env := func(k string) string {
		if k == "AWS_SECRET_ACCESS_KEY" {
			return "wrong"
		}
		return srv.Env(k)
	}
	_, err := location.Open(context.Background(), srv.Location("objects"), env)
	if err == nil || !strings.Contains(err.Error(), "credentials were refused") || !store.IsPermanent(err) {
		t.Fatalf("got %v", err)
	}
}

func TestRepositoryOnS3(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	be, err := location.Open(ctx, srv.Location("repo"), srv.Env)
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	payload := bytes.Repeat([]byte("stasis snapshot "), 1<<18)
	if err := os.WriteFile(filepath.Join(src, "pages.img"), payload, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Commit(ctx, src, snapshot.Manifest{Scope: snapshot.ScopeFull}); err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, r, "s3-actor", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	r2, err := store.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r2, "s3-actor", dst, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Verify(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if err := r2.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConformance runs the backend suite against a real S3 server, each
// case in a bucket of its own.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	buckets := 0
	backendtest.Run(t, func(t *testing.T) store.Backend {
		buckets++
		be, err := location.Open(context.Background(), srv.Location(fmt.Sprintf("conformance-%d", buckets)), srv.Env)
		if err != nil {
			t.Fatal(err)
		}
		return be
	})
}

// proxied starts versitygw and a fault proxy in front of it.
func proxied(t *testing.T) (*s3test.Server, *faultproxy.Proxy) {
	srv := s3test.Start(t)
	proxy, err := faultproxy.Start("http://"+srv.Endpoint, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return srv, proxy
}

// openThrough opens bucket on srv through proxy.
func openThrough(t *testing.T, srv *s3test.Server, proxy *faultproxy.Proxy, bucket string, noTrailer bool) *s3.Backend {
	be, err := s3.New(context.Background(), s3.Config{Endpoint: proxy.Addr, Insecure: true, Bucket: bucket, Prefix: "repo",
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, CreateBucket: true, NoTrailer: noTrailer})
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// TestBodyChecked: a PUT's body is checked by the server on the way in, by
// a CRC32C trailer where the server takes one and by signed chunks where
// it refuses trailers; a body damaged on the way is refused either way and
// nothing is stored.
func TestBodyChecked(t *testing.T) {
	ctx := context.Background()
	srv, proxy := proxied(t)
	payload := bytes.Repeat([]byte("stasis pack bytes "), 16<<10)
	for _, tc := range []struct {
		name      string
		faults    faultproxy.Faults
		noTrailer bool // asked for in the location
		check     string
	}{
		{"trailer", faultproxy.Faults{}, false, "crc32c trailer"},
		{"no-trailers", faultproxy.Faults{RefuseTrailers: true}, false, "signed chunks"},
		{"asked-no-trailer", faultproxy.Faults{RefuseTrailers: true}, true, "signed chunks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy.Set(tc.faults)
			_, _, _, refusedBefore := proxy.Counts()
			be := openThrough(t, srv, proxy, "body-"+tc.name, tc.noTrailer)
			before := ""
			if tc.noTrailer {
				before = tc.check
			}
			if got := be.BodyCheck(); got != before {
				t.Fatalf("body check %q before the first write, want %q", got, before)
			}
			if err := be.Put(ctx, "data/00/whole", bytes.NewReader(payload), int64(len(payload))); err != nil {
				t.Fatal(err)
			}
			if got := be.BodyCheck(); got != tc.check {
				t.Fatalf("body check %q, want %q", got, tc.check)
			}
			// Asked for no trailer, it sent none to be refused.
			if _, _, _, refused := proxy.Counts(); tc.noTrailer && refused != refusedBefore {
				t.Fatalf("%d requests with a trailer", refused-refusedBefore)
			}
			rc, err := be.Get(ctx, "data/00/whole", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("read back %d bytes (%v), wrote %d", len(got), err, len(payload))
			}
			// Only the object written is there: the test's object is gone.
			var keys []string
			if err := be.List(ctx, "", func(k string, _ int64) error { keys = append(keys, k); return nil }); err != nil || len(keys) != 1 {
				t.Fatalf("objects %v %v", keys, err)
			}

			f := tc.faults
			f.CorruptPuts = true
			proxy.Set(f)
			err = be.Put(ctx, "data/00/damaged", bytes.NewReader(payload), int64(len(payload)))
			if proxy.Corrupted() == 0 {
				t.Fatal("the proxy damaged no body")
			}
			if err == nil {
				t.Fatal("a body damaged on the way was stored")
			}
			if _, err := be.Size(ctx, "data/00/damaged"); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("the damaged object: %v", err)
			}
			if got := be.BodyCheck(); got != tc.check {
				t.Fatalf("body check %q after a refused body, want %q", got, tc.check)
			}
		})
	}
}

func TestTrailerInLocation(t *testing.T) {
	srv := s3test.Start(t)
	_, err := location.Open(context.Background(), srv.Location("objects")+"&trailer=maybe", srv.Env)
	if err == nil || !strings.Contains(err.Error(), `trailer="maybe": want true or false`) {
		t.Fatalf("got %v", err)
	}
	if _, err := location.Open(context.Background(), srv.Location("objects")+"&trailer=false", srv.Env); err != nil {
		t.Fatal(err)
	}
}

// TestBodyCheckHangs: while the server hangs in the middle of the test of
// its bodies, the Put that runs the test and those that wait for it give
// up with their contexts, nothing is decided, and the next Put once the
// server answers tests it again.
func TestBodyCheckHangs(t *testing.T) {
	ctx := context.Background()
	srv, proxy := proxied(t)
	be := openThrough(t, srv, proxy, "body-hangs", false)
	// The test's read of what it wrote never gets a byte.
	proxy.Set(faultproxy.Faults{StallEvery: 1, Breakable: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "stasis-body-check-") }})
	payload := []byte("a pack")
	put := func(ctx context.Context, i int, errs chan<- error) {
		errs <- be.Put(ctx, fmt.Sprintf("data/00/p%d", i), bytes.NewReader(payload), int64(len(payload)))
	}
	// The first Put runs the test and hangs in it until cancelled.
	testCtx, cancelTest := context.WithCancel(ctx)
	defer cancelTest()
	tested := make(chan error, 1)
	go put(testCtx, 0, tested)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, stalls, _, _ := proxy.Counts(); stalls > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the test of the server's bodies did not reach its read")
		}
	}
	// The others wait for its answer, until their deadlines.
	waited := make(chan error, 2)
	for i := 1; i <= 2; i++ {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		go put(wctx, i, waited)
	}
	for range 2 {
		select {
		case err := <-waited:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a Put waiting on the test: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a Put waiting on a hung test did not give up with its context")
		}
	}
	select {
	case err := <-tested:
		t.Fatalf("the Put that tests returned while the server hangs: %v", err)
	default:
	}
	cancelTest()
	if err := <-tested; err == nil {
		t.Fatal("the Put that tests succeeded while the server hung")
	}
	if got := be.BodyCheck(); got != "" {
		t.Fatalf("decided %q from a test that got no answer", got)
	}
	proxy.Set(faultproxy.Faults{})
	if err := be.Put(ctx, "data/00/p", bytes.NewReader(payload), int64(len(payload))); err != nil {
		t.Fatal(err)
	}
	if got := be.BodyCheck(); got != "crc32c trailer" {
		t.Fatalf("body check %q once the server answered", got)
	}
}
