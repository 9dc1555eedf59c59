package local_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/backendtest"
	"github.com/stasis-run/stasis/store/local"
	"github.com/stasis-run/stasis/testkit/testdisk"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) store.Backend {
		be, err := local.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return be
	})
}

// TestFullDiskIsResourceExhausted: a put onto a full disk fails as
// resource_exhausted, naming the store, so that it is not retried as a
// store out of reach; with room again, the same put goes through.
func TestFullDiskIsResourceExhausted(t *testing.T) {
	dir := t.TempDir()
	testdisk.Tmpfs(t, dir, "4m")
	be, err := local.New(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	testdisk.Fill(t, filler)
	for _, size := range []int{4 << 10, 2 << 20} { // through the page cache, and around it
		data := bytes.Repeat([]byte{7}, size)
		err := be.Put(context.Background(), "data/pack-"+strconv.Itoa(size), bytes.NewReader(data), int64(size))
		if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "is full") {
			t.Fatalf("a put of %d bytes onto a full disk: %v; want resource_exhausted", size, err)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := be.Put(context.Background(), "data/pack-1", bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatalf("a put with room again: %v", err)
	}
}
