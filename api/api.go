// Package api serves stasisd's service over the Connect protocol with JSON
// bodies, so that any Connect client and plain curl work:
//
//	curl --unix-socket /run/stasis/stasisd.sock -H 'Content-Type: application/json' \
//	    -d '{"id":"a1"}' http://stasisd/stasis.v1.Stasis/InspectActor
//
// Every procedure is unary, at /stasis.v1.Stasis/NAME. Errors come back as
// Connect errors: a code (not_found, already_exists, failed_precondition,
// aborted for a busy actor, invalid_argument, internal) and a message that
// names the cause and the fix. /metrics serves Prometheus metrics and
// /healthz answers ok.
package api

import (
	"encoding/json"

	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/service"
)

// ServiceName prefixes every procedure.
const ServiceName = "stasis.v1.Stasis"

// The messages that are not the service's own types.
type (
	Empty   struct{}
	ActorID struct {
		ID string `json:"id"`
	}
	Templates struct {
		Templates []service.Template `json:"templates"`
	}
	Actors struct {
		Actors []service.Actor `json:"actors"`
	}
	EventsRequest struct {
		ID    string `json:"id"`
		After int64  `json:"after,omitempty"`
	}
	Events struct {
		Events []service.Event `json:"events"`
	}
	SnapshotsRequest struct {
		Actor string `json:"actor,omitempty"`
	}
	Snapshots struct {
		Snapshots []service.Snapshot `json:"snapshots"`
	}
	SnapshotID struct {
		ID string `json:"id"`
	}
	NodeInfo = node.Fingerprint
)

// jsonCodec carries the messages as plain JSON. It takes the "json" name,
// in place of Connect's protobuf JSON, because the messages are Go structs.
type jsonCodec struct{}

func (jsonCodec) Name() string                  { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error {
	return json.Unmarshal(data, v)
}
