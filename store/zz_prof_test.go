package store_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/store"
)

func TestZZProfileSave(t *testing.T) {
	src := makeFolderZeros(t, 0, 2048, 7, 0)
	r, _ := newRepo(t)
	syscall.Sync()
	start := time.Now()
	if _, err := r.Save(context.Background(), "s", src, store.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f MB/s", 2048*1.048576/time.Since(start).Seconds())
}
