package proto

import (
	"strings"
	"time"
)

// Fixed values of the examples.
const (
	exNodeID       = "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
	exInstallation = "0a1b2c3d-4e5f-4071-8293-a4b5c6d7e8f9"
	exConnection   = "9e8d7c6b-5a49-4837-9261-5e4f3a2b1c0d"
	exRequestID    = "3c2b1a09-8f7e-4d6c-9b5a-493827161504"
	exRetentionID  = "11111111-2222-4333-8444-555555555555"
)

var (
	exDigest      = strings.Repeat("ab", 32)
	exDigest2     = strings.Repeat("cd", 32)
	exFingerprint = strings.Repeat("0f", 32)
	exTime        = time.Date(2026, 11, 7, 12, 0, 0, 0, time.UTC)
	exReference   = Reference{TenantID: "tenant-1", EnvironmentID: "env_a.1", AllocationID: "alloc-42"}
)

func ptr[T any](v T) *T { return &v }

func exHealth() Health {
	return Health{
		ProviderReady:    true,
		ObservedAt:       exTime,
		ActiveOperations: 2,
		Host: HostMeasurements{
			CPUCount: 8, CPUPercent: 12.5,
			MemoryTotalBytes: 16 << 30, MemoryUsedBytes: 4 << 30,
			DiskTotalBytes: 500 << 30, DiskUsedBytes: 120 << 30,
		},
	}
}

func exObservations() []GenerationObservation {
	return []GenerationObservation{
		{Generation: 3, SpecificationDigest: exDigest, State: GenerationReady},
		{Generation: 4, SpecificationDigest: exDigest2, State: GenerationPreparing, Diagnostic: DiagImageMissing},
	}
}

func exHello() *Hello {
	return &Hello{
		NodeID: exNodeID, InstallationID: exInstallation, Provider: ProviderDocker,
		BackendFingerprint: exFingerprint, DeploymentGeneration: 3, SpecificationDigest: exDigest,
		MaxActive: 4, MaxRetained: 2, Health: exHealth(),
		GenerationManagement: true, Generations: exObservations(),
	}
}

func exWelcome() *Welcome {
	return &Welcome{
		ConnectionID: exConnection, OwnerEpoch: 7,
		Deployment: &Deployment{Generation: 4, SpecificationDigest: exDigest2, ServingGeneration: ptr[int64](3)},
	}
}

func exHeartbeat() *Heartbeat {
	h := exHealth()
	h.ProviderReady, h.Diagnostic = false, DiagDockerUnreachable
	return &Heartbeat{ConnectionID: exConnection, OwnerEpoch: 7, Health: h, Generations: exObservations()}
}

func exHeartbeatAck() *HeartbeatAck {
	return &HeartbeatAck{
		ConnectionID: exConnection, OwnerEpoch: 7,
		Deployment: &Deployment{Generation: 4, SpecificationDigest: exDigest2}, // serving_generation null
	}
}

func exRetention() *Retention {
	return &Retention{
		ID: exRetentionID, Sequence: 1, ConnectionID: exConnection, OwnerEpoch: 7,
		Entries: []RetentionEntry{{Generation: 1, SpecificationDigest: exDigest}, {Generation: 2, SpecificationDigest: exDigest2}},
	}
}

func exRetentionAck() *RetentionAck {
	return &RetentionAck{
		ID: exRetentionID, ConnectionID: exConnection,
		Entries: []RetentionDecision{
			{Generation: 1, SpecificationDigest: exDigest, Keep: false},
			{Generation: 2, SpecificationDigest: exDigest2, Keep: true},
		},
	}
}

func exCommand() *Command {
	return &Command{
		Argv: []string{"/bin/sh", "-c", "echo hi"}, Env: map[string]string{"B": "2", "A": "1"},
		Cwd: "/workspace", TimeoutMS: 30000, MaxOutputBytes: 1 << 20,
	}
}

// exRequest returns a valid request of op with its parameters.
func exRequest(op Operation) *Request {
	r := &Request{
		ID: exRequestID, Sequence: 5, ConnectionID: exConnection, OwnerEpoch: 7,
		DeploymentGeneration: 3, Operation: op, TimeoutMS: 60000, Reference: exReference,
	}
	switch op {
	case OpCreate:
		r.Bootstrap = &Bootstrap{
			Image: "registry.example/sandbox:1.2", Entrypoint: []string{"/sbin/init"},
			Env: map[string]string{"LANG": "C.UTF-8"}, CPUMillis: 2000, MemoryBytes: 1 << 30,
		}
	case OpCommand:
		r.Command = exCommand()
	case OpObserve:
		r.Observation = &Observation{Kind: ObservationResources}
	case OpNewCompute:
		r.Generation = ptr[int64](2)
		r.Snapshot = &Snapshot{ID: "snap-1"}
	case OpCompute, OpKillCompute, OpResumeCompute:
		r.Compute = &ComputeRef{Generation: 1}
	case OpCommandCompute:
		r.Compute = &ComputeRef{Generation: 1}
		r.Command = exCommand()
	case OpSuspend:
		r.Suspend = &Suspend{Snapshot: Snapshot{ID: "snap-1"}}
	case OpResume:
		r.Resume = &Resume{Snapshot: Snapshot{ID: "snap-1"}, ObserveOnly: true}
	case OpDeleteSnapshot:
		r.Snapshot = &Snapshot{ID: "snap-1"}
	}
	return r
}

func exInfo() *Info {
	return &Info{
		Reference: exReference, DeploymentGeneration: 3, State: StateRunning,
		Image: "registry.example/sandbox:1.2", CreatedAt: exTime, RenewedAt: exTime.Add(time.Minute),
	}
}

// exResponse returns a valid success response to exRequest(op).
func exResponse(op Operation) *Response {
	r := &Response{ID: exRequestID, ConnectionID: exConnection}
	switch operationTable[op].result {
	case resultInfo:
		r.Info = exInfo()
	case resultCommand:
		r.Command = &CommandResult{
			ExitCode: 0, Stdout: []byte("hi\n"), Stderr: nil, DurationMS: 12,
		}
	case resultSample:
		r.Sample = &Sample{ObservedAt: exTime, CPUPercent: 150, MemoryUsedBytes: 1 << 20, MemoryLimitBytes: 1 << 30, PIDs: 3}
	case resultCompute:
		r.Compute = &Compute{Generation: 2, State: StateRunning}
	case resultState:
		r.State = &State{State: StateSuspended, Compute: 1, Snapshot: &Snapshot{ID: "snap-1"}}
	}
	return r
}

func exFailure(code ErrorCode) *Response {
	return &Response{ID: exRequestID, ConnectionID: exConnection, ErrorCode: code}
}

func exUnsupported(op Operation) *Response {
	r := exFailure(ErrUnsupported)
	r.Unsupported = exDeclared(op)
	return r
}

// exDeclared is the evidence a registered declaration gives for op when
// it declares op unsupported (the reason exUnsupported's responses carry).
func exDeclared(op Operation) *Unsupported {
	return &Unsupported{Operation: op, Reason: "snapshots are not supported by the docker provider"}
}

func exReceipt() *Response {
	r := exFailure(ErrExists)
	r.Info = exInfo()
	return r
}

type namedFrame struct {
	name string
	f    Frame
}

// validExamples returns a valid example of every frame, of a request and
// a success response for every operation, and of the failure shapes.
func validExamples() []namedFrame {
	ex := []namedFrame{
		{"hello", exHello()},
		{"welcome", exWelcome()},
		{"heartbeat", exHeartbeat()},
		{"heartbeat_ack", exHeartbeatAck()},
		{"retention", exRetention()},
		{"retention_ack", exRetentionAck()},
		{"response/failure", exFailure(ErrNotFound)},
		{"response/unknown-code", exFailure("disk_on_fire")},
		{"response/unsupported", exUnsupported(OpSuspend)},
		{"response/create-receipt", exReceipt()},
	}
	for _, op := range Operations {
		ex = append(ex,
			namedFrame{"request/" + string(op), exRequest(op)},
			namedFrame{"response/" + string(op), exResponse(op)})
	}
	return ex
}
