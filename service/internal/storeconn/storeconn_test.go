package storeconn_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service/internal/storeconn"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/local"
)

func TestAStoreOutOfReachIsOpenedInTheBackground(t *testing.T) {
	dir := t.TempDir()
	var tries atomic.Int32
	reachable := make(chan struct{})
	open := func(ctx context.Context) (*store.Repository, error) {
		tries.Add(1)
		select {
		case <-reachable:
			be, err := local.New(dir)
			if err != nil {
				return nil, err
			}
			return store.Init(ctx, be)
		default:
			return nil, errors.New("connection refused")
		}
	}
	c := storeconn.New("s3://bucket/stasis", nil, open)
	if !c.Configured() {
		t.Fatal("a store to open is not configured")
	}
	if err := c.Open(context.Background(), time.Second); err == nil {
		t.Fatal("opened a store out of reach")
	}
	_, err := c.Get()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "s3://bucket/stasis") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Get: %v, want unavailable naming the store and the cause", err)
	}
	st := c.Status()
	if st.Available || st.Failures != 1 || st.Error == "" {
		t.Fatalf("status %+v", st)
	}
	close(reachable)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.KeepOpening(ctx, slog.New(slog.DiscardHandler))
	// A Get asks the loop to try at once rather than after its wait.
	for {
		repo, err := c.Get()
		if err == nil && repo != nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the store never opened")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if st := c.Status(); !st.Available || st.Error != "" {
		t.Fatalf("status once open: %+v", st)
	}
}

func TestNoStore(t *testing.T) {
	c := storeconn.New("", nil, nil)
	repo, err := c.Get()
	if c.Configured() || repo != nil || err != nil {
		t.Fatalf("no store: configured %v, %v, %v", c.Configured(), repo, err)
	}
	if err := c.Open(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
}
