package service

import (
	"context"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/service/internal/fence"
)

// DefaultFenceCheck is how often stasisd compares its actors with the fleet
// lease: a lapse is acted on within it.
const DefaultFenceCheck = fence.DefaultCheck

// RenewLease takes or renews the fleet lease (package fence).
func (s *Service) RenewLease(ctx context.Context, req api.LeaseRequest) (api.Lease, error) {
	return s.lease.Renew(ctx, req)
}

// Lease says where the fleet lease stands, with the FENCED actors and the
// commands that fence the running fleet actors without stasisd.
func (s *Service) Lease(ctx context.Context) (api.Lease, error) { return s.lease.Get(ctx) }

// ReleaseLease gives the fleet lease up: nothing is fenced any more.
func (s *Service) ReleaseLease(ctx context.Context) (api.Lease, error) { return s.lease.Release(ctx) }

// EnforceLease fences the fleet actors while the lease has lapsed, and
// thaws those a renewal binds here.
func (s *Service) EnforceLease(ctx context.Context) error { return s.lease.Enforce(ctx) }

// KeepFencing runs EnforceLease every interval, and at once after a
// renewal, until ctx ends.
func (s *Service) KeepFencing(ctx context.Context, interval time.Duration) {
	s.lease.KeepFencing(ctx, interval)
}

// OpenStore opens the snapshot store, within timeout; on failure stasisd
// goes on without it and KeepOpeningStore tries again.
func (s *Service) OpenStore(ctx context.Context, timeout time.Duration) error {
	return s.store.Open(ctx, timeout)
}

// KeepOpeningStore tries to open a store that is out of reach, in the
// background, until it opens or ctx ends.
func (s *Service) KeepOpeningStore(ctx context.Context) { s.store.KeepOpening(ctx, s.cfg.Log) }

// StoreStatus says where the snapshot store stands.
func (s *Service) StoreStatus() api.StoreStatus { return s.store.Status() }
