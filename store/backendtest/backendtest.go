// Package backendtest is the conformance suite of store.Backend: what the
// repository relies on from every place objects live, run against each
// backend (local folder, S3, the retry wrapper) by its own tests, in the
// manner of restic's internal/backend/test.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
)

// Run runs the suite; open gives each case an empty backend of the kind
// under test.
func Run(t *testing.T, open func(t *testing.T) store.Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, be store.Backend)
	}{
		{"PutGetAndRanges", putGetAndRanges},
		{"EmptyObject", emptyObject},
		{"PutReplaces", putReplaces},
		{"Missing", missing},
		{"List", list},
		{"Delete", deleteObject},
		{"FailedPutLeavesTheOldObject", failedPut},
		{"WrongSizeIsRefused", shortReader},
		{"InvalidKeysAreRefused", invalidKeys},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func put(t *testing.T, be store.Backend, key string, data []byte) {
	t.Helper()
	if err := be.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// get reads a range; a backend may report an error at Get or at the read.
func get(be store.Backend, key string, offset, length int64) ([]byte, error) {
	rc, err := be.Get(context.Background(), key, offset, length)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func mustGet(t *testing.T, be store.Backend, key string, offset, length int64) []byte {
	t.Helper()
	data, err := get(be, key, offset, length)
	if err != nil {
		t.Fatalf("get %s [%d, +%d): %v", key, offset, length, err)
	}
	return data
}

func listAll(t *testing.T, be store.Backend, prefix string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	err := be.List(context.Background(), prefix, func(key string, size int64) error {
		if _, dup := got[key]; dup {
			return fmt.Errorf("key %s listed twice", key)
		}
		got[key] = size
		return nil
	})
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	return got
}

func putGetAndRanges(t *testing.T, be store.Backend) {
	data := payload(3 << 20)
	put(t, be, "data/ab/pack", data)
	if got := mustGet(t, be, "data/ab/pack", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("whole object: %d bytes back of %d, equal %v", len(got), len(data), bytes.Equal(got, data))
	}
	for _, r := range []struct{ offset, length int64 }{{0, 1}, {10, 20}, {1 << 20, 1 << 20}, {int64(len(data)) - 5, 5}, {int64(len(data)) - 5, -1}, {7, 0}} {
		want := data[r.offset:]
		if r.length >= 0 {
			want = want[:r.length]
		}
		if got := mustGet(t, be, "data/ab/pack", r.offset, r.length); !bytes.Equal(got, want) {
			t.Errorf("range [%d, +%d): %d bytes back, want %d", r.offset, r.length, len(got), len(want))
		}
	}
	if n, err := be.Size(context.Background(), "data/ab/pack"); err != nil || n != int64(len(data)) {
		t.Errorf("size %d %v, want %d", n, err, len(data))
	}
}

func emptyObject(t *testing.T, be store.Backend) {
	put(t, be, "locks/empty", nil)
	if got := mustGet(t, be, "locks/empty", 0, -1); len(got) != 0 {
		t.Errorf("empty object reads %d bytes", len(got))
	}
	if n, err := be.Size(context.Background(), "locks/empty"); err != nil || n != 0 {
		t.Errorf("size %d %v", n, err)
	}
	if got := listAll(t, be, "locks/"); !maps.Equal(got, map[string]int64{"locks/empty": 0}) {
		t.Errorf("list %v", got)
	}
}

func putReplaces(t *testing.T, be store.Backend) {
	put(t, be, "index/one", []byte("the first, longer version"))
	put(t, be, "index/one", []byte("second"))
	if got := mustGet(t, be, "index/one", 0, -1); string(got) != "second" {
		t.Errorf("after the second put: %q", got)
	}
	if n, _ := be.Size(context.Background(), "index/one"); n != 6 {
		t.Errorf("size %d after the second put", n)
	}
}

func missing(t *testing.T, be store.Backend) {
	ctx := context.Background()
	if _, err := be.Size(ctx, "data/no/such"); !errors.Is(err, store.ErrNotExist) || errdefs.Code(err) != "not_found" {
		t.Errorf("size of a missing key: %v, want store.ErrNotExist (not_found)", err)
	}
	if _, err := get(be, "data/no/such", 0, -1); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("get of a missing key: %v, want store.ErrNotExist", err)
	}
	if err := be.Delete(ctx, "data/no/such"); err != nil {
		t.Errorf("delete of a missing key: %v, want success", err)
	}
	if got := listAll(t, be, "data/"); len(got) != 0 {
		t.Errorf("an empty backend lists %v", got)
	}
}

func list(t *testing.T, be store.Backend) {
	objects := map[string]int64{"data/aa/1": 1, "data/ab/2": 2, "data/ab/3": 3, "index/4": 4, "snapshots/a.b/5": 5}
	for key, size := range objects {
		put(t, be, key, payload(int(size)))
	}
	want := map[string]int64{"data/aa/1": 1, "data/ab/2": 2, "data/ab/3": 3}
	if got := listAll(t, be, "data/"); !maps.Equal(got, want) {
		t.Errorf("list data/: %v, want %v", got, want)
	}
	if got := listAll(t, be, "data/ab/"); !maps.Equal(got, map[string]int64{"data/ab/2": 2, "data/ab/3": 3}) {
		t.Errorf("list data/ab/: %v", got)
	}
	if got := listAll(t, be, ""); !maps.Equal(got, objects) {
		t.Errorf("list of everything: %v, want %v", got, objects)
	}
	if got := listAll(t, be, "locks/"); len(got) != 0 {
		t.Errorf("list of an empty folder: %v", got)
	}
	stop := errors.New("stop here")
	calls := 0
	err := be.List(context.Background(), "data/", func(string, int64) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("list whose callback fails: %d calls, %v; want 1 call and the callback's error", calls, err)
	}
}

func deleteObject(t *testing.T, be store.Backend) {
	put(t, be, "data/aa/1", []byte("x"))
	put(t, be, "data/aa/2", []byte("y"))
	if err := be.Delete(context.Background(), "data/aa/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := be.Size(context.Background(), "data/aa/1"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("size after delete: %v", err)
	}
	if got := listAll(t, be, "data/"); !maps.Equal(got, map[string]int64{"data/aa/2": 1}) {
		t.Errorf("list after delete: %v", got)
	}
}

// failingReader gives n bytes of payload and then an error, as a network
// source that breaks half way.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func failedPut(t *testing.T, be store.Backend) {
	old := []byte("the object as it was")
	put(t, be, "index/obj", old)
	broken := errors.New("the source broke")
	err := be.Put(context.Background(), "index/obj", &failingReader{data: payload(1 << 20), err: broken}, 2<<20)
	if err == nil {
		t.Fatal("a put whose source failed half way succeeded")
	}
	if got := mustGet(t, be, "index/obj", 0, -1); !bytes.Equal(got, old) {
		t.Errorf("after the failed put the object reads %d bytes, want the old %d", len(got), len(old))
	}
	if got := listAll(t, be, ""); !maps.Equal(got, map[string]int64{"index/obj": int64(len(old))}) {
		t.Errorf("after the failed put the backend lists %v", got)
	}
}

func shortReader(t *testing.T, be store.Backend) {
	err := be.Put(context.Background(), "data/ab/short", bytes.NewReader(payload(100)), 200)
	if errdefs.Code(err) != "invalid_argument" {
		t.Fatalf("a put of 100 bytes declared as 200: %v, want an invalid_argument error", err)
	}
	err = be.Put(context.Background(), "data/ab/long", bytes.NewReader(payload(300)), 200)
	if errdefs.Code(err) != "invalid_argument" {
		t.Fatalf("a put of 300 bytes declared as 200: %v, want an invalid_argument error", err)
	}
	if _, err := be.Size(context.Background(), "data/ab/long"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("after the long put: %v, want no object", err)
	}
	if _, err := be.Size(context.Background(), "data/ab/short"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("after the short put: %v, want no object", err)
	}
}

func invalidKeys(t *testing.T, be store.Backend) {
	ctx := context.Background()
	for _, key := range []string{"", "/etc/passwd", "../outside", "data/../../outside", "data//x", "data/./x", "data/x/", ".."} {
		err := be.Put(ctx, key, bytes.NewReader([]byte("x")), 1)
		if !errors.Is(err, store.ErrInvalidKey) || errdefs.Code(err) != "invalid_argument" {
			t.Errorf("put %q: %v, want store.ErrInvalidKey (invalid_argument)", key, err)
		}
		for name, err := range map[string]error{
			"size":   func() error { _, err := be.Size(ctx, key); return err }(),
			"get":    func() error { _, err := get(be, key, 0, -1); return err }(),
			"delete": be.Delete(ctx, key),
		} {
			if !errors.Is(err, store.ErrInvalidKey) {
				t.Errorf("%s %q: %v, want store.ErrInvalidKey", name, key, err)
			}
		}
	}
	for _, prefix := range []string{"../", "/", "data", "data/../../", "data//"} {
		if err := be.List(ctx, prefix, func(string, int64) error { return nil }); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("list %q: %v, want store.ErrInvalidKey", prefix, err)
		}
	}
	if got := listAll(t, be, ""); len(got) != 0 {
		t.Errorf("refused keys left objects: %v", got)
	}
}
