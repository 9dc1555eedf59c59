#!/usr/bin/env bash
# Generates stasisd's API code from api/proto: api/gen (the Go types, the
# Connect client and handler) with buf (scripts/install-buf.sh) and the code
# generators go.mod pins, and the Python client's stasis/v1 modules
# (clients/python) with protoc and gRPC's Python plugin
# (scripts/install-python-client.sh); run it after changing the proto file,
# and commit what it writes.
#
#   scripts/gen-api.sh            write api/gen and clients/python/stasis/v1
#   scripts/gen-api.sh --check    lint the proto file, check it against the
#                                 API as last released (api/released.binpb)
#                                 and that both are what it generates
#   scripts/gen-api.sh --release  record the proto file as the API released
set -euo pipefail
cd "$(dirname "$0")/.."
command -v buf >/dev/null || { echo "gen-api: buf is needed: scripts/install-buf.sh" >&2; exit 1; }

python_out=clients/python/stasis/v1
# python OUT writes the Python modules of api/proto into OUT/stasis/v1.
python() {
	command -v protoc >/dev/null && [[ -x /usr/bin/grpc_python_plugin ]] ||
		{ echo "gen-api: protoc and grpc_python_plugin are needed: scripts/install-python-client.sh" >&2; exit 1; }
	protoc -I api/proto -I /usr/include --python_out="$1" --grpc_python_out="$1" \
		--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin api/proto/stasis/v1/stasis.proto
}

case "${1:-}" in
"")
	buf generate
	python clients/python
	;;
--check)
	buf lint
	buf breaking --against api/released.binpb
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	buf generate --output "$work"
	python "$work"
	for pair in "api/gen $work/api/gen" "$python_out $work/stasis/v1"; do
		read -r have want <<<"$pair"
		# The package's own files (__init__.py) are written by hand.
		if ! diff -r -x __init__.py -x __pycache__ "$have" "$want" >/dev/null; then
			echo "gen-api: $have is not what api/proto generates: run scripts/gen-api.sh and commit what it writes" >&2
			diff -r -x __init__.py -x __pycache__ "$have" "$want" | head -20 >&2
			exit 1
		fi
	done
	echo "api/proto lints, breaks nothing released, and api/gen and $python_out are current"
	;;
--release)
	buf build --output api/released.binpb
	;;
*)
	echo "usage: scripts/gen-api.sh [--check|--release]" >&2
	exit 2
	;;
esac
