// Package preparer is the node's private preparer (spec node-protocol.md
// "Restart recovery", "Preparation and reclamation records"): `nodeagent
// preparer`, a process of its own that runs one job on one deployment
// generation — prepare, repair or reclaim — under the installation lock
// and the generation's exclusive lease, writing the journals that make
// every step restartable, and reports how it ended by its exit status
// alone. The node (Launcher) maps that status to a fixed diagnostic; it
// never parses the preparer's stderr.
//
// Prepare: create the lease and its identity record, write the plan
// (import_started false), ask Core's authenticated configuration for the
// exact generation, download the pinned release's manifest and artifacts
// into the generation's private directory (only the missing bytes) and
// verify their SHA-256 and provenance, record import_started true, load
// the image tarball into Docker, publish the final configuration once
// with the immutable local image ID, clear the plan.
//
// Repair: verify every existing version file of a prepared generation,
// download only the missing ones from the same release, load the image
// again if the engine lost it and check it is the recorded image ID.
//
// Reclaim: write the reclamation journal, record the native clean-up
// (Docker images are never deleted or pruned), verify every remaining
// version file, delete them, write the digest-bound dropped marker, clear
// the journal.
package preparer

import (
	"errors"
	"os/exec"
	"syscall"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodeagent/generation"
)

// Exit statuses of the preparer: its only report to the node.
const (
	// ExitOK: the job completed.
	ExitOK = 0
	// ExitUsage: the preparer was started with bad arguments.
	ExitUsage = 2
	// ExitDownload: transferring the runtime's artifacts, their checksum
	// or their version provenance failed (runtime_download_failed).
	ExitDownload = 64
	// ExitConfigMissing: the generation's provider configuration is
	// missing and there is no exact plan; repair refused
	// (provider_config_missing).
	ExitConfigMissing = 65
	// ExitRefused: a conflict (bytes that differ, a different retained
	// specification, a plan that drifted), a dropped generation, or a
	// lease or record that cannot be verified; nothing was changed
	// (provider_unavailable).
	ExitRefused = 66
	// ExitBusy: the lease or the installation lock is held by another
	// helper, reclaimer or repair; nothing was done.
	ExitBusy = 67
	// ExitCredentialRejected: Core's machine API rejected the node's
	// credential (HTTP 401) when the job asked for the runtime; not a
	// transfer failure (credential_rejected).
	ExitCredentialRejected = 68
	// ExitGenerationUnknown: Core serves no runtime of the job's
	// generation to the node (404 generation_unknown); not a transfer
	// failure (generation_unknown).
	ExitGenerationUnknown = 69
	// ExitProvider is the first of the provider fault statuses: 70 +
	// the index of the diagnostic in providerFaults.
	ExitProvider = 70
)

// providerFaults are the typed provider faults a job can end with, in
// exit-status order from ExitProvider; the last one is the catch-all.
var providerFaults = []string{
	proto.DiagDockerUnreachable,
	proto.DiagDockerPermissionDenied,
	proto.DiagDockerTimeout,
	proto.DiagDockerAPIVersionUnsupported,
	proto.DiagDockerDaemonError,
	proto.DiagStorageFull,
	proto.DiagImageMissing,
	proto.DiagProviderUnavailable,
}

// exitForDiagnostic returns the exit status of a provider fault.
func exitForDiagnostic(diag string) int {
	for i, d := range providerFaults {
		if d == diag {
			return ExitProvider + i
		}
	}
	return ExitProvider + len(providerFaults) - 1
}

// OutcomeOf maps a preparer's end to the job's outcome: the exit status
// decides, and a preparer killed by a signal (or that could not run) is
// an unclassified fault.
func OutcomeOf(err error) generation.Outcome {
	if err == nil {
		return generation.Outcome{OK: true}
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return generation.Outcome{Diagnostic: proto.DiagProviderUnavailable}
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return generation.Outcome{Diagnostic: proto.DiagProviderUnavailable}
	}
	return outcomeOfStatus(ee.ExitCode())
}

func outcomeOfStatus(code int) generation.Outcome {
	switch {
	case code == ExitOK:
		return generation.Outcome{OK: true}
	case code == ExitDownload:
		return generation.Outcome{Diagnostic: proto.DiagRuntimeDownloadFailed}
	case code == ExitConfigMissing:
		return generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderConfigMissing}
	case code == ExitRefused:
		return generation.Outcome{Refused: true, Diagnostic: proto.DiagProviderUnavailable}
	case code == ExitBusy:
		return generation.Outcome{Busy: true}
	case code == ExitCredentialRejected:
		return generation.Outcome{Diagnostic: proto.DiagCredentialRejected}
	case code == ExitGenerationUnknown:
		return generation.Outcome{Diagnostic: proto.DiagGenerationUnknown}
	case code >= ExitProvider && code < ExitProvider+len(providerFaults):
		return generation.Outcome{Diagnostic: providerFaults[code-ExitProvider]}
	}
	return generation.Outcome{Diagnostic: proto.DiagProviderUnavailable}
}
