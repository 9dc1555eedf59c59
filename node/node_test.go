package node

import (
	"context"
	"errors"
	"testing"

	"github.com/stasis-run/stasis/runtime"
)

func TestCollectThisNode(t *testing.T) {
	noDriver := errors.New("no libcuda.so.1 here")
	f, err := Collector{Runtime: runtime.Info{Name: "gvisor", Version: "test"}, CheckpointAPI: func() error { return noDriver }}.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.Kernel == "" || f.CPU.Model == "" || len(f.CPU.Flags) == 0 || f.Memory.Total == 0 || f.Memory.Available == 0 || f.Hostname == "" {
		t.Fatalf("facts missing: %+v", f)
	}
	if f.GPU.Available || f.GPU.Reason == "" {
		t.Fatalf("GPU facts without a source: %+v", f.GPU)
	}
	if f.CheckpointAPI.Available || f.CheckpointAPI.Reason != noDriver.Error() {
		t.Fatalf("checkpoint API whose probe failed: %+v", f.CheckpointAPI)
	}
	unchecked, err := Collector{Runtime: runtime.Info{Name: "gvisor", Version: "test"}}.Collect(context.Background())
	if err != nil || unchecked.CheckpointAPI.Available || unchecked.CheckpointAPI.Reason != "not checked" {
		t.Fatalf("checkpoint API without a probe: %+v %v", unchecked.CheckpointAPI, err)
	}
	if _, err := (Collector{ProcDir: t.TempDir()}).Collect(context.Background()); err == nil {
		t.Fatal("collect without /proc files worked")
	}
}
