module github.com/stasis-run/stasis

go 1.26.0

require (
	github.com/ebitengine/purego v0.11.3
	github.com/opencontainers/runtime-spec v1.2.1
	github.com/spf13/cobra v1.10.2
	golang.org/x/sys v0.50.0
	tags.cncf.io/container-device-interface/specs-go v1.1.1
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/restic/chunker v0.4.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
