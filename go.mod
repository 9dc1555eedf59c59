module github.com/stasis-run/stasis

go 1.26.0

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/opencontainers/runtime-spec v1.2.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
