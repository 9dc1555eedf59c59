package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/snapshot"
)

// TestGoldenSnapshot warms a template and starts two actors from its golden
// snapshot: both continue the warmed process (the same instance id); then,
// with the golden snapshot's node edited to one this node cannot match,
// a third actor cold-boots and says why.
func TestGoldenSnapshot(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	tpl, err := d.api.WarmTemplate(context.Background(), api.WarmRequest{Template: "counter"})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Golden == "" {
		t.Fatalf("warmed template without a golden snapshot: %+v", tpl)
	}
	if actors, _ := d.api.ListActors(context.Background()); len(actors) != 0 {
		t.Fatalf("the warming actor was left: %+v", actors)
	}
	var instances []string
	for _, id := range []string{"b1", "b2"} {
		a := d.run("counter", id)
		if !strings.Contains(a.Reason, "started from the golden snapshot") {
			t.Fatalf("%s: %+v", id, a)
		}
		inst, value, _ := strings.Cut(d.counter(id, "incr"), " ")
		if value != "1" {
			t.Fatalf("%s counts %s", id, value)
		}
		instances = append(instances, inst)
	}
	if instances[0] != instances[1] {
		t.Fatalf("the two actors run different processes (%v): they did not both come from the golden snapshot", instances)
	}

	snap, err := d.api.InspectSnapshot(context.Background(), tpl.Golden)
	if err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.Load(snap.Dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Node.Runtime.Platform = "kvm"
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(snap.Dir, snapshot.ManifestName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	a := d.run("counter", "b3")
	if !strings.Contains(a.Reason, "cold boot") || !strings.Contains(a.Reason, "runtime platform kvm needed, node runs systrap") {
		t.Fatalf("b3: %+v", a)
	}
	if inst, _, _ := strings.Cut(d.counter("b3", "get"), " "); inst == instances[0] {
		t.Fatal("b3 runs the golden process although it should have cold-booted")
	}
}

// TestDiskFullRefusesAndKeepsRunning: with the snapshot folder on a tiny
// filesystem the pause is refused before anything is touched, and the
// actor keeps running and counting.
func TestDiskFullRefusesAndKeepsRunning(t *testing.T) {
	d := newDaemon(t)
	snaps := filepath.Join(d.data, "snapshots")
	if err := os.MkdirAll(snaps, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", snaps, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(snaps, unix.MNT_DETACH) })
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	inst, _, _ := strings.Cut(d.counter("a1", "incr"), " ")
	_, err := call(context.Background(), d.api, "Pause", "a1")
	if err == nil || !strings.Contains(err.Error(), "disk") || !strings.Contains(err.Error(), "short") {
		t.Fatalf("pause onto a full disk: %v", err)
	}
	a := d.inspect("a1")
	if a.State != api.Running || !strings.Contains(a.Reason, "keeps running") {
		t.Fatalf("after the refused pause: %+v", a)
	}
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q after the refused pause", got)
	}
}
