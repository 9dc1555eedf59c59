#!/usr/bin/env bash
# Installs what the Python client (clients/python) needs, from Debian's
# packages at pinned versions: protoc (with the well-known types' proto
# files) and gRPC's Python plugin, which generate it from api/proto
# (scripts/gen-api.sh), and grpcio and protobuf for Debian's python3
# (/usr/bin/python3), which run it and its test.
# Idempotent: with these versions installed it does nothing.
set -euo pipefail

PROTOBUF_VERSION="${PROTOBUF_VERSION:-3.21.12-3+deb12u1}"
GRPC_VERSION="${GRPC_VERSION:-1.51.1-3+b1}"
packages=(
	"protobuf-compiler=$PROTOBUF_VERSION"
	"libprotobuf-dev=$PROTOBUF_VERSION"
	"protobuf-compiler-grpc=$GRPC_VERSION"
	"python3-protobuf=$PROTOBUF_VERSION"
	"python3-grpcio=$GRPC_VERSION"
)

missing=()
for p in "${packages[@]}"; do
	name=${p%%=*} version=${p#*=}
	if [[ "$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null)" != "install ok installed $version" ]]; then
		missing+=("$p")
	fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "Python client tools already installed (protoc $PROTOBUF_VERSION, grpc $GRPC_VERSION)"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "install-python-client: installing Debian packages needs root (run with sudo)" >&2
	exit 1
fi
apt-get update -qq
echo "installing ${missing[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
