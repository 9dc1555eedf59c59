package compat

import (
	"cmp"
	"slices"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/snapshot"
)

// Place checks a snapshot against every node and ranks them: compatible
// nodes first, those left with the most free GPU memory and then the most
// free host memory after the restore ahead (spreading load); then the
// refused ones, each with its reasons.
func Place(m *snapshot.Manifest, nodes []fingerprint.Fingerprint, p Policy) []Result {
	results := make([]Result, len(nodes))
	for i, n := range nodes {
		results[i] = Check(m, n, p)
	}
	slices.SortStableFunc(results, func(a, b Result) int {
		if a.Compatible != b.Compatible {
			if a.Compatible {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.GPUFreeAfter, a.GPUFreeAfter), cmp.Compare(b.HostFreeAfter, a.HostFreeAfter), cmp.Compare(a.Node, b.Node))
	})
	return results
}
