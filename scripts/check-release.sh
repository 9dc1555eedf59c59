#!/usr/bin/env bash
# Checks that a tagged release installs with `go install ...@VERSION` and
# reports that version, without publishing anything: the committed tree (git
# HEAD) is served as VERSION from a throwaway file-based module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-v0.0.0-check}"
module=github.com/stasis-run/stasis
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
proxy="$work/proxy/$module/@v"
mkdir -p "$proxy" "$work/src"
git archive HEAD | tar -x -C "$work/src"
python3 - "$work/src" "$proxy/$version.zip" "$module@$version" <<'PY'
import os, sys, zipfile
src, out, prefix = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for root, _, files in os.walk(src):
        for f in files:
            path = os.path.join(root, f)
            z.write(path, prefix + "/" + os.path.relpath(path, src))
PY
cp "$work/src/go.mod" "$proxy/$version.mod"
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(date -u +%FT%TZ)" >"$proxy/$version.info"
echo "$version" >"$proxy/list"
GOBIN="$work/bin" GOPROXY="file://$work/proxy,https://proxy.golang.org" GONOSUMDB="$module" GOFLAGS=-mod=mod \
	CGO_ENABLED=0 go install "$module/cmd/stasis-cuda@$version"
out="$("$work/bin/stasis-cuda" --version)"
got="${out%%$'\n'*}"
echo "$got"
[[ "$got" == "stasis-cuda $version" ]] || { echo "check-release: want 'stasis-cuda $version'" >&2; exit 1; }
echo "go install $module/cmd/stasis-cuda@$version works and reports $version"
