package local_test

import (
	"testing"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/backendtest"
	"github.com/stasis-run/stasis/store/local"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) store.Backend {
		be, err := local.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return be
	})
}
