// Package api is stasisd's API for programs in Go: its types, its error
// codes and a client. It is a leaf: a program that talks to stasisd links
// this package and the formats it names (node fingerprints), not the
// daemon.
//
// The API itself is defined in protobuf (api/proto/stasis/v1/stasis.proto;
// the Go types and Connect code generated from it are in api/gen) and
// served on stasisd's unix socket as Connect, gRPC and gRPC-Web, with
// binary or JSON bodies, so that a client in any language can be generated
// and plain curl works:
//
//	curl --unix-socket /run/stasis/stasisd.sock -H 'Content-Type: application/json' \
//	    -d '{"id":"a1"}' http://stasisd/stasis.v1.Stasis/InspectActor
//
// Every procedure is at /stasis.v1.Stasis/NAME; WatchEvents streams an
// actor's history as it grows. A request may be at most MaxRequestBytes
// (after decompression), and a JSON field the message does not have is
// refused rather than ignored. Errors are Connect errors whose code is the
// error's category (package errdefs): not_found, already_exists,
// invalid_argument, failed_precondition, aborted (busy), data_loss
// (corrupt), unavailable, deadline_exceeded, resource_exhausted, canceled
// or internal, with a message that names the cause and the fix. /metrics
// serves Prometheus metrics and /healthz answers ok (service/server).
package api

import (
	"io"

	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"
)

// ServiceName prefixes every procedure.
const ServiceName = stasisv1connect.StasisName

// MaxRequestBytes bounds a request message. Requests are small (a template
// with its environment is a few KiB); a larger one is refused with
// resource_exhausted before it is parsed.
const MaxRequestBytes = 1 << 20

// MaxEventsPage bounds the events of every actor one Events answer holds.
const MaxEventsPage = 1000

// ExecStreams are an exec's standard streams, copied as they come, and its
// terminal's new sizes (ExecAttach). Stdout and Stderr are each written
// from one goroutine at a time.
type ExecStreams struct {
	// Stdin is read for the command's standard input until its end,
	// which the command reads as end of file; nil: none.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Resize, when set, gives the terminal's new size each time it
	// changes (TTY only).
	Resize <-chan WindowSize
}

// MaxExecStdin bounds an exec's standard input, which travels whole in its
// request (base64 in JSON, within MaxRequestBytes).
const MaxExecStdin = 512 << 10

// Procedure is the URL path of a procedure.
func Procedure(name string) string { return "/" + ServiceName + "/" + name }
