package pauselock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestOf: a runsc pause command names its state folder and sandbox, in
// either spelling of --root; anything else is not a pause to lock.
func TestOf(t *testing.T) {
	for _, c := range []struct {
		argv     []string
		root, id string
		ok       bool
	}{
		{[]string{"/usr/lib/stasis/bin/runsc", "--root", "/var/lib/stasis/runsc", "--platform", "systrap", "pause", "+a1+"}, "/var/lib/stasis/runsc", "+a1+", true},
		{[]string{"runsc", "--root=/r", "pause", "+a.b+"}, "/r", "+a.b+", true},
		{[]string{"runsc", "-root", "/r", "pause", "x"}, "/r", "x", true},
		{[]string{"runsc", "pause", "x"}, "", "", false},
		{[]string{"runsc", "--root", "/r", "resume", "x"}, "", "", false},
		{[]string{"runsc", "--root", "pause", "x"}, "", "", false},
		{nil, "", "", false},
	} {
		root, id, ok := Of(c.argv)
		if ok != c.ok || ok && (root != c.root || id != c.id) {
			t.Errorf("Of(%q) = %q %q %v; want %q %q %v", c.argv, root, id, ok, c.root, c.id, c.ok)
		}
	}
}

// TestHoldExcludes: a second holder of one sandbox's lock waits for the
// first's release, and gives up when its context ends; another sandbox's
// lock is its own; an id that would leave the folder is refused.
func TestHoldExcludes(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	release, err := Hold(ctx, root, "+a1+")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := Hold(short, root, "+a1+"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second hold while the first is held: %v; want it to wait until its context ends", err)
	}
	other, err := Hold(ctx, root, "+a2+")
	if err != nil {
		t.Fatalf("another sandbox's lock: %v", err)
	}
	other()
	got := make(chan error, 1)
	go func() {
		r, err := Hold(ctx, root, "+a1+")
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	if err := <-got; err != nil {
		t.Fatalf("the hold waiting for the release: %v", err)
	}
	if _, err := Hold(ctx, root, "../escape"); err == nil {
		t.Fatal("an id with a slash was taken")
	}
}
