package node

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestReadHugePages(t *testing.T) {
	cases := []struct {
		shmem, defrag string
		want          HugePages
	}{
		{"always within_size advise [never] deny force", "always defer defer+madvise [madvise] never", HugePages{"never", "madvise", false}},
		{"always within_size [advise] never deny force", "always defer defer+madvise [madvise] never", HugePages{"advise", "madvise", false}},
		{"always within_size [advise] never deny force", "always [defer] defer+madvise madvise never", HugePages{"advise", "defer", true}},
		{"always within_size [advise] never deny force", "always defer defer+madvise madvise [never]", HugePages{"advise", "never", true}},
		{"always [within_size] advise never deny force", "always defer defer+madvise [madvise] never", HugePages{"within_size", "madvise", true}},
		{"always within_size advise never [deny] force", "[always] defer defer+madvise madvise never", HugePages{"deny", "always", false}},
	}
	for _, c := range cases {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "shmem_enabled"), []byte(c.shmem+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "defrag"), []byte(c.defrag+"\n"), 0o644)
		got, err := ReadHugePages(dir)
		if err != nil || got != c.want {
			t.Errorf("%q %q: got %+v %v, want %+v", c.shmem, c.defrag, got, err, c.want)
		}
	}
	if _, err := ReadHugePages(t.TempDir()); err == nil {
		t.Error("settings read from an empty folder")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "shmem_enabled"), []byte("advise\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "defrag"), []byte("[never]\n"), 0o644)
	if _, err := ReadHugePages(dir); err == nil {
		t.Error("a setting with no selected value was read")
	}
}

func TestHugePageChanges(t *testing.T) {
	cases := []struct {
		before HugePages
		want   []setting
	}{
		{HugePages{"never", "madvise", false}, []setting{{"shmem_enabled", "advise"}, {"defrag", "defer"}}},
		{HugePages{"never", "never", false}, []setting{{"shmem_enabled", "advise"}}},
		{HugePages{"advise", "defer+madvise", false}, []setting{{"defrag", "defer"}}},
		{HugePages{"advise", "defer", true}, nil},
		{HugePages{"always", "madvise", true}, nil},
	}
	for _, c := range cases {
		got, err := c.before.changes()
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: got %v %v, want %v", c.before, got, err, c.want)
		}
		after := c.before
		for _, s := range got {
			if s.name == "shmem_enabled" {
				after.ShmemEnabled = s.value
			} else {
				after.Defrag = s.value
			}
		}
		if !sandboxHugePages(after.ShmemEnabled, after.Defrag) {
			t.Errorf("%+v: runsc would not use huge pages after %v", c.before, got)
		}
	}
	if _, err := (HugePages{"deny", "madvise", false}).changes(); !errors.Is(err, ErrHugePagesDenied) {
		t.Errorf("deny overridden: %v", err)
	}
}
