package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store"
)

// storeConn is stasisd's snapshot store, which may be out of reach when
// stasisd starts or at any time after (a remote bucket that is down, a
// damaged config): stasisd serves all the same. Actors run, pause, resume
// from their local snapshots and are removed; what needs the store says it
// is unavailable and why, and the store is opened again in the background.
type storeConn struct {
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

// storeRetryMax bounds the wait between tries to open the store: 1 s, 2 s,
// 4 s ... up to it.
const storeRetryMax = 30 * time.Second

func newStoreConn(cfg Config) *storeConn {
	c := &storeConn{location: cfg.StoreLocation, open: cfg.OpenStore, repo: cfg.Repo, kick: make(chan struct{}, 1)}
	if c.repo != nil && c.location == "" {
		c.location = c.repo.Backend().Location()
	}
	return c
}

// configured says whether stasisd has a store at all (--no-store: none).
func (c *storeConn) configured() bool { return c.repo != nil || c.open != nil }

// get is the store, or why it is out of reach (unavailable). A store that
// is not configured is (nil, nil).
func (c *storeConn) get() (*store.Repository, error) {
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
func (c *storeConn) connect(ctx context.Context) error {
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

// OpenStore opens the snapshot store, within timeout; on failure stasisd
// goes on without it and KeepOpeningStore tries again.
func (s *Service) OpenStore(ctx context.Context, timeout time.Duration) error {
	if s.store.open == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return s.store.connect(ctx)
}

// KeepOpeningStore tries to open a store that is out of reach, in a
// goroutine of its own, with a growing wait, until it opens or ctx ends.
func (s *Service) KeepOpeningStore(ctx context.Context) {
	c := s.store
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
			tctx, cancel := context.WithTimeout(ctx, storeRetryMax)
			err := c.connect(tctx)
			cancel()
			if err == nil {
				s.cfg.Log.Info("the snapshot store is open again", "store", c.location)
				return
			}
			s.cfg.Log.Warn("the snapshot store is still out of reach", "store", c.location, "error", err.Error(), "retry", wait.String())
			wait = min(2*wait, storeRetryMax)
		}
	}()
}

// StoreStatus says where the snapshot store stands, with what its backend
// did about failures.
func (s *Service) StoreStatus() api.StoreStatus {
	c := s.store
	c.mu.Lock()
	defer c.mu.Unlock()
	st := api.StoreStatus{Location: c.location, Configured: c.configured(), Available: c.repo != nil}
	if c.err != nil && c.repo == nil {
		st.Error, st.Since, st.Failures = c.err.Error(), c.since, c.failures
	}
	if c.repo != nil {
		rs := store.Stats(c.repo.Backend())
		st.Retries, st.ResumedReads, st.Stalls, st.BytesReread = rs.Retries, rs.ResumedReads, rs.Stalls, rs.BytesReread
	}
	return st
}

// NodeStatus says where this stasisd stands: its store and its fleet lease.
func (s *Service) NodeStatus(ctx context.Context, _ api.Empty) (api.NodeStatus, error) {
	l, err := s.Lease(ctx)
	return api.NodeStatus{Store: s.StoreStatus(), Lease: l}, err
}
