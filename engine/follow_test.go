package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/mem"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestSuspendFollowedIntoTheStore: with a follower into a store, the
// commit takes the blocks the follower hashed as runsc wrote the image
// (they are the files' own: the resume checks every block), and the push
// after the suspend writes no pack again.
func TestSuspendFollowedIntoTheStore(t *testing.T) {
	f := newFixture(t)
	// The follower packs 1.1 GiB on this machine's cores beside runsc: a
	// busy machine must not make the suspend give up waiting for it (10 s
	// by default) and turn this test's question into one of load.
	f.eng.FollowWait = 5 * time.Minute
	ctx := context.Background()
	be := mem.New("followed")
	repo, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	// 1.1 GiB of the actor's own memory: an image the engine follows,
	// of four of the follower's segments and more.
	a := f.start("followed", testactor.Options{Ballast: []string{"0", "1100", "0", "7"}})
	before := f.counter(a.ID, "incr")
	follower := archiver.NewFollower(repo, 0)
	defer follower.Close()
	packsAtCheckpointEnd := -1
	obs := engine.Observer{After: func(ev engine.Step) {
		if ev.Name == engine.StepCheckpoint {
			packsAtCheckpointEnd = count(t, be, "data/")
		}
		f.obs.After(ev)
	}}
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: obs, Dir: dir, Follower: follower})
	if err != nil {
		t.Fatal(err)
	}
	commit := f.step("suspend", engine.StepCommit)
	if !strings.Contains(commit.Message, "of them read as they were written") {
		t.Fatalf("the commit hashed the image itself: %q; the notes: %q", commit.Message, f.notes("suspend"))
	}
	t.Logf("%d packs stored when the checkpoint ended; commit: %s", packsAtCheckpointEnd, commit.Message)
	packs := count(t, be, "data/")
	if _, err := archiver.SaveManifest(ctx, repo, "s1", dir, m, archiver.Options{Followed: follower}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, be, "data/"); n != packs {
		t.Fatalf("the push wrote %d packs again", n-packs)
	}
	if _, err := f.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: f.obs, Verify: engine.VerifyBlocks}); err != nil {
		t.Fatal(err)
	}
	inst, _ := instanceAndValue(before)
	if got := f.counter(a.ID, "incr"); got != inst+" 2" {
		t.Fatalf("counter says %q after the resume, want %q", got, inst+" 2")
	}
}

// TestFailedFollowerCostsTheSuspendNothing: a follower that fails leaves
// the suspend to hash the image itself, with a note that says why.
func TestFailedFollowerCostsTheSuspendNothing(t *testing.T) {
	f := newFixture(t)
	a := f.start("follower-fails", testactor.Options{Ballast: []string{"0", "1100", "0", "8"}})
	f.counter(a.ID, "incr") // once its memory is filled
	dir := filepath.Join(t.TempDir(), "snap")
	failing := &failingFollower{}
	if _, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Follower: failing}); err != nil {
		t.Fatal(err)
	}
	if !failing.followed || !failing.stopped {
		t.Fatalf("follower followed %v, stopped %v: want both", failing.followed, failing.stopped)
	}
	if commit := f.step("suspend", engine.StepCommit); strings.Contains(commit.Message, "as they were written") {
		t.Fatalf("commit %q after the follower failed", commit.Message)
	}
	var noted bool
	for _, ev := range f.events {
		noted = noted || ev.Name == "note" && strings.Contains(ev.Message, "store unreachable")
	}
	if !noted {
		t.Fatalf("no note of the follower's failure in %+v", f.events)
	}
	if _, err := snapshot.Verify(context.Background(), dir); err != nil {
		t.Fatalf("the snapshot committed after the follower failed: %v", err)
	}
}

// failingFollower follows and then fails.
type failingFollower struct{ followed, stopped bool }

func (ff *failingFollower) Follow(context.Context, string, string) error {
	ff.followed = true
	return nil
}

func (ff *failingFollower) Written(context.Context) (map[string][]string, error) {
	return map[string][]string{"image/pages.img": {"0000"}}, errors.New("store unreachable")
}

func (ff *failingFollower) Stop() { ff.stopped = true }

// step is the last event of op's step name.
func (f *fixture) step(op, name string) engine.Step {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.events) - 1; i >= 0; i-- {
		if ev := f.events[i]; ev.Op == op && ev.Name == name {
			return ev
		}
	}
	f.t.Fatalf("no %s/%s event", op, name)
	return engine.Step{}
}

// notes are the messages of op's notes so far.
func (f *fixture) notes(op string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var notes []string
	for _, ev := range f.events {
		if ev.Op == op && ev.Name == "note" {
			notes = append(notes, ev.Message)
		}
	}
	return notes
}

// count counts be's objects under prefix.
func count(t *testing.T, be store.Backend, prefix string) int {
	t.Helper()
	n := 0
	if err := be.List(context.Background(), prefix, func(string, int64) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
