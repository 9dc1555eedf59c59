package store

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/errdefs"
)

// Upgrade is what Repository.Upgrade did: the format the repository was
// in and the one it is in now (the same when it was current).
type Upgrade struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// Upgrade moves a format 2 repository to the current format in place, by
// its config alone: format 3 only adds an encoding for new chunks (grouped
// bytes) beside zstd, so every pack and snapshot already stored is valid
// in it, and snapshots pushed from then on keep bf16 weights in about two
// thirds of their bytes. Builds that read formats up to 2 refuse the
// repository afterwards, by its version: upgrade every node's stasis
// first. This Repository, and any a process opened before, keeps writing
// the format it was opened in (valid in either); those opened after write
// the new one. A format 1 repository cuts its chunks with Rabin's
// chunker, which no config can change: it is refused (failed
// precondition) with what to do instead. Upgrade takes the repository's
// exclusive lock: it fails with ErrLocked while a push or gc holds a lock,
// and none starts while it runs.
func (r *Repository) Upgrade(ctx context.Context) (Upgrade, error) {
	unlock, err := r.Lock(ctx, true)
	if err != nil {
		return Upgrade{}, err
	}
	defer unlock()
	// The config as it is now, not as this Repository read it.
	var cfg Config
	if err := getJSON(ctx, r.be, configKey, &cfg); err != nil {
		return Upgrade{}, fmt.Errorf("store %s: config: %w", r.be.Location(), err)
	}
	if err := cfg.check(); err != nil {
		return Upgrade{}, fmt.Errorf("store %s: config: %w", r.be.Location(), err)
	}
	up := Upgrade{From: cfg.Version, To: cfg.Version}
	switch cfg.Version {
	case FormatVersion:
		return up, nil
	case 1:
		return up, errdefs.Mark(fmt.Errorf("store %s: format 1 cuts chunks with Rabin's chunker, which cannot change in place: make a new repository (stasis store init --repo ...) and push new snapshots there; this one stays readable", r.be.Location()), errdefs.ErrFailedPrecondition)
	}
	cfg.Version = FormatVersion
	if err := putJSON(ctx, r.be, configKey, cfg); err != nil {
		return up, err
	}
	up.To = cfg.Version
	return up, nil
}
