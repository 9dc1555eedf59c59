package microvm_test

import (
	"testing"

	"github.com/stasis-run/stasis/testkit/testactor"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// TestMain removes, after the tests, what they built to run in sandboxes.
func TestMain(m *testing.M) { testactor.Main(m, vmtest.RemoveGuest) }
