# Sourced by the build and test scripts: stasis reads GPUs through NVIDIA's
# go-nvml, which needs cgo, so a C compiler must be there (Debian's gcc is
# installed when it is not). NVML's header marks calls stasis does not use as
# deprecated; those warnings are silenced.
if ! command -v cc >/dev/null; then
	apt-get update -qq && apt-get install -y -qq gcc >/dev/null
fi
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
