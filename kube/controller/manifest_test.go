package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stasis-run/stasis/snapshot"
)

// TestManifestCacheKeepsOnlyWhatPassesAskFor checks that a manifest is read
// from the store once while every pass asks for it, and let go after a pass
// that did not: the cache never grows with the snapshots ever placed from.
func TestManifestCacheKeepsOnlyWhatPassesAskFor(t *testing.T) {
	ctx := context.Background()
	repo, _ := newRepo(t)
	for _, name := range []string{"waiting", "placed"} {
		storeSnapshot(t, repo, name, name, time.Now())
	}
	c := &Controller{Repo: repo}
	c.startPass()
	for _, name := range []string{"waiting", "placed"} {
		if m, err := c.manifest(ctx, name); err != nil || m.Actor != name {
			t.Fatalf("first read of %s: %v %v", name, m, err)
		}
	}
	// From here on the store is out of reach: what is cached answers, and
	// what is not fails.
	c.Repo = nil
	for pass := range 3 {
		c.startPass()
		if m, err := c.manifest(ctx, "waiting"); err != nil || m.Actor != "waiting" {
			t.Fatalf("pass %d: the manifest asked for on every pass was not kept: %v %v", pass, m, err)
		}
	}
	if _, err := c.manifest(ctx, "placed"); err == nil {
		t.Fatal("a manifest no pass asked for since was still cached")
	}
	cached := map[string]bool{}
	for _, gen := range []map[string]*snapshot.Manifest{c.manifests, c.lastManifests} {
		for name := range gen {
			cached[name] = true
		}
	}
	if len(cached) != 1 || !cached["waiting"] {
		t.Fatalf("cached %v, want only the one every pass asks for", cached)
	}
}
