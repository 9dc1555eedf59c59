package runtimes_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/runtimes"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

func TestARuntimeNotRunningRefusesWithWhy(t *testing.T) {
	gvisor := &engine.Engine{Runtime: runtimetest.New()}
	e := runtimes.New(gvisor, nil, "/dev/kvm cannot boot a guest")
	if got, why := e.MicroVM(); got != nil || why != "/dev/kvm cannot boot a guest" {
		t.Fatalf("MicroVM: %v, %q", got, why)
	}
	if e.For(api.RuntimeGVisor) != gvisor || e.Of(journal.Actor{Runtime: ""}) != gvisor {
		t.Fatal("gVisor actors get another engine")
	}
	vm := e.Of(journal.Actor{Runtime: api.RuntimeMicroVM})
	if vm == gvisor {
		t.Fatal("a micro-VM actor gets the gVisor engine")
	}
	_, err := vm.Status(context.Background(), "vm-1")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/dev/kvm cannot boot a guest") {
		t.Fatalf("a call for an absent runtime: %v, want failed_precondition with why", err)
	}
	if err := e.Offered(api.Template{Name: "t", Runtime: api.RuntimeMicroVM}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/dev/kvm") {
		t.Fatalf("a micro-VM template: %v", err)
	}
	if err := e.Offered(api.Template{Name: "t", Runtime: "kata"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("an unknown runtime: %v", err)
	}
	if err := e.Offered(api.Template{Name: "t"}); err != nil {
		t.Fatalf("the default runtime: %v", err)
	}
	m := &snapshot.Manifest{Runtime: snapshot.Runtime{Name: "qemu"}}
	if e.ForSnapshot(m) != gvisor {
		t.Fatal("a snapshot of a runtime not here is not checked by the gVisor engine")
	}
}

func TestBothRuntimes(t *testing.T) {
	qemu := runtimetest.New()
	qemu.Name = "qemu"
	gvisor, microVM := &engine.Engine{Runtime: runtimetest.New()}, &engine.Engine{Runtime: qemu}
	e := runtimes.New(gvisor, microVM, "")
	if got, _ := e.MicroVM(); got != microVM || e.For(api.RuntimeMicroVM) != microVM {
		t.Fatal("the micro-VM engine is not used")
	}
	if err := e.Offered(api.Template{Name: "t", Runtime: api.RuntimeMicroVM}); err != nil {
		t.Fatal(err)
	}
	if e.ForSnapshot(&snapshot.Manifest{Runtime: snapshot.Runtime{Name: "qemu"}}) != microVM {
		t.Fatal("a micro-VM snapshot is checked by another engine")
	}
	if e.ForSnapshot(&snapshot.Manifest{Runtime: snapshot.Runtime{Name: "fake"}}) != gvisor {
		t.Fatal("a gVisor snapshot is checked by another engine")
	}
}
