// Package buildinfo says which release of Stasis a binary is.
package buildinfo

import "runtime/debug"

// version is set by release builds: -ldflags "-X github.com/stasis-run/stasis/internal/buildinfo.version=v0.1.0".
var version string

// Version is the release the binary was built from: the linker's stamp for
// release builds, the module version for `go install ...@vX`, otherwise
// "(devel)" with the commit when the build recorded one.
func Version() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "(devel) " + s.Value[:12]
		}
	}
	return "(devel)"
}
