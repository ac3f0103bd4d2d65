package proto

import (
	"maps"
	"slices"
)

// Diagnostic codes a node reports in Health.Diagnostic and
// GenerationObservation.Diagnostic (spec "Connection": a fixed diagnostic
// code, classified from the typed probe error; probe text and host paths
// stay on the node). The codes and causes are listed in the node guide,
// docs/node-protocol.md, and in testdata/node-diagnostics.json; a test keeps
// the three equal.
const (
	// DiagProviderUnavailable is the fallback for an unclassified probe
	// failure, and what Core stores for any code it does not know.
	DiagProviderUnavailable = "provider_unavailable"
	// DiagDockerUnreachable: the Docker socket is missing or refuses
	// connections.
	DiagDockerUnreachable = "docker_unreachable"
	// DiagDockerPermissionDenied: the node may not open the Docker socket.
	DiagDockerPermissionDenied = "docker_permission_denied"
	// DiagDockerTimeout: the Docker daemon did not answer within the probe
	// deadline.
	DiagDockerTimeout = "docker_timeout"
	// DiagDockerAPIVersionUnsupported: the daemon's Engine API version is
	// outside what the provider supports.
	DiagDockerAPIVersionUnsupported = "docker_api_version_unsupported"
	// DiagDockerDaemonError: the daemon answered the probe with a 5xx.
	DiagDockerDaemonError = "docker_daemon_error"
	// DiagStorageFull: the provider's data filesystem has no space left.
	DiagStorageFull = "storage_full"
	// DiagImageMissing: an image or native artifact of the generation is
	// missing; a repair is queued.
	DiagImageMissing = "image_missing"
	// DiagRuntimeDownloadFailed: downloading or verifying the selected
	// Runtime's artifacts failed.
	DiagRuntimeDownloadFailed = "runtime_download_failed"
	// DiagSeccompProfileMissing: the generation's seccomp profile bytes are
	// missing; the provider stays a not-ready placeholder.
	DiagSeccompProfileMissing = "seccomp_profile_missing"
	// DiagProviderConfigMissing: the generation's provider configuration is
	// missing and there is no exact preparation plan; repair is refused.
	DiagProviderConfigMissing = "provider_config_missing"
	// DiagCredentialRejected: Core's machine API rejected the node's
	// credential (HTTP 401) while a preparation or repair asked for the
	// generation's runtime.
	DiagCredentialRejected = "credential_rejected"
	// DiagGenerationUnknown: Core serves no runtime of the generation to
	// the node (its pool binds no release to it).
	DiagGenerationUnknown = "generation_unknown"
)

// diagnostics maps every known diagnostic code to its cause, as the node
// guide states it.
var diagnostics = map[string]string{
	DiagProviderUnavailable:         "The provider probe failed for a reason no other code covers; Core also stores any unknown code as this one.",
	DiagDockerUnreachable:           "The Docker socket does not exist or refuses connections: the daemon is not running or listens elsewhere.",
	DiagDockerPermissionDenied:      "The node's user may not open the Docker socket (not in the docker group, or the socket's mode forbids it).",
	DiagDockerTimeout:               "The Docker daemon accepted the connection but did not answer the probe before its deadline.",
	DiagDockerAPIVersionUnsupported: "The Docker Engine API version the daemon offers is outside the range the provider supports.",
	DiagDockerDaemonError:           "The Docker daemon answered the probe with a server error (HTTP 5xx).",
	DiagStorageFull:                 "The filesystem holding the provider's data has no space left.",
	DiagImageMissing:                "A sandbox image or native artifact of the generation is missing; the node queues a repair and does not report ready.",
	DiagRuntimeDownloadFailed:       "Transferring the selected Runtime's artifacts failed, or their checksums or version provenance did not match the verified manifest.",
	DiagSeccompProfileMissing:       "The generation's seccomp profile bytes are missing, so the provider stays a not-ready placeholder.",
	DiagProviderConfigMissing:       "The generation's provider configuration is missing and there is no exact preparation plan, so repair is refused.",
	DiagCredentialRejected:          "Core rejected the node's credential (HTTP 401) when a preparation or repair asked for the generation's runtime: the node is disabled or its credential was replaced.",
	DiagGenerationUnknown:           "Core serves no runtime of the generation to this node: its pool binds no release to that generation.",
}

// DiagnosticCause returns the cause of a known diagnostic code, as the
// node guide states it, and whether the code is known.
func DiagnosticCause(code string) (string, bool) {
	c, ok := diagnostics[code]
	return c, ok
}

// DiagnosticCodes returns the known diagnostic codes, sorted.
func DiagnosticCodes() []string {
	return slices.Sorted(maps.Keys(diagnostics))
}

// NormalizeDiagnostic returns code if it is a known diagnostic code and
// DiagProviderUnavailable otherwise (spec: Core stores unknown codes as
// provider_unavailable). The wire accepts any code of the form
// [a-z0-9_]{1,64}; this is where unknown ones are folded.
func NormalizeDiagnostic(code string) string {
	if _, ok := diagnostics[code]; ok {
		return code
	}
	return DiagProviderUnavailable
}
