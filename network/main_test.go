package network_test

import (
	"testing"

	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestMain removes, after the tests, what they built to run in sandboxes.
func TestMain(m *testing.M) { testactor.Main(m) }
