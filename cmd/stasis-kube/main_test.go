package main

import (
	"strings"
	"testing"
)

// TestLeaseDurationIsWholeSeconds: a lease duration a Lease cannot hold is
// refused before anything connects, naming the flag and the fix.
func TestLeaseDurationIsWholeSeconds(t *testing.T) {
	for _, bad := range []string{"1500ms", "500ms", "0s", "-5s"} {
		root := newRoot()
		root.SetArgs([]string{"drain", "node-a", "--lease-duration", bad, "--kubeconfig", "/nonexistent"})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "--lease-duration") || !strings.Contains(err.Error(), "whole seconds") {
			t.Errorf("--lease-duration %s: %v, want it refused as not whole seconds", bad, err)
		}
	}
	root := newRoot()
	root.SetArgs([]string{"drain", "node-a", "--lease-duration", "2s", "--kubeconfig", "/nonexistent"})
	if err := root.Execute(); err == nil || strings.Contains(err.Error(), "--lease-duration") {
		t.Errorf("--lease-duration 2s: %v, want it taken (and the missing kubeconfig refused)", err)
	}
}

func TestKubeAPILimitsArePositive(t *testing.T) {
	for _, args := range [][]string{{"--kube-api-qps", "0"}, {"--kube-api-qps", "-3"}, {"--kube-api-burst", "0"}} {
		root := newRoot()
		root.SetArgs(append([]string{"drain", "node-a", "--kubeconfig", "/nonexistent"}, args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want it refused", args, err)
		}
	}
}
