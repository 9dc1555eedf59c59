package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
)

// State is where an actor stands.
type State string

// The actor states. Those ending in -ING are transitional: an operation is
// running, and only a daemon that starts after a crash ever sees one
// without it (and settles it before it serves).
const (
	Creating   State = "CREATING"
	Running    State = "RUNNING"
	Pausing    State = "PAUSING"
	Paused     State = "PAUSED"
	Suspending State = "SUSPENDING"
	Suspended  State = "SUSPENDED"
	Resuming   State = "RESUMING"
	Deleting   State = "DELETING"
	Crashed    State = "CRASHED"
	// Exited: its process ended on its own (Actor.ExitCode says how);
	// resume starts it again from its latest snapshot, delete removes it.
	Exited State = "EXITED"
	// Fenced: frozen in place (its sandbox paused, nothing saved) because
	// this node's fleet lease lapsed: another node may run it now. A
	// renewal that says it is still bound here thaws it; otherwise the
	// fleet removes this copy. Without a lease, resume thaws it.
	Fenced State = "FENCED"
)

// States lists every state.
var States = []State{Creating, Running, Pausing, Paused, Suspending, Suspended, Resuming, Deleting, Crashed, Exited, Fenced}

// Transitional tells whether an operation is in flight in state s.
func (s State) Transitional() bool {
	switch s {
	case Creating, Pausing, Suspending, Resuming, Deleting:
		return true
	}
	return false
}

// Scope is what a snapshot holds: Full (process memory, GPU state, root
// filesystem) or Data (the durable folders only).
type Scope string

const (
	ScopeFull Scope = "Full"
	ScopeData Scope = "Data"
)

// Template is a recipe for actors.
type Template struct {
	Name string `json:"name"`
	// Runtime runs the actors: RuntimeGVisor (also when empty) or
	// RuntimeMicroVM.
	Runtime string `json:"runtime,omitempty"`
	// Bundle is an OCI bundle folder (config.json and its rootfs) the
	// actors run; or Rootfs and Args describe the process directly.
	Bundle string   `json:"bundle,omitempty"`
	Rootfs string   `json:"rootfs,omitempty"`
	Args   []string `json:"args,omitempty"`
	Env    []string `json:"env,omitempty"`
	// VM describes the guest of a micro-VM template without a bundle
	// (Args is then the workload its agent starts); a bundle gives it in
	// its spec's vm section instead.
	VM *VM `json:"vm,omitempty"`
	// GPUs gives actors the node's NVIDIA devices and the stasis-cuda
	// helper; a GPU suspend moves their device memory into host memory.
	// A micro-VM gets its GPU as a device in VM.Devices, and its guest
	// agent moves the device memory.
	GPUs int `json:"gpus,omitempty"`
	// MemoryBytes is the sandbox's memory limit (a micro-VM's guest
	// memory); 0 leaves it unlimited (256 MiB for a micro-VM).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// Durable are folders inside the sandbox that live on the host, per
	// actor, and that Data snapshots keep.
	Durable   []string       `json:"durable,omitempty"`
	Probe     Probe          `json:"probe"`
	Snapshots SnapshotConfig `json:"snapshots"`
	// Network is the network the actors get; Ports are published for
	// each (docs/service.md, "Networking").
	Network Network `json:"network,omitempty"`
	Ports   []Port  `json:"ports,omitempty"`
	// Idle, when set, pauses or suspends an actor that no connection
	// through its published ports and no exec has used for a while;
	// WakeTimeout bounds how long a connection that arrives for a paused
	// or suspended actor is held while it wakes (2m when empty). Both are
	// Go durations ("10m", "90s").
	Idle        *Idle  `json:"idle,omitempty"`
	WakeTimeout string `json:"wakeTimeout,omitempty"`
	// Restart is what happens to an actor whose process ends on its own
	// (docker's restart policies): RestartNever (also when empty),
	// RestartOnFailure (an exit code other than 0, or a signal) or
	// RestartAlways. The process is booted again from the template, its
	// durable folders as they are, after a pause that doubles with each
	// restart that ran less than RestartReset (from RestartFirstDelay up
	// to RestartMaxDelay).
	Restart string `json:"restart,omitempty"`
	// Image is a container image on the node, an OCI image layout folder
	// or a `docker save` / `podman save` tarball, instead of a bundle or
	// rootfs: stasisd unpacks it into a bundle of its own when the
	// template is made (Bundle then names that), its entrypoint, cmd,
	// env, working folder and user the process's; Args replace its cmd.
	Image string `json:"image,omitempty"`
	// Mounts are host folders bound into each actor's sandbox (gVisor),
	// within the host path policy (a read-write one needs a folder
	// allowed read-write).
	Mounts []Mount `json:"mounts,omitempty"`
	// Golden is the snapshot new actors start from, once warmed (set by
	// stasisd).
	Golden    string    `json:"golden,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// ExitUnknown is the exit code of a process that ended in a way its
// runtime could not say (Actor.ExitCode).
const ExitUnknown = -1

// The restart policies (Template.Restart) and their pauses.
const (
	RestartNever      = "never"
	RestartOnFailure  = "on-failure"
	RestartAlways     = "always"
	RestartFirstDelay = 100 * time.Millisecond
	RestartMaxDelay   = time.Minute
	RestartReset      = 10 * time.Second
)

// Mount is a host folder, Source, bound at Target in a sandbox, read-only
// unless ReadWrite.
type Mount struct {
	Source    string `json:"source"`
	Target    string `json:"target"`
	ReadWrite bool   `json:"readWrite,omitempty"`
}

// ParseMount reads a mount as the CLI takes it, docker's -v form:
// SOURCE:TARGET[:ro|rw] (read-only unless rw).
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Mount{}, fmt.Errorf("%w: mount %q: want SOURCE:TARGET[:ro|rw]", errdefs.ErrInvalidArgument, s)
	}
	m := Mount{Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
		case "rw":
			m.ReadWrite = true
		default:
			return Mount{}, fmt.Errorf("%w: mount %q: %q: want ro or rw", errdefs.ErrInvalidArgument, s, parts[2])
		}
	}
	return m, nil
}

// Network is the network an actor gets.
type Network struct {
	// Mode is cni (a namespace of its own on the node's CNI network),
	// netns (the namespace at Netns, which the caller made), host (the
	// node's) or none (its loopback alone); empty: the node's default,
	// cni where CNI is installed, none otherwise.
	Mode  string `json:"mode,omitempty"`
	Netns string `json:"netns,omitempty"`
}

// Port is a published port: stasisd listens at HostIP:HostPort on the node
// (every address when HostIP is empty) and hands each TCP connection to
// the actor's ContainerPort, waking the actor first when it is paused or
// suspended. HostPort 0 asks for a free port, which the node picks when the
// actor is made and keeps for it (many actors of one template on a node).
type Port struct {
	HostIP        string `json:"hostIP,omitempty"`
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
}

// String is the port as docker run -p writes it.
func (p Port) String() string {
	s := fmt.Sprintf("%d:%d", p.HostPort, p.ContainerPort)
	if p.HostIP != "" {
		s = net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort)) + ":" + strconv.Itoa(p.ContainerPort)
	}
	return s
}

// ParsePort reads a published port as docker run -p does: HOSTPORT:PORT,
// or HOSTIP:HOSTPORT:PORT ([::1]:8080:8000 for IPv6), TCP only; PORT alone
// (or host port 0) publishes it on a free host port the node picks.
func ParsePort(s string) (Port, error) {
	bad := func(why string) (Port, error) {
		return Port{}, fmt.Errorf("%w: port %q: %s; want [HOSTIP:]HOSTPORT:PORT, such as 8080:8000 or 127.0.0.1:8080:8000", errdefs.ErrInvalidArgument, s, why)
	}
	s2, proto, _ := strings.Cut(s, "/")
	if proto != "" && proto != "tcp" {
		return bad("only TCP is published")
	}
	var p Port
	i := strings.LastIndex(s2, ":")
	container := s2[i+1:]
	host := ""
	if i >= 0 {
		host = s2[:i]
	}
	var err error
	if p.ContainerPort, err = strconv.Atoi(container); err != nil {
		return bad("the actor's port is not a number")
	}
	if host != "" {
		hostPort := host
		if j := strings.LastIndex(host, ":"); j >= 0 {
			p.HostIP, hostPort = strings.TrimSuffix(strings.TrimPrefix(host[:j], "["), "]"), host[j+1:]
		}
		if hostPort != "" { // HOSTIP::PORT: a free host port
			if p.HostPort, err = strconv.Atoi(hostPort); err != nil {
				return bad("the host port is not a number")
			}
		}
	}
	if err := p.Check(); err != nil {
		return Port{}, err
	}
	return p, nil
}

// Check refuses a port out of range or an address that is not one.
func (p Port) Check() error {
	switch {
	case p.HostPort < 0 || p.HostPort > 65535 || p.ContainerPort < 1 || p.ContainerPort > 65535:
		return fmt.Errorf("%w: port %s: ports are 1-65535 (host port 0: a free one)", errdefs.ErrInvalidArgument, p)
	case p.HostIP != "" && net.ParseIP(p.HostIP) == nil:
		return fmt.Errorf("%w: port %s: %q is not an IP address", errdefs.ErrInvalidArgument, p, p.HostIP)
	}
	return nil
}

// Idle is what happens to an actor left idle: after that long (a Go
// duration) with no connection through its published ports and no exec,
// it is paused (IdlePause: kept, resumed in moments) or suspended
// (IdleSuspend: its GPU and memory freed).
type Idle struct {
	After string `json:"after"`
	Then  string `json:"then"`
}

// What an idle actor becomes.
const (
	IdlePause   = "pause"
	IdleSuspend = "suspend"
)

// ActorNetwork is an actor's network as set up on its node.
type ActorNetwork struct {
	Mode string `json:"mode"`
	// Address is the actor's address on the node's network, when it has
	// one (cni, and netns where the namespace has one).
	Address string `json:"address,omitempty"`
	Ports   []Port `json:"ports,omitempty"`
}

// The runtimes a template can name.
const (
	// RuntimeGVisor runs actors in gVisor sandboxes (runsc).
	RuntimeGVisor = "gvisor"
	// RuntimeMicroVM runs actors as QEMU micro-VMs whose guest agent
	// starts the workload (docs/microvm.md).
	RuntimeMicroVM = "microvm"
)

// Runtimes lists the runtimes a template can name.
var Runtimes = []string{RuntimeGVisor, RuntimeMicroVM}

// VM is a micro-VM's guest: the kernel and initramfs it boots (host paths
// under the host path policy; the initramfs's /init must be
// stasis-agent), its kernel parameters, CPUs and PCI devices.
type VM struct {
	Kernel    string   `json:"kernel"`
	Initramfs string   `json:"initramfs"`
	Cmdline   []string `json:"cmdline,omitempty"`
	CPUs      int      `json:"cpus,omitempty"`
	Devices   []Device `json:"devices,omitempty"`
}

// Device is a PCI device a micro-VM gets: a GPU passed through
// (driver vfio-pci, props {"host": "0000:3b:00.0"}), or a stand-in.
type Device struct {
	ID     string            `json:"id"`
	Driver string            `json:"driver"`
	Props  map[string]string `json:"props,omitempty"`
}

// Probe says when an actor is ready: a command that exits 0 inside the
// sandbox, or a URL that answers 2xx.
type Probe struct {
	Command        []string `json:"command,omitempty"`
	URL            string   `json:"url,omitempty"`
	TimeoutSeconds float64  `json:"timeoutSeconds,omitempty"`
}

// SnapshotConfig picks the scope of each kind of snapshot: pause keeps one
// on this node for a fast resume, commit (suspend) stores one durably.
// Golden snapshots are always Full.
type SnapshotConfig struct {
	OnPause  Scope `json:"onPause,omitempty"`
	OnCommit Scope `json:"onCommit,omitempty"`
}

// Actor is one actor and where it stands.
type Actor struct {
	ID       string `json:"id"`
	Template string `json:"template"`
	// Runtime is the runtime its template named when it was made.
	Runtime string `json:"runtime"`
	State   State  `json:"state"`
	// Reason says why the actor is in its state: what crashed it, why it
	// cold-booted, what a failed operation left behind.
	Reason  string `json:"reason,omitempty"`
	Sandbox string `json:"sandbox"`
	// Snapshot is the actor's latest good snapshot, which resume uses.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
	// Operation is the operation in flight, if any.
	Operation *Operation `json:"operation,omitempty"`
	// Network is the actor's network on this node: its address and
	// published ports, kept while it is paused or suspended here.
	Network *ActorNetwork `json:"network,omitempty"`
	// Idle: its template's idle policy paused or suspended it (not a
	// caller); the next connection to its published ports wakes it.
	Idle bool `json:"idle,omitempty"`
	// ExitCode and ExitedAt say how and when its process ended, while it
	// is EXITED (or CRASHED by a signal: 128+N, as a shell says it);
	// ExitUnknown when the runtime could not say how.
	ExitCode  int       `json:"exitCode,omitempty"`
	ExitedAt  time.Time `json:"exitedAt,omitzero"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Operation is an operation on an actor.
type Operation struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	RequestID string `json:"requestId,omitempty"`
	// State is running, done or failed.
	State string `json:"state"`
	Step  string `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
	// Deadline is when a running operation is cut short and rolled back.
	Deadline  time.Time `json:"deadline,omitzero"`
	StartedAt time.Time `json:"startedAt"`
}

// SnapshotKind says what a snapshot is for.
type SnapshotKind string

const (
	// KindPause is kept on this node for a fast resume.
	KindPause SnapshotKind = "pause"
	// KindCommit is stored durably (suspend).
	KindCommit SnapshotKind = "commit"
	// KindGolden is a template's: new actors start from it.
	KindGolden SnapshotKind = "golden"
)

// Snapshot is a snapshot stasisd made.
type Snapshot struct {
	ID       string       `json:"id"`
	Actor    string       `json:"actor"`
	Template string       `json:"template"`
	Kind     SnapshotKind `json:"kind"`
	Scope    Scope        `json:"scope"`
	// Dir is the folder on this node ("" when not here); Stored the name
	// in the store ("" when not stored).
	Dir       string    `json:"dir,omitempty"`
	Stored    string    `json:"stored,omitempty"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
}

// Event is one line of an actor's history: a step of an operation, with
// its duration and outcome, or a note.
type Event struct {
	Seq       int64     `json:"seq"`
	Actor     string    `json:"actor,omitempty"`
	Operation string    `json:"operation,omitempty"`
	Step      string    `json:"step,omitempty"`
	Message   string    `json:"message,omitempty"`
	Error     string    `json:"error,omitempty"`
	Duration  float64   `json:"durationSeconds"`
	At        time.Time `json:"at"`
}

// Requests and responses.
type (
	Empty struct{}

	// RunRequest starts a new actor of a template.
	RunRequest struct {
		Template string `json:"template"`
		// ID names the actor; one is made up when empty.
		ID string `json:"id,omitempty"`
		// RequestID makes a retry harmless: a request with the same actor,
		// kind and id answers as the first one did.
		RequestID string `json:"requestId,omitempty"`
		// Cold boots the actor even when the template has a golden
		// snapshot.
		Cold bool `json:"cold,omitempty"`
		// FromStored starts the actor from this snapshot in stasisd's
		// store (one another node pushed: a fleet moves actors this way)
		// instead of from the template. It is never cold-booted instead:
		// a snapshot that cannot be restored here leaves the actor
		// CRASHED with the reason.
		FromStored string `json:"fromStored,omitempty"`
		// Network, when its mode is set, replaces the template's; Ports
		// are published beside the template's.
		Network Network `json:"network,omitempty"`
		Ports   []Port  `json:"ports,omitempty"`
	}

	// OpRequest names an actor for Pause, Suspend and Resume.
	OpRequest struct {
		ID        string `json:"id"`
		RequestID string `json:"requestId,omitempty"`
	}

	// DeleteRequest names an actor to delete.
	DeleteRequest struct {
		ID        string `json:"id"`
		RequestID string `json:"requestId,omitempty"`
		// Purge also deletes the actor's stored snapshots.
		Purge bool `json:"purge,omitempty"`
		// Force deletes the actor even where its network's plugins cannot
		// remove what they made for it (one fails, or never answers DEL):
		// its namespace is removed, and Deleted.NetworkLeft says what the
		// plugins may still hold.
		Force bool `json:"force,omitempty"`
	}

	// Deleted is what Delete answers.
	Deleted struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
		// KeptSnapshots are the stored snapshots left in the store.
		KeptSnapshots []string `json:"keptSnapshots,omitempty"`
		// NetworkLeft, set only by a forced delete, says why the actor's
		// network was not wholly removed: what its plugins may still hold.
		NetworkLeft string `json:"networkLeft,omitempty"`
	}

	// WarmRequest warms a template: its golden snapshot is made.
	WarmRequest struct {
		Template  string `json:"template"`
		RequestID string `json:"requestId,omitempty"`
	}

	TemplateName struct {
		Name string `json:"name"`
	}

	Templates struct {
		Templates []Template `json:"templates"`
	}

	ActorID struct {
		ID string `json:"id"`
	}

	Actors struct {
		Actors []Actor `json:"actors"`
	}

	// ExecRequest runs a command in a running actor.
	ExecRequest struct {
		ID   string   `json:"id"`
		Args []string `json:"args"`
		// Stdin is the command's standard input, whole (at most
		// MaxExecStdin); empty: none.
		Stdin []byte `json:"stdin,omitempty"`
		// TTY runs the command on a pseudo-terminal of Window's size,
		// its output all on stdout (ExecAttach; gVisor actors only).
		TTY    bool        `json:"tty,omitempty"`
		Window *WindowSize `json:"window,omitempty"`
	}

	// WindowSize is a terminal's size in characters.
	WindowSize struct {
		Rows uint16 `json:"rows"`
		Cols uint16 `json:"cols"`
	}

	// ExecResult is how the command ended.
	ExecResult struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}

	// EventsRequest asks for an actor's history after a sequence number
	// (they count across every actor); an empty ID asks for every actor's,
	// at most MaxEventsPage events an answer.
	EventsRequest struct {
		ID    string `json:"id"`
		After int64  `json:"after,omitempty"`
	}

	// LogsRequest picks a part of an actor's console (Logs). Since: only
	// what was written at or after it, to within the second at which
	// stasisd marks the console as it grows (zero: from the start of what
	// is kept). Tail: then only the last *Tail lines (nil: all; 0 with
	// Follow: only what comes).
	LogsRequest struct {
		ID     string    `json:"id"`
		Follow bool      `json:"follow,omitempty"`
		Tail   *int64    `json:"tail,omitempty"`
		Since  time.Time `json:"since,omitzero"`
	}

	// Events is a part of an actor's history, oldest first; Last is the
	// sequence number of the newest event the actor has, so that a
	// follower can start from the end without reading it all.
	Events struct {
		Events []Event `json:"events"`
		Last   int64   `json:"last"`
	}

	SnapshotsRequest struct {
		Actor string `json:"actor,omitempty"`
	}

	Snapshots struct {
		Snapshots []Snapshot `json:"snapshots"`
	}

	SnapshotID struct {
		ID string `json:"id"`
	}

	// NodeInfo is the node's fingerprint (docs/compatibility.md).
	NodeInfo = fingerprint.Fingerprint
)

// FleetActorID tells whether an actor id can be a fleet Actor's name (a
// Kubernetes object name: lowercase letters, digits, '-' and '.', starting
// and ending with a letter or digit). A fleet lease covers such actors
// only; the others (warm_TEMPLATE, which warming a template boots, or one
// made by hand with an '_') are the node's own.
func FleetActorID(id string) bool {
	if id == "" || len(id) > 253 {
		return false
	}
	for _, label := range strings.Split(id, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// LeaseRequest takes or renews this node's fleet lease: the right to run
// the actors bound to this node, which a fleet agent (stasis-kube agent)
// renews after each renewal of its own lease. While it holds, nothing
// changes; once it lapses, stasisd fences every RUNNING fleet actor
// (FleetActorID) and refuses to run or resume one, so that none still
// runs here when the fleet starts it on another node.
type LeaseRequest struct {
	// Holder names who holds it (the agent and its node).
	Holder string `json:"holder"`
	// ValidForSeconds is how long from now it holds unless renewed again:
	// less than the holder's own lease has left, by the time a fence
	// takes.
	ValidForSeconds float64 `json:"validForSeconds"`
	// Bound lists the actors bound to this node, as the holder read them
	// after renewing its own lease: the FENCED ones among them are thawed.
	Bound []string `json:"bound"`
	// Epoch is the node's fencing epoch as the holder's own renewal read
	// it: the fleet raises it before it moves the node's actors elsewhere.
	// stasisd records the newest it was shown and refuses a renewal of an
	// older one (errdefs.ErrFailedPrecondition), which then renews and
	// thaws nothing. 0 gives none.
	Epoch int64 `json:"epoch,omitempty"`
}

// Lease is where this node's fleet lease stands.
type Lease struct {
	// Holder is "" when no lease is held: nothing is fenced.
	Holder string    `json:"holder,omitempty"`
	Until  time.Time `json:"until,omitempty"`
	Lapsed bool      `json:"lapsed"`
	Bound  []string  `json:"bound,omitempty"`
	// Fenced lists the FENCED actors.
	Fenced []string `json:"fenced,omitempty"`
	// FenceCommands freeze, without stasisd, the sandboxes of the fleet
	// actors that run here: what the holder runs if the lease lapses while
	// stasisd does not answer (killed, hung), so that they are fenced all
	// the same.
	FenceCommands [][]string `json:"fenceCommands,omitempty"`
	// Epoch is the newest fencing epoch a renewal showed this node.
	Epoch int64 `json:"epoch,omitempty"`
}

// StoreStatus is where stasisd's snapshot store stands.
type StoreStatus struct {
	Location string `json:"location,omitempty"`
	// Configured is false for a stasisd without a store (--no-store).
	Configured bool `json:"configured"`
	Available  bool `json:"available"`
	// Error is why it is out of reach, since when, after how many tries.
	Error    string    `json:"error,omitempty"`
	Since    time.Time `json:"since,omitempty"`
	Failures int       `json:"failures,omitempty"`
	// What its backend did about failures since stasisd started: calls
	// tried again, reads resumed where the network broke them, reads
	// cancelled for making no progress, bytes asked for again.
	Retries      int64 `json:"retries"`
	ResumedReads int64 `json:"resumedReads"`
	Stalls       int64 `json:"stalls"`
	BytesReread  int64 `json:"bytesReread"`
}

// NodeStatus is where this node's stasisd stands: its store and its fleet
// lease.
type NodeStatus struct {
	Store StoreStatus `json:"store"`
	Lease Lease       `json:"lease"`
}

// MaxLeaseSeconds bounds LeaseRequest.ValidForSeconds: a lease that long
// fences nothing for too long after its holder dies.
const MaxLeaseSeconds = 600

// SandboxID is the runtime container id that stasisd gives the sandboxes
// of actor id: the id between two '+' (a1 -> +a1+). runsc resolves a
// container id by prefix, calling an id that begins another ambiguous (a1
// beside a10 could not be addressed) and taking one for the other when only
// the longer exists. No actor id holds a '+', so the closing one keeps
// every such id from beginning another, and the opening one keeps the ids
// older stasisd versions gave (the actor id itself, which begins with a
// letter or digit) from beginning one of these. Such an older sandbox keeps
// its id until its actor's next resume (Actor.Sandbox says which it has).
func SandboxID(id string) string { return "+" + id + "+" }

// WarmingActorID is the ID of the actor that warming a template boots for
// its golden snapshot (and deletes after): warm_TEMPLATE, with "-" and the
// request id when one is given. Its underscore is a character no
// Kubernetes object name holds, so that a fleet agent never takes the
// warming actor for a copy of one of its Actors. Where that is longer than
// the 63 characters an actor id may have, it is the template's first 44
// characters and 12 hex digits of the hash of the template and request id:
// cutting it short instead gave two long names that share a prefix one
// warming actor, and the second warm was refused as busy.
func WarmingActorID(r WarmRequest) string {
	id := "warm_" + r.Template
	if r.RequestID != "" {
		id += "-" + r.RequestID
	}
	if len(id) <= 63 {
		return id
	}
	sum := sha256.Sum256([]byte(r.Template + "\x00" + r.RequestID))
	return "warm_" + r.Template[:min(len(r.Template), 44)] + "-" + hex.EncodeToString(sum[:6])
}

// StoredName is the name under which stasisd stores a snapshot that actor
// pushed (a suspend's or a pause's): ACTOR.SNAPSHOT, the snapshot's id
// being "snap-" and 12 hex digits.
func StoredName(actor, snapshotID string) string { return actor + "." + snapshotID }

// StoredActor says which actor a stored snapshot's name says pushed it
// (StoredName), and false for a name stasisd does not give an actor's
// snapshots (a golden snapshot, one stored by hand). Actor ids may hold
// dots, so the actor is all before the last one, never a prefix: d.x's
// snapshots are not d's. A name is only a hint: the snapshot's manifest
// records the actor (snapshot.Manifest.Actor), and a stasisd records which
// stored snapshots its actors pushed.
func StoredActor(name string) (string, bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || !snapshotIDPattern(name[i+1:]) {
		return "", false
	}
	return name[:i], true
}

// snapshotIDPattern says whether id has the form of the ids stasisd gives
// actors' snapshots: "snap-" and 12 lowercase hex digits.
func snapshotIDPattern(id string) bool {
	digits, ok := strings.CutPrefix(id, "snap-")
	if !ok || len(digits) != 12 {
		return false
	}
	for _, c := range digits {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NewActorID makes an id for a new actor of template: the template's name
// (its first 50 characters) and 12 hex digits, within the 63 characters an
// actor id may have. The digits are random, or, given a request id, its
// hash, so that a retried Run names the same actor and is recognised.
// stasisd makes one this way when a Run names none, and the CLI when it
// names the actor itself, to follow its progress.
func NewActorID(template, requestID string) string {
	var b [6]byte
	if requestID != "" {
		sum := sha256.Sum256([]byte(requestID))
		copy(b[:], sum[:])
	} else {
		_, _ = rand.Read(b[:])
	}
	return template[:min(len(template), 50)] + "-" + hex.EncodeToString(b[:])
}

// StageRequest asks stasisd to stage a stored snapshot: to make a whole
// copy of it on this node before an actor needs it.
type StageRequest struct {
	// Name is the snapshot's name in the store.
	Name string `json:"name"`
}

// StagedSnapshot is a whole copy of a stored snapshot on this node, which
// an actor started from that snapshot here resumes from without reading
// the store.
type StagedSnapshot struct {
	Name      string    `json:"name"`
	Dir       string    `json:"dir"`
	SizeBytes int64     `json:"sizeBytes"`
	UsedAt    time.Time `json:"usedAt"`
	// InUse counts the resumes reading it now.
	InUse int `json:"inUse,omitempty"`
	// Already is true when the copy was here before the request (staged
	// earlier, or the node's own golden snapshot).
	Already bool `json:"already,omitempty"`
}

// StagedSnapshots lists this node's staged copies.
type StagedSnapshots struct {
	Staged []StagedSnapshot `json:"staged"`
}
