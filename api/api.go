// Package api is stasisd's API: its wire types, its error codes and a
// client. It is a leaf: a program that talks to stasisd links this package
// and the formats it names (node fingerprints), not the daemon.
//
// The protocol is Connect with JSON bodies over a unix socket, so that any
// Connect client and plain curl work:
//
//	curl --unix-socket /run/stasis/stasisd.sock -H 'Content-Type: application/json' \
//	    -d '{"id":"a1"}' http://stasisd/stasis.v1.Stasis/InspectActor
//
// Every procedure is unary, at /stasis.v1.Stasis/NAME. A request may be at
// most MaxRequestBytes (after decompression), and a field the request type
// does not have is refused rather than ignored. Errors are Connect errors
// whose code is the error's category (package errdefs): not_found,
// already_exists, invalid_argument, failed_precondition, aborted (busy),
// data_loss (corrupt), unavailable, deadline_exceeded, resource_exhausted,
// canceled or internal, with a message that names the cause and the fix.
// /metrics serves Prometheus metrics and /healthz answers ok (api/server).
package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ServiceName prefixes every procedure.
const ServiceName = "stasis.v1.Stasis"

// MaxRequestBytes bounds a request message. Requests are small (a template
// with its environment is a few KiB); a larger one is refused with
// resource_exhausted before it is parsed.
const MaxRequestBytes = 1 << 20

// Procedure is the URL path of a procedure.
func Procedure(name string) string { return "/" + ServiceName + "/" + name }

// Codec carries the messages as plain JSON. It takes the "json" name, in
// place of Connect's protobuf JSON, because the messages are Go structs. It
// refuses fields a message does not have, so that a misspelt field is an
// error rather than a silent default.
type Codec struct{}

func (Codec) Name() string                  { return "json" }
func (Codec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (Codec) Unmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the request is not a valid %T: %w", v, err)
	}
	if dec.More() {
		return fmt.Errorf("the request holds more than one JSON value")
	}
	return nil
}
