// Package store is Stasis's snapshot repository: snapshot folders cut into
// content-defined chunks, each compressed with zstd and addressed by the
// SHA-256 of its content, packed into pack objects on a Backend (a local
// folder or S3). A chunk already in the repository is never stored twice,
// so snapshots of one template share most of their bytes, and an interrupted
// upload resumes where it stopped. Every chunk is hash-checked when read. A
// snapshot's manifest is written last: a snapshot exists only once every pack
// it needs is durable. docs/store.md describes the format and the locking.
package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/restic/chunker"

	"github.com/stasis-run/stasis/errdefs"
)

// FormatVersion is the repository format this package writes. Older
// formats are still read and written as they are: format 1 cuts with
// Rabin's chunker, format 2 with FastCDC, and format 3 as format 2, with
// chunks that zstd cannot shrink stored as grouped bytes (grouped.go) when
// that is smaller.
const FormatVersion = 3

// manifestVersion is the format of snapshot manifests, the same in every
// repository format.
const manifestVersion = 1

// Object key prefixes.
const (
	configKey       = "config"
	dataPrefix      = "data/"
	indexPrefix     = "index/"
	snapshotsPrefix = "snapshots/"
	locksPrefix     = "locks/"
)

// maxMetadataSize bounds the JSON objects (config, index, snapshot, lock)
// read from a backend; larger ones are corrupt, not metadata.
const maxMetadataSize = 256 << 20

// Config is the repository's config object, written once by Init.
type Config struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// ChunkerPolynomial is the Rabin polynomial of a format 1 repository's
	// chunker; every writer must use the same one for chunks to match.
	ChunkerPolynomial chunker.Pol `json:"chunkerPolynomial,omitempty"`
	// Chunking is how a format 2 or 3 repository cuts files.
	Chunking *Chunking `json:"chunking,omitempty"`
	// PackSize is the size a pack is closed at.
	PackSize int64 `json:"packSize"`
}

// Repository is an open repository on a backend.
type Repository struct {
	be  Backend
	cfg Config

	mu    sync.Mutex
	index map[string]blobLocation // chunk id -> where it is stored
	// badIndexes are the index objects that could not be read: their
	// chunks are unknown, so the snapshots that use them are refused and
	// GC does not run.
	badIndexes []Damage
}

// Damage is one repository object that could not be read, and why. The
// rest of the repository is used as usual; GC refuses to run while any is
// left, since it cannot tell what a damaged object refers to.
type Damage struct {
	Object string `json:"object"`
	Reason string `json:"reason"`
}

// DamagedIndexes lists the index objects Open could not read.
func (r *Repository) DamagedIndexes() []Damage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.badIndexes)
}

type blobLocation struct {
	Pack   string
	Offset int64
	Length int64 // stored (compressed) bytes
	Raw    int64 // chunk bytes
}

// Init creates a repository on an empty backend.
func Init(ctx context.Context, be Backend) (*Repository, error) {
	if _, err := be.Size(ctx, configKey); err == nil {
		return nil, fmt.Errorf("store %s: already a repository", be.Location())
	} else if !errors.Is(err, ErrNotExist) {
		return nil, fmt.Errorf("store %s: %w", be.Location(), err)
	}
	chunking, err := newChunking()
	if err != nil {
		return nil, err
	}
	cfg := Config{Version: FormatVersion, ID: newID(), Chunking: chunking, PackSize: 16 << 20}
	if err := putJSON(ctx, be, configKey, cfg); err != nil {
		return nil, err
	}
	return &Repository{be: be, cfg: cfg, index: map[string]blobLocation{}}, nil
}

// Open reads a repository's config and index.
func Open(ctx context.Context, be Backend) (*Repository, error) {
	var cfg Config
	if err := getJSON(ctx, be, configKey, &cfg); err != nil {
		if errors.Is(err, ErrNotExist) {
			return nil, fmt.Errorf("store %s: no repository here (create one with stasis store init): %w", be.Location(), err)
		}
		return nil, fmt.Errorf("store %s: config: %w", be.Location(), err)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("store %s: config: %w", be.Location(), err)
	}
	r := &Repository{be: be, cfg: cfg}
	if err := r.loadIndex(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (c *Config) check() error {
	switch c.Version {
	case 1:
		if c.Chunking != nil || !c.ChunkerPolynomial.Irreducible() {
			return fmt.Errorf("corrupt: a format 1 repository needs an irreducible Rabin polynomial and no chunking (polynomial %v)", c.ChunkerPolynomial)
		}
	case 2, 3:
		if c.Chunking == nil || c.ChunkerPolynomial != 0 {
			return fmt.Errorf("corrupt: a format %d repository needs its chunking and no Rabin polynomial", c.Version)
		}
		if err := c.Chunking.check(); err != nil {
			return fmt.Errorf("corrupt: %w", err)
		}
	default:
		return fmt.Errorf("repository format %d, this build reads formats 1 to 3 (a newer stasis wrote it; upgrade)", c.Version)
	}
	if c.PackSize <= 0 || c.PackSize > 1<<30 {
		return fmt.Errorf("corrupt: pack size %d", c.PackSize)
	}
	return nil
}

// Backend is where the repository lives.
func (r *Repository) Backend() Backend { return r.be }

// packIndex is one pack's index object: which chunks it holds, where.
type packIndex struct {
	Pack string `json:"pack"`
	// KeyID names the key a pack is encrypted with; empty for plaintext.
	// It is there so that encryption can come without a format change.
	KeyID string      `json:"keyId,omitempty"`
	Blobs []packEntry `json:"blobs"`
}

type packEntry struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Raw    int64  `json:"raw"`
}

// loadIndex reads every pack's index. One that cannot be read (truncated,
// not JSON) is set aside as damaged rather than failing the repository: a
// snapshot that needs its chunks is refused by name, every other works.
func (r *Repository) loadIndex(ctx context.Context) error {
	index := map[string]blobLocation{}
	var bad []Damage
	err := r.be.List(ctx, indexPrefix, func(key string, _ int64) error {
		var pi packIndex
		if err := getJSON(ctx, r.be, key, &pi); err != nil {
			if ctx.Err() != nil || !isDamage(err) {
				return fmt.Errorf("index %s: %w", key, err)
			}
			bad = append(bad, Damage{Object: key, Reason: err.Error()})
			return nil
		}
		for _, b := range pi.Blobs {
			index[b.ID] = blobLocation{Pack: pi.Pack, Offset: b.Offset, Length: b.Length, Raw: b.Raw}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s: %w", r.be.Location(), err)
	}
	r.mu.Lock()
	r.index, r.badIndexes = index, bad
	r.mu.Unlock()
	return nil
}

// isDamage tells an object that is there but unreadable as what it should
// be from a backend that failed to answer.
func isDamage(err error) bool { return errors.Is(err, errdefs.ErrCorrupt) }

func (r *Repository) lookup(id string) (blobLocation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	loc, ok := r.index[id]
	return loc, ok
}

func packKey(id string) string { return dataPrefix + id[:2] + "/" + id }

func newID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

func putJSON(ctx context.Context, be Backend, key string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := be.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("store %s: write %s: %w", be.Location(), key, err)
	}
	return nil
}

func getJSON(ctx context.Context, be Backend, key string, v any) error {
	rc, err := be.Get(ctx, key, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxMetadataSize+1))
	if err != nil {
		return err
	}
	if len(data) > maxMetadataSize {
		return corrupt("%s is larger than %d bytes", key, maxMetadataSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return corrupt("%s is not valid JSON (truncated?): %v", key, err)
	}
	return nil
}

// CheckSnapshotName refuses a snapshot name that is not usable as an object
// key.
func CheckSnapshotName(name string) error {
	bad := name == "" || len(name) > 200 || name == "." || name == ".."
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			bad = true
		}
	}
	if bad {
		return errdefs.Mark(fmt.Errorf("invalid snapshot name %q: use up to 200 letters, digits, '-', '_' and '.'", name), errdefs.ErrInvalidArgument)
	}
	return nil
}
