// Package integration holds Stasis's end-to-end tests: they build the real
// stasisd and stasis binaries, start stasisd on a fresh data folder and
// drive real runsc sandboxes through its API and the CLI, with faults
// injected from outside (kill -9, a full disk, a hung runsc, hostile
// requests). They need root and runsc. The service's own logic is tested
// without either in package service, over the fake runtime.
package integration
