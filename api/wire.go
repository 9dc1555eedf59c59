package api

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/fingerprint"
)

// The wire messages (package stasisv1, generated from
// api/proto/stasis/v1/stasis.proto) and this package's types, which
// programs in Go use, are converted here and nowhere else: each type's
// Wire method, and a FromWire function per message.

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// timeOf is the zero time for an unset timestamp, as the Go types have it.
func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func (t Template) Wire() *stasisv1.Template {
	return &stasisv1.Template{
		Name: t.Name, Bundle: t.Bundle, Rootfs: t.Rootfs, Args: t.Args, Env: t.Env,
		Gpus: int32(t.GPUs), MemoryBytes: t.MemoryBytes, Durable: t.Durable,
		Probe:     &stasisv1.Probe{Command: t.Probe.Command, Url: t.Probe.URL, TimeoutSeconds: t.Probe.TimeoutSeconds},
		Snapshots: &stasisv1.SnapshotConfig{OnPause: string(t.Snapshots.OnPause), OnCommit: string(t.Snapshots.OnCommit)},
		Golden:    t.Golden, CreatedAt: timestamp(t.CreatedAt),
		Runtime: t.Runtime, Vm: t.VM.wire(),
		Network: t.Network.wire(), Ports: portsWire(t.Ports), Idle: t.Idle.wire(), WakeTimeout: t.WakeTimeout, Restart: t.Restart, Image: t.Image, Mounts: wireAll(t.Mounts, Mount.wire),
	}
}

func (m Mount) wire() *stasisv1.Mount {
	return &stasisv1.Mount{Source: m.Source, Target: m.Target, ReadWrite: m.ReadWrite}
}

func mountFromWire(m *stasisv1.Mount) Mount {
	return Mount{Source: m.GetSource(), Target: m.GetTarget(), ReadWrite: m.GetReadWrite()}
}

func (n Network) wire() *stasisv1.Network {
	if n == (Network{}) {
		return nil
	}
	return &stasisv1.Network{Mode: n.Mode, Netns: n.Netns}
}

func networkFromWire(m *stasisv1.Network) Network {
	return Network{Mode: m.GetMode(), Netns: m.GetNetns()}
}

func portsWire(ports []Port) []*stasisv1.Port {
	var out []*stasisv1.Port
	for _, p := range ports {
		out = append(out, &stasisv1.Port{HostIp: p.HostIP, HostPort: int32(p.HostPort), ContainerPort: int32(p.ContainerPort)})
	}
	return out
}

func portsFromWire(m []*stasisv1.Port) []Port {
	var out []Port
	for _, p := range m {
		out = append(out, Port{HostIP: p.GetHostIp(), HostPort: int(p.GetHostPort()), ContainerPort: int(p.GetContainerPort())})
	}
	return out
}

func (i *Idle) wire() *stasisv1.Idle {
	if i == nil {
		return nil
	}
	return &stasisv1.Idle{After: i.After, Then: i.Then}
}

func idleFromWire(m *stasisv1.Idle) *Idle {
	if m == nil {
		return nil
	}
	return &Idle{After: m.GetAfter(), Then: m.GetThen()}
}

func (v *VM) wire() *stasisv1.VM {
	if v == nil {
		return nil
	}
	m := &stasisv1.VM{Kernel: v.Kernel, Initramfs: v.Initramfs, Cmdline: v.Cmdline, Cpus: int32(v.CPUs)}
	for _, d := range v.Devices {
		m.Devices = append(m.Devices, &stasisv1.Device{Id: d.ID, Driver: d.Driver, Props: d.Props})
	}
	return m
}

func vmFromWire(m *stasisv1.VM) *VM {
	if m == nil {
		return nil
	}
	v := &VM{Kernel: m.GetKernel(), Initramfs: m.GetInitramfs(), Cmdline: m.GetCmdline(), CPUs: int(m.GetCpus())}
	for _, d := range m.GetDevices() {
		v.Devices = append(v.Devices, Device{ID: d.GetId(), Driver: d.GetDriver(), Props: d.GetProps()})
	}
	return v
}

func TemplateFromWire(m *stasisv1.Template) Template {
	return Template{
		Name: m.GetName(), Bundle: m.GetBundle(), Rootfs: m.GetRootfs(), Args: m.GetArgs(), Env: m.GetEnv(),
		GPUs: int(m.GetGpus()), MemoryBytes: m.GetMemoryBytes(), Durable: m.GetDurable(),
		Probe:     Probe{Command: m.GetProbe().GetCommand(), URL: m.GetProbe().GetUrl(), TimeoutSeconds: m.GetProbe().GetTimeoutSeconds()},
		Snapshots: SnapshotConfig{OnPause: Scope(m.GetSnapshots().GetOnPause()), OnCommit: Scope(m.GetSnapshots().GetOnCommit())},
		Golden:    m.GetGolden(), CreatedAt: timeOf(m.GetCreatedAt()),
		Runtime: m.GetRuntime(), VM: vmFromWire(m.GetVm()),
		Network: networkFromWire(m.GetNetwork()), Ports: portsFromWire(m.GetPorts()), Idle: idleFromWire(m.GetIdle()), WakeTimeout: m.GetWakeTimeout(), Restart: m.GetRestart(), Image: m.GetImage(), Mounts: fromWireAll(m.GetMounts(), mountFromWire),
	}
}

func (a Actor) Wire() *stasisv1.Actor {
	m := &stasisv1.Actor{
		Id: a.ID, Template: a.Template, Runtime: a.Runtime, State: string(a.State), Reason: a.Reason, Sandbox: a.Sandbox, Idle: a.Idle, ExitCode: int32(a.ExitCode), ExitedAt: timestamp(a.ExitedAt),
		CreatedAt: timestamp(a.CreatedAt), UpdatedAt: timestamp(a.UpdatedAt),
	}
	if a.Snapshot != nil {
		m.Snapshot = a.Snapshot.Wire()
	}
	if n := a.Network; n != nil {
		m.Network = &stasisv1.ActorNetwork{Mode: n.Mode, Address: n.Address, Ports: portsWire(n.Ports)}
	}
	if o := a.Operation; o != nil {
		m.Operation = &stasisv1.Operation{
			Id: o.ID, Kind: o.Kind, RequestId: o.RequestID, State: o.State, Step: o.Step, Error: o.Error,
			Deadline: timestamp(o.Deadline), StartedAt: timestamp(o.StartedAt),
		}
	}
	return m
}

func ActorFromWire(m *stasisv1.Actor) Actor {
	a := Actor{
		ID: m.GetId(), Template: m.GetTemplate(), Runtime: m.GetRuntime(), State: State(m.GetState()), Reason: m.GetReason(), Sandbox: m.GetSandbox(), Idle: m.GetIdle(), ExitCode: int(m.GetExitCode()), ExitedAt: timeOf(m.GetExitedAt()),
		CreatedAt: timeOf(m.GetCreatedAt()), UpdatedAt: timeOf(m.GetUpdatedAt()),
	}
	if m.GetSnapshot() != nil {
		s := SnapshotFromWire(m.GetSnapshot())
		a.Snapshot = &s
	}
	if n := m.GetNetwork(); n != nil {
		a.Network = &ActorNetwork{Mode: n.GetMode(), Address: n.GetAddress(), Ports: portsFromWire(n.GetPorts())}
	}
	if o := m.GetOperation(); o != nil {
		a.Operation = &Operation{
			ID: o.GetId(), Kind: o.GetKind(), RequestID: o.GetRequestId(), State: o.GetState(), Step: o.GetStep(), Error: o.GetError(),
			Deadline: timeOf(o.GetDeadline()), StartedAt: timeOf(o.GetStartedAt()),
		}
	}
	return a
}

func (s Snapshot) Wire() *stasisv1.Snapshot {
	return &stasisv1.Snapshot{
		Id: s.ID, Actor: s.Actor, Template: s.Template, Kind: string(s.Kind), Scope: string(s.Scope),
		Dir: s.Dir, Stored: s.Stored, SizeBytes: s.SizeBytes, CreatedAt: timestamp(s.CreatedAt),
	}
}

func SnapshotFromWire(m *stasisv1.Snapshot) Snapshot {
	return Snapshot{
		ID: m.GetId(), Actor: m.GetActor(), Template: m.GetTemplate(), Kind: SnapshotKind(m.GetKind()), Scope: Scope(m.GetScope()),
		Dir: m.GetDir(), Stored: m.GetStored(), SizeBytes: m.GetSizeBytes(), CreatedAt: timeOf(m.GetCreatedAt()),
	}
}

func (e Event) Wire() *stasisv1.Event {
	return &stasisv1.Event{Seq: e.Seq, Actor: e.Actor, Operation: e.Operation, Step: e.Step, Message: e.Message, Error: e.Error, DurationSeconds: e.Duration, At: timestamp(e.At)}
}

func EventFromWire(m *stasisv1.Event) Event {
	return Event{Seq: m.GetSeq(), Actor: m.GetActor(), Operation: m.GetOperation(), Step: m.GetStep(), Message: m.GetMessage(), Error: m.GetError(), Duration: m.GetDurationSeconds(), At: timeOf(m.GetAt())}
}

func (e Events) Wire() *stasisv1.Events {
	return &stasisv1.Events{Events: wireAll(e.Events, Event.Wire), Last: e.Last}
}

func EventsFromWire(m *stasisv1.Events) Events {
	return Events{Events: fromWireAll(m.GetEvents(), EventFromWire), Last: m.GetLast()}
}

func (r RunRequest) Wire() *stasisv1.RunRequest {
	return &stasisv1.RunRequest{Template: r.Template, Id: r.ID, RequestId: r.RequestID, Cold: r.Cold, FromStored: r.FromStored,
		Network: r.Network.wire(), Ports: portsWire(r.Ports)}
}

func RunRequestFromWire(m *stasisv1.RunRequest) RunRequest {
	return RunRequest{Template: m.GetTemplate(), ID: m.GetId(), RequestID: m.GetRequestId(), Cold: m.GetCold(), FromStored: m.GetFromStored(),
		Network: networkFromWire(m.GetNetwork()), Ports: portsFromWire(m.GetPorts())}
}

func (r OpRequest) Wire() *stasisv1.OpRequest {
	return &stasisv1.OpRequest{Id: r.ID, RequestId: r.RequestID}
}

func OpRequestFromWire(m *stasisv1.OpRequest) OpRequest {
	return OpRequest{ID: m.GetId(), RequestID: m.GetRequestId()}
}

func (r DeleteRequest) Wire() *stasisv1.DeleteRequest {
	return &stasisv1.DeleteRequest{Id: r.ID, RequestId: r.RequestID, Purge: r.Purge, Force: r.Force}
}

func DeleteRequestFromWire(m *stasisv1.DeleteRequest) DeleteRequest {
	return DeleteRequest{ID: m.GetId(), RequestID: m.GetRequestId(), Purge: m.GetPurge(), Force: m.GetForce()}
}

func (d Deleted) Wire() *stasisv1.Deleted {
	return &stasisv1.Deleted{Id: d.ID, Deleted: d.Deleted, KeptSnapshots: d.KeptSnapshots, NetworkLeft: d.NetworkLeft}
}

func DeletedFromWire(m *stasisv1.Deleted) Deleted {
	return Deleted{ID: m.GetId(), Deleted: m.GetDeleted(), KeptSnapshots: m.GetKeptSnapshots(), NetworkLeft: m.GetNetworkLeft()}
}

func (r WarmRequest) Wire() *stasisv1.WarmRequest {
	return &stasisv1.WarmRequest{Template: r.Template, RequestId: r.RequestID}
}

func WarmRequestFromWire(m *stasisv1.WarmRequest) WarmRequest {
	return WarmRequest{Template: m.GetTemplate(), RequestID: m.GetRequestId()}
}

func (r ExecRequest) Wire() *stasisv1.ExecRequest {
	return &stasisv1.ExecRequest{Id: r.ID, Args: r.Args, Stdin: r.Stdin, Tty: r.TTY, Window: r.Window.Wire()}
}

func ExecRequestFromWire(m *stasisv1.ExecRequest) ExecRequest {
	return ExecRequest{ID: m.GetId(), Args: m.GetArgs(), Stdin: m.GetStdin(), TTY: m.GetTty(), Window: WindowSizeFromWire(m.GetWindow())}
}

func (w *WindowSize) Wire() *stasisv1.WindowSize {
	if w == nil {
		return nil
	}
	return &stasisv1.WindowSize{Rows: uint32(w.Rows), Cols: uint32(w.Cols)}
}

// WindowSizeFromWire is nil for nil; sizes past a terminal's 65535 are
// held at it.
func WindowSizeFromWire(m *stasisv1.WindowSize) *WindowSize {
	if m == nil {
		return nil
	}
	return &WindowSize{Rows: uint16(min(m.GetRows(), math.MaxUint16)), Cols: uint16(min(m.GetCols(), math.MaxUint16))}
}

func (r ExecResult) Wire() *stasisv1.ExecResult {
	return &stasisv1.ExecResult{ExitCode: int32(r.ExitCode), Stdout: r.Stdout, Stderr: r.Stderr}
}

func ExecResultFromWire(m *stasisv1.ExecResult) ExecResult {
	return ExecResult{ExitCode: int(m.GetExitCode()), Stdout: m.GetStdout(), Stderr: m.GetStderr()}
}

func (r EventsRequest) Wire() *stasisv1.EventsRequest {
	return &stasisv1.EventsRequest{Id: r.ID, After: r.After}
}

func EventsRequestFromWire(m *stasisv1.EventsRequest) EventsRequest {
	return EventsRequest{ID: m.GetId(), After: m.GetAfter()}
}

func (r LeaseRequest) Wire() *stasisv1.LeaseRequest {
	return &stasisv1.LeaseRequest{Holder: r.Holder, ValidForSeconds: r.ValidForSeconds, Bound: r.Bound, Epoch: r.Epoch}
}

func (r LogsRequest) Wire() *stasisv1.LogsRequest {
	return &stasisv1.LogsRequest{Id: r.ID, Follow: r.Follow, Tail: r.Tail, Since: timestamp(r.Since)}
}

func LogsRequestFromWire(m *stasisv1.LogsRequest) LogsRequest {
	return LogsRequest{ID: m.GetId(), Follow: m.GetFollow(), Tail: m.Tail, Since: timeOf(m.GetSince())}
}

func LeaseRequestFromWire(m *stasisv1.LeaseRequest) LeaseRequest {
	return LeaseRequest{Holder: m.GetHolder(), ValidForSeconds: m.GetValidForSeconds(), Bound: m.GetBound(), Epoch: m.GetEpoch()}
}

func (l Lease) Wire() *stasisv1.Lease {
	m := &stasisv1.Lease{Holder: l.Holder, Until: timestamp(l.Until), Lapsed: l.Lapsed, Bound: l.Bound, Fenced: l.Fenced, Epoch: l.Epoch}
	for _, c := range l.FenceCommands {
		m.FenceCommands = append(m.FenceCommands, &stasisv1.Command{Args: c})
	}
	return m
}

func LeaseFromWire(m *stasisv1.Lease) Lease {
	l := Lease{Holder: m.GetHolder(), Until: timeOf(m.GetUntil()), Lapsed: m.GetLapsed(), Bound: m.GetBound(), Fenced: m.GetFenced(), Epoch: m.GetEpoch()}
	for _, c := range m.GetFenceCommands() {
		l.FenceCommands = append(l.FenceCommands, c.GetArgs())
	}
	return l
}

func (s NodeStatus) Wire() *stasisv1.NodeStatus {
	st := s.Store
	return &stasisv1.NodeStatus{
		Store: &stasisv1.StoreStatus{
			Location: st.Location, Configured: st.Configured, Available: st.Available, Error: st.Error,
			Since: timestamp(st.Since), Failures: int32(st.Failures),
			Retries: st.Retries, ResumedReads: st.ResumedReads, Stalls: st.Stalls, BytesReread: st.BytesReread,
		},
		Lease: s.Lease.Wire(),
	}
}

func NodeStatusFromWire(m *stasisv1.NodeStatus) NodeStatus {
	st := m.GetStore()
	return NodeStatus{
		Store: StoreStatus{
			Location: st.GetLocation(), Configured: st.GetConfigured(), Available: st.GetAvailable(), Error: st.GetError(),
			Since: timeOf(st.GetSince()), Failures: int(st.GetFailures()),
			Retries: st.GetRetries(), ResumedReads: st.GetResumedReads(), Stalls: st.GetStalls(), BytesReread: st.GetBytesReread(),
		},
		Lease: LeaseFromWire(m.GetLease()),
	}
}

// NodeInfoWire carries a fingerprint as the JSON object of its own format.
func NodeInfoWire(f NodeInfo) (*structpb.Struct, error) {
	data, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode the node's fingerprint: %w", err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("encode the node's fingerprint: %w", err)
	}
	return s, nil
}

func NodeInfoFromWire(s *structpb.Struct) (NodeInfo, error) {
	var f fingerprint.Fingerprint
	data, err := protojson.Marshal(s)
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err != nil {
		return f, fmt.Errorf("stasisd answered with a node fingerprint this client cannot read: %w", err)
	}
	return f, nil
}

func wireAll[T any, M any](items []T, wire func(T) M) []M {
	out := make([]M, 0, len(items))
	for _, item := range items {
		out = append(out, wire(item))
	}
	return out
}

func fromWireAll[M any, T any](items []M, from func(M) T) []T {
	out := make([]T, 0, len(items))
	for _, item := range items {
		out = append(out, from(item))
	}
	return out
}

func (t Templates) Wire() *stasisv1.Templates {
	return &stasisv1.Templates{Templates: wireAll(t.Templates, Template.Wire)}
}

func (a Actors) Wire() *stasisv1.Actors {
	return &stasisv1.Actors{Actors: wireAll(a.Actors, Actor.Wire)}
}

func (s Snapshots) Wire() *stasisv1.Snapshots {
	return &stasisv1.Snapshots{Snapshots: wireAll(s.Snapshots, Snapshot.Wire)}
}

func (s StagedSnapshot) Wire() *stasisv1.StagedSnapshot {
	return &stasisv1.StagedSnapshot{Name: s.Name, Dir: s.Dir, SizeBytes: s.SizeBytes, UsedAt: timestamp(s.UsedAt), InUse: int32(s.InUse), Already: s.Already}
}

func StagedSnapshotFromWire(m *stasisv1.StagedSnapshot) StagedSnapshot {
	return StagedSnapshot{Name: m.GetName(), Dir: m.GetDir(), SizeBytes: m.GetSizeBytes(), UsedAt: timeOf(m.GetUsedAt()), InUse: int(m.GetInUse()), Already: m.GetAlready()}
}

func (s StagedSnapshots) Wire() *stasisv1.StagedSnapshots {
	return &stasisv1.StagedSnapshots{Staged: wireAll(s.Staged, StagedSnapshot.Wire)}
}
