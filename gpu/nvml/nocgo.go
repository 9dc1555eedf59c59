//go:build !cgo

// Package nvml reads a node's GPU facts with NVIDIA's management library.
// This build has no cgo, which go-nvml needs, so it reports every node as
// one without GPUs and says why.
package nvml

import (
	"context"

	"github.com/stasis-run/stasis/gpu"
)

// Source is a gpu.Source that knows it cannot read NVML.
type Source struct{}

var _ gpu.Source = (*Source)(nil)

// New returns the cgo-less Source.
func New() *Source { return &Source{} }

// Info reports no GPUs, with the reason.
func (*Source) Info(context.Context) (gpu.Info, error) {
	return gpu.Info{Reason: "this stasis was built without cgo and cannot load NVML; build it with CGO_ENABLED=1"}, nil
}

// Processes reports none.
func (*Source) Processes(context.Context) ([]gpu.Process, error) { return nil, nil }
