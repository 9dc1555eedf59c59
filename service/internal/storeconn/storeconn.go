// Package storeconn holds stasisd's snapshot store, which may be out of
// reach when stasisd starts or at any time after, and opens it in the
// background.
package storeconn

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
)

// Conn is stasisd's snapshot store, which may be out of reach when
// stasisd starts or at any time after (a remote bucket that is down, a
// damaged config): stasisd serves all the same. Actors run, pause, resume
// from their local snapshots and are removed; what needs the store says it
// is unavailable and why, and the store is opened again in the background.
type Conn struct {
	location string
	open     func(context.Context) (*store.Repository, error)

	mu   sync.Mutex
	repo *store.Repository
	// err is why the last try to open it failed, since when it has been
	// out of reach, and how many tries failed.
	err      error
	since    time.Time
	failures int
	// kick asks the background loop to try again now.
	kick chan struct{}
}

// retryMax bounds the wait between tries to open the store: 1 s, 2 s,
// 4 s ... up to it.
const retryMax = 30 * time.Second

// New is the store at location: repo, open already, or opened by open
// when it can (Open, KeepOpening). Neither: no store (--no-store).
func New(location string, repo *store.Repository, open func(context.Context) (*store.Repository, error)) *Conn {
	c := &Conn{location: location, open: open, repo: repo, kick: make(chan struct{}, 1)}
	if c.repo != nil && c.location == "" {
		c.location = c.repo.Backend().Location()
	}
	return c
}

// Configured says whether stasisd has a store at all (--no-store: none).
func (c *Conn) Configured() bool { return c.repo != nil || c.open != nil }

// Get is the store, or why it is out of reach (unavailable). A store that
// is not configured is (nil, nil).
func (c *Conn) Get() (*store.Repository, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.repo != nil || c.open == nil {
		return c.repo, nil
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	if c.err == nil {
		return nil, errdefs.Mark(fmt.Errorf("the snapshot store %s is not open yet; stasisd is opening it", c.location), errdefs.ErrUnavailable)
	}
	return nil, errdefs.Mark(fmt.Errorf("the snapshot store %s is out of reach since %s (%d tries): %v; stasisd keeps trying it, and snapshots stay on this node meanwhile",
		c.location, c.since.UTC().Format(time.RFC3339), c.failures, c.err), errdefs.ErrUnavailable)
}

// connect tries to open the store once.
func (c *Conn) connect(ctx context.Context) error {
	repo, err := c.open(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.err == nil {
			c.since = time.Now()
		}
		c.err = err
		c.failures++
		return err
	}
	c.repo, c.err, c.failures = repo, nil, 0
	return nil
}

// Open opens the snapshot store, within timeout; on failure stasisd
// goes on without it and KeepOpening tries again.
func (c *Conn) Open(ctx context.Context, timeout time.Duration) error {
	if c.open == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.connect(ctx)
}

// KeepOpening tries to open a store that is out of reach, in a
// goroutine of its own, with a growing wait, until it opens or ctx ends.
func (c *Conn) KeepOpening(ctx context.Context, log *slog.Logger) {
	if c.open == nil {
		return
	}
	go func() {
		wait := time.Second
		for {
			c.mu.Lock()
			open := c.repo != nil
			c.mu.Unlock()
			if open {
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-c.kick:
				t.Stop()
			}
			tctx, cancel := context.WithTimeout(ctx, retryMax)
			err := c.connect(tctx)
			cancel()
			if err == nil {
				log.Info("the snapshot store is open again", "store", c.location)
				return
			}
			log.Warn("the snapshot store is still out of reach", "store", c.location, "error", err.Error(), "retry", wait.String())
			wait = min(2*wait, retryMax)
		}
	}()
}

// Status says where the snapshot store stands, with what its backend
// did about failures.
func (c *Conn) Status() api.StoreStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := api.StoreStatus{Location: c.location, Configured: c.Configured(), Available: c.repo != nil}
	if c.err != nil && c.repo == nil {
		st.Error, st.Since, st.Failures = c.err.Error(), c.since, c.failures
	}
	if c.repo != nil {
		rs := store.Stats(c.repo.Backend())
		st.Retries, st.ResumedReads, st.Stalls, st.BytesReread = rs.Retries, rs.ResumedReads, rs.Stalls, rs.BytesReread
	}
	return st
}
