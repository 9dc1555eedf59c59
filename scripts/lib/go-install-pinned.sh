# Sourced by the install-*.sh scripts: builds a Go program from the Go module
# proxy at a pinned version and installs it as $PREFIX/bin/NAME (default
# /usr/local), stamping the version so that a second run does nothing.
#
#   go_install_pinned NAME PACKAGE VERSION "what the build costs"
go_install_pinned() {
	local name="$1" pkg="$2" version="$3" cost="$4"
	local prefix="${PREFIX:-/usr/local}"
	local dest="$prefix/bin/$name"
	local stamp="$prefix/share/stasis/$name.version"

	if [[ -x "$dest" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "$name $version already installed at $dest"
		return 0
	fi
	command -v go >/dev/null || { echo "install-$name: go is needed to build $name (https://go.dev/doc/install)" >&2; return 1; }

	local work
	work="$(mktemp -d)"
	trap 'rm -rf "$work"' RETURN
	echo "building $name $pkg@$version ($cost)"
	GOBIN="$work" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "$pkg@$version"
	install -D -m 0755 "$work/$name" "$dest"
	mkdir -p "$(dirname "$stamp")"
	echo "$version" >"$stamp"
	echo "installed $dest"
}
