package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ActorTemplate is what actors start from on any node: stasisd's template
// (api.Template), created on a node's stasisd by its agent before the first
// actor of it runs there. Paths (rootfs, bundle) must exist on every node
// that may run it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=at
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="Rootfs",type=string,JSONPath=`.spec.rootfs`
// +kubebuilder:printcolumn:name="Bundle",type=string,JSONPath=`.spec.bundle`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.gpus`
// +kubebuilder:printcolumn:name="Golden",type=string,JSONPath=`.spec.golden`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ActorTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ActorTemplateSpec `json:"spec"`
}

// ActorTemplateSpec is the template's definition.
//
// +kubebuilder:validation:XValidation:rule="[has(self.rootfs), has(self.bundle), has(self.vm)].filter(x, x).size() == 1",message="give exactly one of rootfs, bundle and vm"
// +kubebuilder:validation:XValidation:rule="!has(self.vm) || (has(self.runtime) && self.runtime == 'microvm')",message="vm is for runtime microvm"
// +kubebuilder:validation:XValidation:rule="!has(self.rootfs) || !has(self.runtime) || self.runtime == 'gvisor'",message="a rootfs is for runtime gvisor; a micro-VM boots vm's kernel"
type ActorTemplateSpec struct {
	// Runtime runs the actors: gvisor (the default) or microvm. Actors of
	// a micro-VM template are placed only on nodes whose stasisd runs
	// micro-VMs.
	// +kubebuilder:validation:Enum=gvisor;microvm
	// +optional
	Runtime string `json:"runtime,omitempty"`
	// VM is a micro-VM's guest (kernel and initramfs on every node that
	// may run it); Args is then the workload its agent starts. A bundle
	// with a vm section is the other way to give one.
	// +optional
	VM *VM `json:"vm,omitempty"`
	// Rootfs is a root filesystem folder on every node; Args runs in it.
	// +optional
	Rootfs string `json:"rootfs,omitempty"`
	// Bundle is an OCI bundle folder on every node, instead of Rootfs.
	// +optional
	Bundle string `json:"bundle,omitempty"`
	// +optional
	Args []string `json:"args,omitempty"`
	// +optional
	Env []string `json:"env,omitempty"`
	// GPUs is how many GPUs each actor gets.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// MemoryBytes is each actor's memory limit (0: stasisd's default).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// Durable are folders inside the sandbox kept by Data snapshots.
	// +optional
	Durable []string `json:"durable,omitempty"`
	// Probe is the readiness check after a start or a resume.
	// +optional
	Probe *Probe `json:"probe,omitempty"`
	// Golden is the store name of the template's golden snapshot (made
	// once on any node with `stasis template warm`, which stores it):
	// new actors of the template start from it, on any node that can
	// restore it.
	// +optional
	Golden string `json:"golden,omitempty"`
	// Network is the actors' network on their node: cni (a namespace of
	// its own on the node's CNI network; stasisd's default where CNI is
	// installed), none (its loopback alone) or host (only where stasisd
	// runs with --network host). Empty: the node's default.
	// +kubebuilder:validation:Enum=cni;none;host
	// +optional
	Network string `json:"network,omitempty"`
	// Ports are published on the node of each actor, and through its
	// Service (status.endpoint).
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=containerPort
	// +optional
	Ports []Port `json:"ports,omitempty"`
	// Idle pauses or suspends an actor that nothing used for a while; the
	// next connection to its ports wakes it, on its node.
	// +optional
	Idle *Idle `json:"idle,omitempty"`
	// WakeTimeout bounds how long a connection waits for its actor to
	// wake (a Go duration; stasisd's default 2m).
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +optional
	WakeTimeout string `json:"wakeTimeout,omitempty"`
	// Restart is what stasisd does when an actor's process ends on its
	// own, as docker's restart policies: never (the default; the actor
	// is Failed), on-failure (an exit code other than 0, or a signal) or
	// always; a restart boots the process again from the template on its
	// node.
	// +kubebuilder:validation:Enum=never;on-failure;always
	// +optional
	Restart string `json:"restart,omitempty"`
}

// Port is a port the actors serve on, published on their node.
type Port struct {
	// Name names it in the actor's Service (tcp-PORT when empty).
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`
	// ContainerPort is where the actor listens.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort int32 `json:"containerPort"`
	// HostPort is the port on the node; 0 (the default): a free one the
	// node picks for each actor and keeps for it, so that many actors of
	// the template share a node. A fixed one allows one actor of the
	// template a node.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	HostPort int32 `json:"hostPort,omitempty"`
}

// Idle is what becomes of an actor left idle: stasisd's api.Idle.
type Idle struct {
	// After is how long without a connection or an exec (a Go duration).
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	After string `json:"after"`
	// Then is pause (kept on its node, resumed in moments) or suspend
	// (its GPU and memory freed, its snapshot stored).
	// +kubebuilder:validation:Enum=pause;suspend
	Then string `json:"then"`
}

// VM is a micro-VM's guest: stasisd's api.VM.
type VM struct {
	Kernel    string `json:"kernel"`
	Initramfs string `json:"initramfs"`
	// +optional
	Cmdline []string `json:"cmdline,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	// +optional
	CPUs int32 `json:"cpus,omitempty"`
	// Devices are PCI devices the VM gets: a GPU passed through is
	// {id: gpu0, driver: vfio-pci, props: {host: "0000:3b:00.0"}}.
	// +optional
	Devices []Device `json:"devices,omitempty"`
}

// Device is a PCI device a micro-VM gets.
type Device struct {
	ID     string `json:"id"`
	Driver string `json:"driver"`
	// +optional
	Props map[string]string `json:"props,omitempty"`
}

// Probe is a readiness check: a command in the sandbox or an HTTP URL.
type Probe struct {
	// +optional
	Command []string `json:"command,omitempty"`
	// +optional
	URL string `json:"url,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// +kubebuilder:object:root=true

// ActorTemplateList is a list of ActorTemplates.
type ActorTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ActorTemplate `json:"items"`
}

// Phase is where an actor stands in the fleet.
type Phase string

// The phases an actor asks for (spec) and stands in (status).
const (
	// PhaseRunning: the actor runs on a node.
	PhaseRunning Phase = "Running"
	// PhasePaused: the actor's sandbox is stopped, its snapshot kept on
	// its node, which it stays bound to.
	PhasePaused Phase = "Paused"
	// PhaseSuspended: the actor's snapshot is in the store and it holds
	// no node.
	PhaseSuspended Phase = "Suspended"
	// PhasePending (status only): the actor waits for a node.
	PhasePending Phase = "Pending"
	// PhaseMoving (status only): the actor is being suspended on its node
	// to resume on another.
	PhaseMoving Phase = "Moving"
	// PhaseFailed (status only): its node could not start it; the reason
	// says why, and whether it is tried again.
	PhaseFailed Phase = "Failed"
	// PhaseFenced (status only): its node's stasisd froze it where it
	// stood because the node's lease lapsed; a renewal that finds it
	// still bound there thaws it, and a node that finds it bound
	// elsewhere removes it.
	PhaseFenced Phase = "Fenced"
)

// ConditionStasisd is the condition type that says whether the stasisd of
// the actor's node answers its agent. While it does not, the node's Lease
// is not renewed, and the actor moves to another node when it lapses.
const ConditionStasisd = "StasisdAvailable"

// Actor is one actor of the fleet: the controller binds it to a node, that
// node's agent runs it through its stasisd.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.template`
// +kubebuilder:printcolumn:name="Want",type=string,JSONPath=`.spec.phase`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshot`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.endpoint.address`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// The node agents watch only the Actors bound to their node.
// +kubebuilder:selectablefield:JSONPath=`.status.node`
type Actor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ActorSpec   `json:"spec"`
	Status ActorStatus `json:"status,omitempty"`
}

// ActorSpec is what the actor should be.
type ActorSpec struct {
	// Template names the ActorTemplate, in the actor's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Template string `json:"template"`
	// Phase is Running (the default), Paused or Suspended.
	// +kubebuilder:validation:Enum=Running;Paused;Suspended
	// +kubebuilder:default=Running
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Node pins the actor to one node; the controller moves it there.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node,omitempty"`
}

// ActorStatus is what the actor is. The controller writes the binding
// (node, placement, node epoch, evict); the bound node's agent writes the
// rest.
type ActorStatus struct {
	// Node is the node the actor is bound to; empty while it is
	// suspended to the store or waiting for a node.
	// +optional
	Node string `json:"node,omitempty"`
	// Placement counts the actor's bindings. It is the fence: an agent
	// runs an actor only while it is bound to the agent's node, and a
	// node that comes back after its actors were placed elsewhere removes
	// its copies without running them.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Placement int64 `json:"placement,omitempty"`
	// NodeEpoch is the epoch of the node's Lease (annotation
	// stasis.dev/epoch) when the controller bound the actor there. The
	// controller raises a node's epoch, with a write conditional on the
	// Lease it found expired, before it moves the node's actors: an agent
	// runs or thaws an actor only while its binding is of the node's
	// current epoch, so a binding read a moment before a node was counted
	// lost is never acted on.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NodeEpoch int64 `json:"nodeEpoch,omitempty"`
	// Evict asks the bound node to suspend the actor to the store and
	// release it (a drain, or a move to spec.node).
	// +optional
	Evict bool `json:"evict,omitempty"`
	// +kubebuilder:validation:Enum=Running;Paused;Suspended;Pending;Moving;Failed;Fenced
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Reason says why the actor is where it is: why no node fits, why it
	// moved, why it failed.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Snapshot is the stored name of the actor's last committed snapshot,
	// which it resumes from on whatever node it is bound to next.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// Endpoint is where the actor serves: its Service, and its node's
	// address and published ports while it is bound to a node that runs
	// it or wakes it on a connection.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`
	// Idle: its template's idle policy paused or suspended it on its node,
	// which wakes it on the next connection (phase Paused or Suspended
	// while spec.phase is Running).
	// +optional
	Idle bool `json:"idle,omitempty"`
	// StartFailures counts the failed starts of the actor on its node
	// since it was bound there (0 once one works), and RetryAt is when
	// the node tries again: absent after a failure a retry cannot mend (a
	// new spec, or a new binding, tries again). In the status, so that an
	// agent that restarts goes on where the one before left off.
	// +kubebuilder:validation:Minimum=0
	// +optional
	StartFailures int32 `json:"startFailures,omitempty"`
	// +optional
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: StasisdAvailable (ConditionStasisd).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Endpoint is where an actor serves.
type Endpoint struct {
	// Service names the actor's Service (and its EndpointSlice) in the
	// actor's namespace: the actor's name where that is a valid Service
	// name (a DNS label that starts with a letter), else one made of it
	// and a hash of it (fleet.ServiceName).
	// +optional
	Service string `json:"service,omitempty"`
	// Address is the node's address, written by its agent; empty while
	// the actor is bound to no node.
	// +optional
	Address string `json:"address,omitempty"`
	// Ports are its published ports on that node.
	// +optional
	Ports []EndpointPort `json:"ports,omitempty"`
}

// EndpointPort is one published port of an actor on its node.
type EndpointPort struct {
	// Port is the port on the node; ContainerPort the actor's own.
	Port          int32 `json:"port"`
	ContainerPort int32 `json:"containerPort"`
}

// +kubebuilder:object:root=true

// ActorList is a list of Actors.
type ActorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Actor `json:"items"`
}

// Snapshot is the fleet's record of a snapshot in the shared store, made by
// the agent that pushed it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=snap
// +kubebuilder:printcolumn:name="Actor",type=string,JSONPath=`.spec.actor`
// +kubebuilder:printcolumn:name="Stored",type=string,JSONPath=`.spec.storeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.sizeBytes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Snapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SnapshotSpec `json:"spec"`
}

// SnapshotSpec describes a stored snapshot.
type SnapshotSpec struct {
	// StoreName is the snapshot's name in the store.
	// +kubebuilder:validation:MinLength=1
	StoreName string `json:"storeName"`
	// Actor and Template are what it is a snapshot of.
	Actor    string `json:"actor"`
	Template string `json:"template"`
	// Kind is commit (golden snapshots are still per node).
	// +kubebuilder:validation:Enum=commit
	Kind string `json:"kind"`
	// Node took it; Class is that node's compatibility class
	// (fingerprint.Class), which a restore needs to match in part.
	Node  string `json:"node"`
	Class string `json:"class,omitempty"`
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes"`
}

// +kubebuilder:object:root=true

// SnapshotList is a list of Snapshots.
type SnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Snapshot `json:"items"`
}
