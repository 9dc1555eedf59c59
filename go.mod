module github.com/stasis-run/stasis

go 1.26.0

require (
	github.com/ebitengine/purego v0.11.3
	github.com/opencontainers/runtime-spec v1.2.1
	golang.org/x/sys v0.50.0
	tags.cncf.io/container-device-interface/specs-go v1.1.1
)
