// Package proto is the wire format of the sandbox-node protocol
// (spec node-protocol.md): the JSON text frames that Core (the gateway's
// node-connect handler) and a sandbox node (nodeagent) exchange over one
// WebSocket, and the strict codec both ends use.
//
// Every frame is a JSON object with "version" equal to ProtocolVersion and
// "type" naming the frame. Member names are exact and unique; unknown
// members, case-variant aliases, duplicates and nulls (except where a
// member is documented as nullable) are rejected, and there is no fallback
// decoder. Control frames (hello, welcome, heartbeat, heartbeat_ack,
// retention, retention_ack) are at most MaxControlFrame bytes; request and
// response frames at most MaxRequestFrame bytes.
//
// The spec names the frames, their top-level members and the operation
// table; the members of the nested objects it leaves open (bootstrap,
// command, info, sample, …) are defined here and documented in
// docs/node-protocol.md.
package proto

import "time"

// ProtocolVersion is the only protocol version either end accepts.
const ProtocolVersion = 1

// Size limits in bytes (spec "Frames and version").
const (
	// MaxControlFrame is the limit of hello, welcome, heartbeat,
	// heartbeat_ack, retention and retention_ack frames: 32 KiB.
	MaxControlFrame = 32 << 10
	// MaxRequestFrame is the limit of request and response frames, and the
	// first check on any frame: 72 MiB.
	MaxRequestFrame = 72 << 20
)

// Field limits (spec "Connection", "Provider requests", "Generation control").
const (
	// MinTimeoutMS is the lower bound of Request.TimeoutMS and
	// Command.TimeoutMS, in milliseconds.
	MinTimeoutMS = 1
	// MaxTimeoutMS is the upper bound of Request.TimeoutMS and
	// Command.TimeoutMS, in milliseconds (2 minutes).
	MaxTimeoutMS = 120000
	// MaxActiveOperations bounds Health.ActiveOperations and
	// Hello.MaxActive (operations).
	MaxActiveOperations = 32
	// MaxGenerations is the most generation observations one hello or
	// heartbeat carries.
	MaxGenerations = 8
	// MaxRetentionEntries is the most entries one retention or
	// retention_ack carries.
	MaxRetentionEntries = 8
	// MaxRetainedGenerations bounds Hello.MaxRetained (generations).
	MaxRetainedGenerations = 1024
	// MaxPendingRequests is the most requests Core keeps pending on one
	// connection.
	MaxPendingRequests = 32
	// MaxCommandOutputBytes bounds Command.MaxOutputBytes and each of
	// CommandResult.Stdout and Stderr, in bytes (32 MiB).
	MaxCommandOutputBytes = 32 << 20
	// MaxCommandArgs bounds Command.Argv and Bootstrap.Entrypoint
	// (elements).
	MaxCommandArgs = 4096
	// MaxCommandEnv bounds Command.Env and Bootstrap.Env (variables).
	MaxCommandEnv = 1024
	// MaxIdentifierLength bounds Reference and Snapshot identifiers, in
	// bytes.
	MaxIdentifierLength = 128
	// MaxDiagnosticLength bounds a diagnostic code, in bytes.
	MaxDiagnosticLength = 64
	// MaxErrorCodeLength bounds Response.ErrorCode, in bytes.
	MaxErrorCodeLength = 64
	// MaxUnsupportedReason bounds Unsupported.Reason, in bytes.
	MaxUnsupportedReason = 256
	// MaxImageReferenceBytes bounds Bootstrap.Image and Info.Image, in
	// bytes.
	MaxImageReferenceBytes = 512
)

// Frame types: the "type" member of each frame.
const (
	// TypeHello is the type of Hello (node → Core, control).
	TypeHello = "hello"
	// TypeWelcome is the type of Welcome (Core → node, control).
	TypeWelcome = "welcome"
	// TypeHeartbeat is the type of Heartbeat (node → Core, control).
	TypeHeartbeat = "heartbeat"
	// TypeHeartbeatAck is the type of HeartbeatAck (Core → node, control).
	TypeHeartbeatAck = "heartbeat_ack"
	// TypeRequest is the type of Request (Core → node).
	TypeRequest = "request"
	// TypeResponse is the type of Response (node → Core).
	TypeResponse = "response"
	// TypeRetention is the type of Retention (node → Core, control).
	TypeRetention = "retention"
	// TypeRetentionAck is the type of RetentionAck (Core → node, control).
	TypeRetentionAck = "retention_ack"
)

// Provider names a node's sandbox provider.
type Provider string

// Providers.
const (
	// ProviderDocker is the Docker provider.
	ProviderDocker Provider = "docker"
	// ProviderMicrosandbox is the microsandbox provider.
	ProviderMicrosandbox Provider = "microsandbox"
)

// Hello is the node's first frame, sent within 15 s of the upgrade. The
// identity must match the authenticated node.
type Hello struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is the frame type; Encode sets it.
	Type string `json:"type"`
	// NodeID is the node's UUID, the node_id of the connect URL.
	NodeID string `json:"node_id"`
	// InstallationID is the UUID of this installation of the node.
	InstallationID string `json:"installation_id"`
	// Provider is the node's provider.
	Provider Provider `json:"provider"`
	// BackendFingerprint is a lowercase SHA-256 hex digest identifying the
	// provider backend (for Docker: the engine ID and version).
	BackendFingerprint string `json:"backend_fingerprint"`
	// DeploymentGeneration is the enrolled deployment generation, > 0.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// SpecificationDigest is the enrolled generation's lowercase SHA-256
	// specification digest.
	SpecificationDigest string `json:"specification_digest"`
	// MaxActive is how many operations the node runs at once, 1..32.
	MaxActive int `json:"max_active"`
	// MaxRetained is how many generations the node can retain,
	// 0..MaxRetainedGenerations.
	MaxRetained int `json:"max_retained"`
	// Health is the first health report.
	Health Health `json:"health"`
	// GenerationManagement is true for nodes that prepare and retain several
	// deployment generations; absent means false.
	GenerationManagement bool `json:"generation_management,omitzero"`
	// Generations are at most 8 generation observations (generation-managing
	// nodes only).
	Generations []GenerationObservation `json:"generations,omitempty"`
}

// Health is a health report (spec "Connection").
type Health struct {
	// ProviderReady says whether the provider can take work.
	ProviderReady bool `json:"provider_ready"`
	// Diagnostic is the fixed diagnostic code when the provider is not
	// ready; empty otherwise. Core stores unknown codes as
	// provider_unavailable.
	Diagnostic string `json:"diagnostic,omitempty"`
	// ObservedAt is when the report was taken (RFC 3339).
	ObservedAt time.Time `json:"observed_at"`
	// ActiveOperations is the number of provider operations running or
	// queued on the node, 0..32.
	ActiveOperations int `json:"active_operations"`
	// Host are the host measurements.
	Host HostMeasurements `json:"host"`
}

// HostMeasurements are the node host's measurements (spec: "the host
// measurements reported by the Runtime telemetry API").
type HostMeasurements struct {
	// CPUCount is the number of logical CPUs, ≥ 1.
	CPUCount int `json:"cpu_count"`
	// CPUPercent is the host CPU use over the last interval, 0..100.
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryTotalBytes is the host memory, in bytes.
	MemoryTotalBytes uint64 `json:"memory_total_bytes"`
	// MemoryUsedBytes is the host memory in use, in bytes, ≤ total.
	MemoryUsedBytes uint64 `json:"memory_used_bytes"`
	// DiskTotalBytes is the size of the provider's data filesystem, in
	// bytes.
	DiskTotalBytes uint64 `json:"disk_total_bytes"`
	// DiskUsedBytes is the used part of that filesystem, in bytes, ≤ total.
	DiskUsedBytes uint64 `json:"disk_used_bytes"`
}

// GenerationState is the state of a deployment generation on a node.
type GenerationState string

// Generation states.
const (
	// GenerationReady: the generation's provider can take work.
	GenerationReady GenerationState = "ready"
	// GenerationPreparing: the generation is being prepared or repaired.
	GenerationPreparing GenerationState = "preparing"
	// GenerationFailed: the last preparation attempt failed; it is retried
	// with backoff.
	GenerationFailed GenerationState = "failed"
)

// GenerationObservation is one generation observation record.
type GenerationObservation struct {
	// Generation is a positive int64 deployment generation.
	Generation int64 `json:"generation"`
	// SpecificationDigest is its lowercase SHA-256 specification digest.
	SpecificationDigest string `json:"specification_digest"`
	// State is ready, preparing or failed.
	State GenerationState `json:"state"`
	// Diagnostic is an optional fixed diagnostic code.
	Diagnostic string `json:"diagnostic,omitempty"`
}

// Deployment is what Core advertises to generation-managing nodes.
type Deployment struct {
	// Generation is the target deployment generation, > 0.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the target's lowercase SHA-256 digest.
	SpecificationDigest string `json:"specification_digest"`
	// ServingGeneration is the generation to keep serving; always present,
	// null when none (the one nullable member of the protocol).
	ServingGeneration *int64 `json:"serving_generation"`
}

// Welcome is Core's answer to hello.
type Welcome struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is the frame type; Encode sets it.
	Type string `json:"type"`
	// ConnectionID is a new UUID for this connection.
	ConnectionID string `json:"connection_id"`
	// OwnerEpoch is Core's current owner epoch, > 0.
	OwnerEpoch int64 `json:"owner_epoch"`
	// Deployment is present for generation-managing nodes only.
	Deployment *Deployment `json:"deployment,omitempty"`
}

// Heartbeat is the node's periodic report, every 10 s.
type Heartbeat struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is TypeHeartbeat; Encode sets it.
	Type string `json:"type"`
	// ConnectionID is the welcome's connection UUID.
	ConnectionID string `json:"connection_id"`
	// OwnerEpoch is the node's owner epoch (the highest it has seen), > 0.
	OwnerEpoch int64 `json:"owner_epoch"`
	// Health is the current health report.
	Health Health `json:"health"`
	// Generations are at most 8 observations (generation-managing nodes).
	Generations []GenerationObservation `json:"generations,omitempty"`
}

// HeartbeatAck is Core's answer to a heartbeat.
type HeartbeatAck struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is TypeHeartbeatAck; Encode sets it.
	Type string `json:"type"`
	// ConnectionID is the heartbeat's connection UUID.
	ConnectionID string `json:"connection_id"`
	// OwnerEpoch is Core's current owner epoch, > 0.
	OwnerEpoch int64 `json:"owner_epoch"`
	// Deployment is present for generation-managing nodes only.
	Deployment *Deployment `json:"deployment,omitempty"`
}

// Operation is a provider operation (spec "Provider requests").
type Operation string

// The 15 operations, with the provider method each one calls.
const (
	// OpCreate calls Create; parameter bootstrap, result info.
	OpCreate Operation = "create"
	// OpInfo calls GetInfo; no parameter, result info.
	OpInfo Operation = "info"
	// OpRenew calls Renew; no parameter, result info.
	OpRenew Operation = "renew"
	// OpKill calls Kill; no parameter, no result.
	OpKill Operation = "kill"
	// OpCommand calls RunCommand; parameter command, result command.
	OpCommand Operation = "command"
	// OpObserve calls Observe; parameter observation, result sample.
	OpObserve Operation = "observe"
	// OpInitial calls Initial; no parameter, result compute.
	OpInitial Operation = "initial"
	// OpNewCompute calls NewCompute; parameters generation and an optional
	// snapshot, result compute.
	OpNewCompute Operation = "new_compute"
	// OpCompute calls GetCompute; parameter compute, result state.
	OpCompute Operation = "compute"
	// OpKillCompute calls KillCompute; parameter compute, no result.
	OpKillCompute Operation = "kill_compute"
	// OpResumeCompute calls ResumeCompute; parameter compute, result state.
	OpResumeCompute Operation = "resume_compute"
	// OpCommandCompute calls RunCommandCompute; parameters compute and
	// command, result command.
	OpCommandCompute Operation = "command_compute"
	// OpSuspend calls Suspend; parameter suspend, result state.
	OpSuspend Operation = "suspend"
	// OpResume calls Resume; parameter resume, result state.
	OpResume Operation = "resume"
	// OpDeleteSnapshot calls DeleteSnapshot; parameter snapshot, no result.
	OpDeleteSnapshot Operation = "delete_snapshot"
)

// Operations lists the 15 operations in the spec's order.
var Operations = []Operation{OpCreate, OpInfo, OpRenew, OpKill, OpCommand, OpObserve, OpInitial, OpNewCompute,
	OpCompute, OpKillCompute, OpResumeCompute, OpCommandCompute, OpSuspend, OpResume, OpDeleteSnapshot}

// Reference is the exact allocation a request is about. Each member is an
// identifier of 1..128 characters from [A-Za-z0-9._-], starting with a
// letter or digit.
type Reference struct {
	// TenantID identifies the tenant.
	TenantID string `json:"tenant_id"`
	// EnvironmentID identifies the tenant's environment.
	EnvironmentID string `json:"environment_id"`
	// AllocationID identifies the allocation (the sandbox).
	AllocationID string `json:"allocation_id"`
}

// Bootstrap is the create parameter: what to start for the allocation.
type Bootstrap struct {
	// Image is the image reference to run: 1..512 bytes of printable ASCII
	// without spaces.
	Image string `json:"image"`
	// Entrypoint optionally replaces the image's command (argv, 1..4096
	// elements when present).
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Env are environment variables of the sandbox (≤ 1024; names
	// non-empty without '=' or NUL, values without NUL).
	Env map[string]string `json:"env,omitempty"`
	// CPUMillis limits CPU in thousandths of a CPU, ≥ 0; 0 = no limit.
	CPUMillis int64 `json:"cpu_millis,omitzero"`
	// MemoryBytes limits memory in bytes, ≥ 0; 0 = no limit.
	MemoryBytes int64 `json:"memory_bytes,omitzero"`
}

// Command is the command parameter: one process to run in the sandbox.
type Command struct {
	// Argv is the program and its arguments: 1..4096 elements, the first
	// non-empty, none containing NUL.
	Argv []string `json:"argv"`
	// Env are extra environment variables (rules as Bootstrap.Env).
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory, an absolute path; empty means the
	// image's.
	Cwd string `json:"cwd,omitempty"`
	// TimeoutMS bounds the command, 1..120000 ms, and is further bounded by
	// the request's budget.
	TimeoutMS int `json:"timeout_ms"`
	// MaxOutputBytes bounds stdout and stderr each, 1..MaxCommandOutputBytes
	// bytes.
	MaxOutputBytes int `json:"max_output_bytes"`
}

// CommandResult is the command result.
type CommandResult struct {
	// ExitCode is the process exit code.
	ExitCode int `json:"exit_code"`
	// Stdout is the standard output (base64 in JSON), cut at
	// MaxOutputBytes (≤ MaxCommandOutputBytes).
	Stdout []byte `json:"stdout"`
	// Stderr is the standard error (base64 in JSON), cut likewise. Both
	// streams together must still fit MaxRequestFrame once encoded.
	Stderr []byte `json:"stderr"`
	// StdoutTruncated says whether Stdout was cut.
	StdoutTruncated bool `json:"stdout_truncated"`
	// StderrTruncated says whether Stderr was cut.
	StderrTruncated bool `json:"stderr_truncated"`
	// DurationMS is how long the command ran, in ms, ≥ 0.
	DurationMS int64 `json:"duration_ms"`
}

// Observation is the observe parameter.
type Observation struct {
	// Kind is what to observe; ObservationResources ("resources") is the
	// only kind.
	Kind string `json:"kind"`
}

// Sample is the observe result: the sandbox's resource use.
type Sample struct {
	// ObservedAt is when the sample was taken (RFC 3339, non-zero).
	ObservedAt time.Time `json:"observed_at"`
	// CPUPercent is the sandbox's CPU use, ≥ 0 and finite; 100 per fully
	// used CPU, so it may exceed 100.
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryUsedBytes is the sandbox's memory use, in bytes.
	MemoryUsedBytes uint64 `json:"memory_used_bytes"`
	// MemoryLimitBytes is the sandbox's memory limit, in bytes; 0 = none.
	MemoryLimitBytes uint64 `json:"memory_limit_bytes"`
	// PIDs is the number of processes in the sandbox.
	PIDs uint64 `json:"pids"`
}

// InstanceState is a sandbox or compute instance state.
type InstanceState string

// Instance states.
const (
	// StateRunning: the instance runs.
	StateRunning InstanceState = "running"
	// StateStopped: the instance exists and does not run.
	StateStopped InstanceState = "stopped"
	// StateSuspended: the instance was suspended to a snapshot.
	StateSuspended InstanceState = "suspended"
)

// Info is the info result: the allocation as the provider sees it.
type Info struct {
	// Reference is the allocation; Classify and CreateReceipt require it
	// to equal the request's.
	Reference Reference `json:"reference"`
	// DeploymentGeneration is the generation the allocation runs on, > 0.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// State is the sandbox's state.
	State InstanceState `json:"state"`
	// Image is the image the sandbox runs (rules as Bootstrap.Image).
	Image string `json:"image"`
	// CreatedAt is when the sandbox was created (RFC 3339, non-zero).
	CreatedAt time.Time `json:"created_at"`
	// RenewedAt is the last renew, or CreatedAt; never before CreatedAt.
	RenewedAt time.Time `json:"renewed_at"`
}

// ComputeRef names a compute instance by its compute generation, > 0.
type ComputeRef struct {
	// Generation is the compute generation, > 0 (independent of the
	// deployment generation).
	Generation int64 `json:"generation"`
}

// Compute is the compute result of initial and new_compute.
type Compute struct {
	// Generation is the compute generation, > 0.
	Generation int64 `json:"generation"`
	// State is the compute instance's state.
	State InstanceState `json:"state"`
}

// State is the state result of compute, resume_compute, suspend, resume.
type State struct {
	// State is the instance's state.
	State InstanceState `json:"state"`
	// Compute is the compute generation now current, > 0.
	Compute int64 `json:"compute"`
	// Snapshot is set when the state refers to a snapshot (suspend).
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// Snapshot names a snapshot: an identifier as in Reference.
type Snapshot struct {
	// ID is the snapshot identifier (1..128 of [A-Za-z0-9._-], starting
	// with a letter or digit).
	ID string `json:"id"`
}

// Suspend is the suspend parameter.
type Suspend struct {
	// Snapshot is the snapshot to write.
	Snapshot Snapshot `json:"snapshot"`
}

// Resume is the resume parameter.
type Resume struct {
	// Snapshot is the snapshot to resume from.
	Snapshot Snapshot `json:"snapshot"`
	// ObserveOnly asks only whether a resume already happened, without
	// mutating; such a resume may go to a generation that is not ready.
	ObserveOnly bool `json:"observe_only,omitzero"`
}

// Request is Core's provider request. Exactly the parameter members the
// operation names are present (spec operation table): create bootstrap;
// command command; observe observation; new_compute generation and an
// optional snapshot; compute, kill_compute, resume_compute compute;
// command_compute compute and command; suspend suspend; resume resume;
// delete_snapshot snapshot; info, renew, kill, initial none.
type Request struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is TypeRequest; Encode sets it.
	Type string `json:"type"`
	// ID is a new UUID for every request.
	ID string `json:"id"`
	// Sequence increases by exactly 1 with every request on the
	// connection, starting at 1.
	Sequence uint64 `json:"sequence"`
	// ConnectionID is the welcome's connection UUID.
	ConnectionID string `json:"connection_id"`
	// OwnerEpoch is the welcome's owner epoch, > 0.
	OwnerEpoch int64 `json:"owner_epoch"`
	// DeploymentGeneration is the allocation's deployment generation, > 0.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// Operation is one of Operations.
	Operation Operation `json:"operation"`
	// TimeoutMS is the remaining budget, 1..120000 ms, anchored on the
	// node's clock when the request arrives.
	TimeoutMS int `json:"timeout_ms"`
	// Reference is the exact allocation.
	Reference Reference `json:"reference"`

	// Bootstrap is the create parameter.
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
	// Command is the command and command_compute parameter.
	Command *Command `json:"command,omitempty"`
	// Observation is the observe parameter.
	Observation *Observation `json:"observation,omitempty"`
	// Generation is the new_compute parameter: the compute generation to
	// create, > 0.
	Generation *int64 `json:"generation,omitempty"`
	// Snapshot is the delete_snapshot parameter, and new_compute's
	// optional snapshot to start from.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
	// Compute is the compute, kill_compute, resume_compute and
	// command_compute parameter.
	Compute *ComputeRef `json:"compute,omitempty"`
	// Suspend is the suspend parameter.
	Suspend *Suspend `json:"suspend,omitempty"`
	// Resume is the resume parameter.
	Resume *Resume `json:"resume,omitempty"`
}

// ErrorCode is a response's failure code (spec "Provider requests"): on
// the wire any [a-z0-9_]{1,64}; see Classify for what each means to Core.
type ErrorCode string

// Error codes. Any other value means the outcome is unknown, as
// ErrUnconfirmed does.
const (
	// ErrInvalid: the provider's ErrInvalid (also the answer to a
	// malformed request).
	ErrInvalid ErrorCode = "invalid"
	// ErrOwnership: the provider's ErrOwnership.
	ErrOwnership ErrorCode = "ownership"
	// ErrExists: the provider's ErrExists.
	ErrExists ErrorCode = "exists"
	// ErrNotFound: the provider's ErrNotFound.
	ErrNotFound ErrorCode = "not_found"
	// ErrCommandUnconfirmed: the provider's ErrCommandUnconfirmed.
	ErrCommandUnconfirmed ErrorCode = "command_unconfirmed"
	// ErrObservationUnavailable: the observation-unavailable outcome.
	ErrObservationUnavailable ErrorCode = "observation_unavailable"
	// ErrRuntimeNotRunning: the runtime-not-running observation outcome.
	ErrRuntimeNotRunning ErrorCode = "runtime_not_running"
	// ErrUnsupported: the operation is declared unsupported; the response
	// carries Unsupported evidence.
	ErrUnsupported ErrorCode = "unsupported"
	// ErrUnconfirmed: the outcome is unknown.
	ErrUnconfirmed ErrorCode = "unconfirmed"
)

// Unsupported is the evidence of an unsupported response: the exact
// operation and an authored, safe reason (≤ 256 bytes, printable).
type Unsupported struct {
	// Operation is the exact operation declared unsupported; it must equal
	// the request's for the response to count as unsupported.
	Operation Operation `json:"operation"`
	// Reason is an authored, safe explanation: 1..256 bytes of printable
	// ASCII (0x20..0x7e).
	Reason string `json:"reason"`
}

// Response is the node's answer to a request. A success carries exactly the
// result member of the operation table (none for kill, kill_compute,
// delete_snapshot); a failure carries ErrorCode and no result, except an
// Info receipt (CreateSettled) and the Unsupported evidence of
// ErrUnsupported.
type Response struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is TypeResponse; Encode sets it.
	Type string `json:"type"`
	// ID is the request's id.
	ID string `json:"id"`
	// ConnectionID is the request's connection UUID.
	ConnectionID string `json:"connection_id"`

	// ErrorCode is empty for a success and the failure code otherwise.
	ErrorCode ErrorCode `json:"error_code,omitempty"`
	// Unsupported is present iff ErrorCode is ErrUnsupported.
	Unsupported *Unsupported `json:"unsupported,omitempty"`

	// Info is the create, info and renew result, or a failed create's
	// CreateSettled receipt.
	Info *Info `json:"info,omitempty"`
	// Command is the command and command_compute result.
	Command *CommandResult `json:"command,omitempty"`
	// Sample is the observe result.
	Sample *Sample `json:"sample,omitempty"`
	// Compute is the initial and new_compute result.
	Compute *Compute `json:"compute,omitempty"`
	// State is the compute, resume_compute, suspend and resume result.
	State *State `json:"state,omitempty"`
}

// RetentionEntry is one local generation reference.
type RetentionEntry struct {
	// Generation is the deployment generation, > 0; unique in a frame.
	Generation int64 `json:"generation"`
	// SpecificationDigest is its lowercase SHA-256 specification digest.
	SpecificationDigest string `json:"specification_digest"`
}

// Retention asks Core whether to keep local generations (node → Core; one
// pending per connection).
type Retention struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is TypeRetention; Encode sets it.
	Type string `json:"type"`
	// ID is a new UUID for every retention request.
	ID string `json:"id"`
	// Sequence increases by exactly 1 with every retention request on the
	// connection, starting at 1.
	Sequence uint64 `json:"sequence"`
	// ConnectionID is the welcome's connection UUID.
	ConnectionID string `json:"connection_id"`
	// OwnerEpoch is the node's owner epoch, > 0.
	OwnerEpoch int64 `json:"owner_epoch"`
	// Entries are 1..MaxRetentionEntries local generation references.
	Entries []RetentionEntry `json:"entries"`
}

// RetentionDecision is one entry of a retention_ack.
type RetentionDecision struct {
	// Generation is the entry's deployment generation, > 0.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the entry's specification digest.
	SpecificationDigest string `json:"specification_digest"`
	// Keep is Core's explicit decision; false authorizes dropping.
	Keep bool `json:"keep"`
}

// RetentionAck answers a retention with an explicit keep for every entry,
// in the same order (see RetentionAck.Answers).
type RetentionAck struct {
	// Version is ProtocolVersion; Encode sets it.
	Version int `json:"version"`
	// Type is TypeRetentionAck; Encode sets it.
	Type string `json:"type"`
	// ID is the retention's id.
	ID string `json:"id"`
	// ConnectionID is the retention's connection UUID.
	ConnectionID string `json:"connection_id"`
	// Entries are the decisions, one per retention entry, same order.
	Entries []RetentionDecision `json:"entries"`
}
