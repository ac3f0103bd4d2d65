// Package authorizer is the gateway's sandbox authorizer (spec §3.3, the
// ProviderAuthorizer: "ownership/running checks … may cache authorization
// results"): before a data-plane request is served, it asks whether the
// token's resource credential may still reach the token's sandbox — the
// sandbox exists, its creating credential is the token's (or the token's
// credential is project-wide), it is not being deleted, its end time has
// not passed, and it is serving (its create finished and its pod is ready
// with an endpoint: the lifecycle state of spec §5.3, "running"). corectl answers (its internal endpoint, Path) from its
// informer cache of BatchSandboxes, and HTTP caches each answer for at
// most a second, so a deleted, expired or foreign sandbox is refused
// within about a second of the change without an apiserver round trip per
// request.
//
// The wire contract, shared with corectl (package corectl/httpapi):
//
//	GET <base>/internal/v1/authorize?credential=<credential ID>&sandbox=<sandbox ID>
//	Authorization: Bearer <corectl's internal token>
//	→ 200 {"allowed": true, "endAt": "<RFC 3339>"}
//	→ 200 {"allowed": false, "reason": "not_found" | "deleting" | "expired" | "not_ready"}
//
// A port request of the host routing (docs/dataplane.md "Host routing")
// proves no credential when it carries no traffic token; it asks where the
// sandbox is and whether its ports need one (Locator):
//
//	GET <base>/internal/v1/authorize?sandbox=<sandbox ID>
//	→ 200 {"allowed": true, "cluster": "<cluster ID>", "trafficTokenRequired": true|absent, "endAt": …}
//	→ 200 {"allowed": false, "reason": …}
//
// Any other answer (status, body, transport error, timeout) is
// ErrUnavailable and the request is refused (fail closed).
package authorizer

import (
	"context"
	"errors"
	"time"
)

// Path is corectl's authorization endpoint, relative to its base URL.
const Path = "/internal/v1/authorize"

// Reason says why a sandbox is refused.
type Reason string

// Refusal reasons.
const (
	// ReasonNotFound: no such sandbox, or the credential does not see it
	// (another credential's sandbox is answered exactly as a missing one).
	ReasonNotFound Reason = "not_found"
	// ReasonDeleting: the sandbox is being deleted, or its deletion could
	// not be confirmed (CleanupFailed): spec §5.2 "rejects normal access".
	ReasonDeleting Reason = "deleting"
	// ReasonExpired: the sandbox's end time has passed (its deletion is
	// under way).
	ReasonExpired Reason = "expired"
	// ReasonNotReady: the sandbox exists and the credential sees it, but
	// it is not serving: its create has not finished, or its pod is not
	// ready or has no endpoint (lifecycle Creating or PodUnavailable, spec
	// §3.3 "running" and §5.3). The data plane answers it as the fixed
	// entry's ingress answers such a sandbox (SANDBOX_NOT_READY). A gateway
	// older than this reason reads it as a malformed answer and refuses
	// the request (fail closed).
	ReasonNotReady Reason = "not_ready"
)

// Answer is the endpoint's JSON answer.
type Answer struct {
	// Allowed is true when the credential may reach the sandbox.
	Allowed bool `json:"allowed"`
	// Reason is set when Allowed is false.
	Reason Reason `json:"reason,omitempty"`
	// EndAt is the sandbox's end time when Allowed (RFC 3339); absent
	// when it has none.
	EndAt string `json:"endAt,omitempty"`
	// Cluster is the sandbox's cluster ID; set, and only, in an allowed
	// answer to a Locate question.
	Cluster string `json:"cluster,omitempty"`
	// TrafficTokenRequired is true in an allowed answer to a Locate
	// question when the sandbox was created with
	// network.allowPublicTraffic false: its ports need a traffic token.
	TrafficTokenRequired bool `json:"trafficTokenRequired,omitempty"`
}

// Decision is an Authorizer's verdict.
type Decision struct {
	// Allowed is true when the request may proceed.
	Allowed bool
	// Reason is set when Allowed is false.
	Reason Reason
	// EndAt is the sandbox's end time (zero when none or refused).
	EndAt time.Time
	// ClusterID is the sandbox's cluster, set by Locate when allowed.
	ClusterID string
	// TrafficTokenRequired is set by Locate when allowed and the
	// sandbox's ports need a traffic token.
	TrafficTokenRequired bool
}

// ErrUnavailable: the authorizer could not decide (corectl unreachable,
// an unexpected answer). Callers refuse the request.
var ErrUnavailable = errors.New("authorizer: unavailable")

// ErrInvalidConfig: NewHTTP was given an unusable configuration.
var ErrInvalidConfig = errors.New("authorizer: invalid configuration")

// Authorizer decides whether credentialID may reach sandboxID. Errors wrap
// ErrUnavailable. Implementations are safe for concurrent use.
type Authorizer interface {
	// Authorize returns the decision for credentialID and sandboxID,
	// possibly from a cache.
	Authorize(ctx context.Context, credentialID, sandboxID string) (Decision, error)
}

// Locator finds a sandbox by its ID alone: whether it may be reached, its
// cluster and whether its ports need a traffic token. The host routing
// asks it for a port request that carries no traffic token, so proves no
// credential (E2B's public sandbox ports). Errors wrap ErrUnavailable.
type Locator interface {
	// Locate returns the decision for sandboxID, possibly from a cache;
	// when Allowed, ClusterID is set.
	Locate(ctx context.Context, sandboxID string) (Decision, error)
}

// Rechecker is an Authorizer that can also answer without its cache. The
// data plane asks it when a command stream breaks, to tell a sandbox that
// was just deleted (or expired) from a connection that failed: a cached
// allowed answer may be up to a TTL old. Errors wrap ErrUnavailable.
type Rechecker interface {
	Authorizer
	// Recheck asks afresh, whatever the cache holds; the answer
	// replaces the cached one.
	Recheck(ctx context.Context, credentialID, sandboxID string) (Decision, error)
}
