package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
)

func TestExclusiveAndShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	first, err := Acquire(path, true, Holder("stasisd"))
	if err != nil {
		t.Fatal(err)
	}
	// flock is per open file, so a second open in this process conflicts
	// as another process would.
	_, err = Acquire(path, true, Holder("stasisd"))
	if !errors.Is(err, ErrLocked) || !errors.Is(err, errdefs.ErrBusy) || !strings.Contains(err.Error(), "stasisd (pid ") {
		t.Fatalf("a second exclusive lock: %v", err)
	}
	if _, err := Acquire(path, false, ""); !errors.Is(err, ErrLocked) {
		t.Fatalf("a shared lock beside an exclusive one: %v", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	a, err := Acquire(path, false, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := Acquire(path, false, "")
	if err != nil {
		t.Fatalf("two shared locks: %v", err)
	}
	defer b.Release()
	if _, err := Acquire(path, true, "x"); !errors.Is(err, ErrLocked) {
		t.Fatalf("an exclusive lock beside shared ones: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file mode: %v %v", st.Mode(), err)
	}
}
