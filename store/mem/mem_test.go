package mem_test

import (
	"testing"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/backendtest"
	"github.com/stasis-run/stasis/store/mem"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) store.Backend { return mem.New(t.Name()) })
}
