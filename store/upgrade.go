package store

import (
	"context"
	"fmt"
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
// in it, and stores written from then on keep bf16 weights in about two
// thirds of their bytes. Builds that read formats up to 2 refuse the
// repository afterwards, by its version: upgrade every node's stasis
// first. This Repository, and any a process opened before, keeps writing
// the format it was opened in (valid in either): the new one is used by
// those opened after (stasisd from its next start). A format 1 repository
// cuts its chunks with Rabin's chunker,
// which no config can change; it is refused with what to do instead. It
// takes the repository's exclusive lock: it fails while a push (or gc)
// holds a lock, and none starts while it runs.
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
		return up, fmt.Errorf("store %s: format 1 cuts chunks with Rabin's chunker, which cannot change in place: make a new repository (stasis store init --repo ...) and push new snapshots there; this one stays readable", r.be.Location())
	}
	cfg.Version = FormatVersion
	if err := putJSON(ctx, r.be, configKey, cfg); err != nil {
		return up, err
	}
	up.To = cfg.Version
	return up, nil
}
