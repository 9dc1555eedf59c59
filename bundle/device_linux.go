package bundle

import (
	"fmt"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func deviceOf(path string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return specs.LinuxDevice{}, fmt.Errorf("device %s: %w", path, err)
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return specs.LinuxDevice{}, fmt.Errorf("device %s: not a device file", path)
	}
	fileMode := os.FileMode(st.Mode & 0o777)
	uid, gid := st.Uid, st.Gid
	return specs.LinuxDevice{
		Path: path, Type: typ, Major: int64(unix.Major(uint64(st.Rdev))), Minor: int64(unix.Minor(uint64(st.Rdev))),
		FileMode: &fileMode, UID: &uid, GID: &gid,
	}, nil
}
