// Package lifecycle is corectl's sandbox lifecycle orchestration behind
// the E2B control API (spec §3.1, §4.1, §4.2, §5.2 deletion, §5.3): create
// with the sandbox's network objects in the fail-closed order and
// compensation on failure, readiness through the cluster's fixed entry,
// the runtime token, connect, the lifecycle state, deletion, and the
// orphan scan that converges leftovers.
//
// Before any step, Create resolves the request's template and network
// (the template's defaults, the request's network object). Each network
// object is written, read back and checked by the engine that owns it
// (egress, ingressallow); this package keeps the order and the
// compensation. Create runs these steps in order (Step*); any failure before the token
// compensates: the BatchSandbox, once written, is marked Deleting (so
// network PUTs are refused from then on), then the managed Ingress is
// deleted first and confirmed gone, then the ingress desired state, the
// BatchSandbox and, once the BatchSandbox is confirmed gone and no pod the
// policy selects is left (PodGoneWait), the policy:
//
//  1. StepCNIGate: the cluster's CNI qualification (spec §5.3);
//  2. StepIngress: when the resolved ingress allowlist U is non-empty, the
//     managed Ingress sandbox-ingress-<id> is created and its create's
//     answer (the object as stored) checked (ingressallow's CreateCarrier;
//     an empty U means an unrestricted sandbox: no carrier, spec §5.2.1);
//     the path-claim lists of step 6's cycle are asked for at once
//     (ingressallow's StartClaims), so their wait for the apiserver's
//     watch cache runs beside steps 4 and 5;
//  3. StepPolicy: the egress NetworkPolicy sandbox-egress-<allocationID> is
//     created with the resolved egress set as its verified spec and its
//     answer checked (egress's CreateVerified). Steps 2 and 3 run side by
//     side, each to its end (neither object selects or admits anything
//     before the BatchSandbox exists); a failure of either fails the
//     create at the first of them in this order, and the compensation
//     removes whichever was written;
//  4. StepBatchSandbox: the BatchSandbox CR with the allocation label in its
//     pod template and lifecycle Creating;
//  5. StepOwners: owner references (and the owner annotation) back-filled
//     on the Ingress and the policy side by side, each update's answer
//     verified (each engine's AdoptOwner); the egress GET view must be
//     networkReady (selector and conflict checks: reads only, started
//     here and awaited after step 6, its failure this step's);
//  6. StepDesired: the ingress desired state (SandboxIngressAllowlist,
//     owned by the BatchSandbox) persisted and one reconcile cycle run
//     synchronously (ingressallow's Settle); it must end Verified (the desired state needs the
//     BatchSandbox as owner, so it is written here rather than before the
//     carrier; until then the carrier itself records U). It is only ever
//     created: an allowlist a PUT /network/ingress made since the
//     BatchSandbox appeared is kept, and the cycle verifies the PUT's
//     rules (the later writer's) instead of U;
//  7. StepReadiness: GET <fixedEntry>/<id>/44772/ping answers 200 within
//     the budget (spec §4.2);
//  8. StepToken: the envd access token (bound to the credential ID, the
//     sandbox ID and port 49983) is minted with the gateway's key, and the
//     lifecycle becomes Ready.
//
// No token is minted on any failure path, and a Create error never
// contains one.
package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/scanmeta"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/gateway/token"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnvdPort is the logical in-sandbox port of envd the runtime token is
// bound to (spec §4.1).
const EnvdPort = 49983

// ExecdPort is execd's port; readiness pings /<id>/44772/ping (spec §4.2).
const ExecdPort = 44772

// DefaultEnvdVersion is the envd version reported to the SDKs: what the
// gateway implements (docs/wire-facts.md §E5: 0.5.7 gives the modern default user
// and octet-stream uploads).
const DefaultEnvdVersion = "0.5.7"

// Lifecycle states recorded in v1alpha1.AnnotationLifecycle, and the
// states GET derives (spec §5.3).
const (
	// StateCreating: the create orchestration has not finished.
	StateCreating = "Creating"
	// StateReady: created, the pod is ready and the network objects are
	// verified.
	StateReady = "Ready"
	// StatePodUnavailable: created, but the BatchSandbox reports no ready
	// replica or no endpoint.
	StatePodUnavailable = "PodUnavailable"
	// StateUnverifiedSpec: a network object is not verified (egress or
	// ingress verificationState UnverifiedSpec, or egress not ready).
	StateUnverifiedSpec = v1alpha1.StateUnverifiedSpec
	// StatePolicyConflict: a non-platform NetworkPolicy widens the egress.
	StatePolicyConflict = "PolicyConflict"
	// StateIndeterminate: a network object's state cannot be confirmed.
	StateIndeterminate = v1alpha1.StateIndeterminate
	// StateDeleting: the delete orchestration is revoking the sandbox.
	StateDeleting = v1alpha1.StateDeleting
	// StateCleanupFailed: deletion of the managed Ingress could not be
	// confirmed; the orphan scan retries.
	StateCleanupFailed = v1alpha1.StateCleanupFailed
)

// Step names one step of Create or of its compensation, for Fault and in
// CreateError.Cleanup.
type Step string

// Create steps, in order, and compensation steps.
const (
	// StepCNIGate checks the cluster's CNI qualification.
	StepCNIGate Step = "cni-gate"
	// StepIngress creates and verifies the managed Ingress (restricted
	// sandboxes only).
	StepIngress Step = "ingress"
	// StepPolicy creates and verifies the egress NetworkPolicy.
	StepPolicy Step = "policy"
	// StepBatchSandbox creates the BatchSandbox CR.
	StepBatchSandbox Step = "batchsandbox"
	// StepOwners back-fills and verifies owner references.
	StepOwners Step = "owners"
	// StepDesired persists the ingress desired state and verifies it.
	StepDesired Step = "desired"
	// StepReadiness pings execd through the fixed entry.
	StepReadiness Step = "readiness"
	// StepToken mints the token and records lifecycle Ready.
	StepToken Step = "token"
	// StepDeleteIngress deletes the managed Ingress and confirms it is
	// gone (first in compensation and in Delete).
	StepDeleteIngress Step = "delete-ingress"
	// StepDeleteDesired deletes the SandboxIngressAllowlist.
	StepDeleteDesired Step = "delete-desired"
	// StepDeleteBatchSandbox deletes the BatchSandbox.
	StepDeleteBatchSandbox Step = "delete-batchsandbox"
	// StepDeletePolicy waits for the pods the egress NetworkPolicy selects
	// to be gone (after the BatchSandbox's deletion was confirmed), then
	// deletes the policy.
	StepDeletePolicy Step = "delete-policy"
)

// CreateSteps lists the create steps in execution order.
var CreateSteps = []Step{StepCNIGate, StepIngress, StepPolicy, StepBatchSandbox, StepOwners, StepDesired, StepReadiness, StepToken}

// Error codes of CreateError and DeleteError (the E2B envelope's "error").
const (
	// CodeCreateFailed: a step failed and everything created was removed
	// and confirmed gone.
	CodeCreateFailed = "create_failed"
	// CodeIngressPendingCleanup: a step failed and the managed Ingress
	// could not be confirmed deleted ("create failed, ingress pending
	// cleanup"); the orphan scan retries.
	CodeIngressPendingCleanup = "create_failed_ingress_pending_cleanup"
	// CodeCNIUnqualified: the CNI gate refused the create.
	CodeCNIUnqualified = "cni_unqualified"
	// CodeNotReady: the readiness check did not pass within the budget.
	CodeNotReady = "sandbox_not_ready"
	// CodeDeletePending: the Ingress deletion could not be confirmed; the
	// sandbox is CleanupFailed.
	CodeDeletePending = "delete_failed_ingress_pending_cleanup"
)

// Errors of Connect, Status and Delete.
var (
	// ErrNotFound: no sandbox of that ID in the namespace.
	ErrNotFound = errors.New("lifecycle: sandbox not found")
	// ErrConflict: the lifecycle state refuses the operation (spec §5.3);
	// the error text names the state.
	ErrConflict = errors.New("lifecycle: sandbox state refuses the operation")
	// ErrUnavailable: the apiserver could not answer.
	ErrUnavailable = errors.New("lifecycle: cluster unavailable")
)

// Orchestrator runs the lifecycle of the sandboxes of one cluster.
type Orchestrator struct {
	// Client reaches the cluster's apiserver (uncached).
	Client client.Client
	// Cache, when set, is the manager's informer cache of the managed
	// BatchSandboxes, with the sandbox.IndexCredential index; the list
	// routes read it (List) instead of the apiserver. nil: List asks the
	// apiserver.
	Cache client.Reader
	// Cluster is the cluster's configuration.
	Cluster *cluster.Cluster
	// Egress is the cluster's egress engine (its GET view verifies the
	// policy after the owner back-fill).
	Egress *egress.Engine
	// Ingress is the cluster's ingress engine (desired state and one
	// synchronous reconcile cycle).
	Ingress *ingressallow.Engine
	// Key signs envd access tokens; it must be a key the gateway verifies.
	Key token.SigningKey
	// MaxTimeout is the longest timeout a create, connect or setTimeout
	// may ask for, and the longest a sandbox lives from its start (E2B's
	// maxLengthHours; default DefaultMaxTimeout).
	MaxTimeout time.Duration
	// TokenGrace is how long an envd access token outlives the latest end
	// its sandbox can have (start + MaxTimeout); default
	// DefaultTokenGrace. See tokenExpiry.
	TokenGrace time.Duration
	// EnvdVersion is reported to the SDKs (default DefaultEnvdVersion).
	EnvdVersion string
	// HTTP dials the fixed entry for readiness (default: a client with a
	// 5 s timeout per attempt).
	HTTP *http.Client
	// ReadyBudget bounds the readiness check (default 60 s).
	ReadyBudget time.Duration
	// ReadyInterval is the longest pause between readiness attempts
	// (default 200 ms). The pauses start at FirstReadyInterval (or
	// ReadyInterval when that is shorter) and double up to it, so a
	// sandbox that starts quickly is seen quickly.
	ReadyInterval time.Duration
	// Template returns the configured pod of an E2B template ID
	// (cluster.Config.SandboxTemplate); a create naming an ID it does not
	// know fails before writing anything. nil knows no template.
	Template func(templateID string) (*cluster.SandboxTemplate, bool)
	// Templates stores the template network defaults a create inherits
	// (they may live in another cluster); nil: no template has defaults.
	Templates *template.Store
	// OrphanGrace is how old a leftover must be before the orphan scan
	// removes it (default 5 min), so creates in flight are not touched.
	OrphanGrace time.Duration
	// PodGoneWait bounds how long a delete (and a create's compensation)
	// waits, after the BatchSandbox is gone, for the pods its egress
	// policy selects to be gone before it deletes the policy (default
	// DefaultPodGoneWait). Past it the policy is kept, still confining
	// whatever runs, and the orphan scan removes it once no pod is left.
	PodGoneWait time.Duration
	// Metadata lists the orphan scan's Ingresses and NetworkPolicies,
	// decoding only what the scan decides on (scanmeta.New on the
	// cluster's configuration). nil: controller-runtime's metadata client
	// through Client, which decodes each object's metadata whole.
	Metadata *scanmeta.Lister
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Probe, when set, discovers the control-plane probe sources merged
	// into a restricted sandbox's carrier (spec §5.2.2); a discovery
	// failure fails the create closed; a 403 during readiness invalidates
	// the cache, rediscovers and rewrites the carrier, within the budget.
	// nil writes the user allowlist alone.
	Probe *probesource.Discoverer
	// Fault, when set, is called before every create and compensation
	// step; a non-nil error makes that step fail. For tests.
	Fault func(id string, s Step) error
	// Metrics records every create, compensation and delete step's
	// outcome and duration (corectl_lifecycle_steps_total,
	// corectl_lifecycle_step_duration_seconds); nil records nothing.
	Metrics *metrics.Metrics
}

// timed runs one step of operation op (metrics.Operation*) and records
// its outcome and duration.
func (o *Orchestrator) timed(op string, s Step, f func() error) error {
	start := time.Now()
	err := f()
	o.Metrics.Step(o.Cluster.ID, op, string(s), time.Since(start), err)
	return err
}

func (o *Orchestrator) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Orchestrator) fault(id string, s Step) error {
	if o.Fault == nil {
		return nil
	}
	if err := o.Fault(id, s); err != nil {
		return fmt.Errorf("injected fault: %w", err)
	}
	return nil
}

// EnvdVer returns the envd version reported to the SDKs.
func (o *Orchestrator) EnvdVer() string {
	if o.EnvdVersion != "" {
		return o.EnvdVersion
	}
	return DefaultEnvdVersion
}

// errLeftState: a conditional lifecycle transition found the sandbox in
// another state than the one it moves from.
var errLeftState = errors.New("the sandbox's lifecycle state changed meanwhile")

// transition moves the lifecycle annotation of BatchSandbox ns/id from
// state from to state to in one JSON patch whose test operation makes the
// apiserver refuse it (422) when the annotation is no longer from. Errors:
// errLeftState wrapped with the states, or the apiserver's error.
func (o *Orchestrator) transition(ctx context.Context, ns, id, from, to string) error {
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(v1alpha1.AnnotationLifecycle)
	patch, err := json.Marshal([]map[string]string{
		{"op": "test", "path": path, "value": from},
		{"op": "replace", "path": path, "value": to},
	})
	if err != nil {
		return err
	}
	if err := o.Client.Patch(ctx, batchSandboxRef(ns, id), client.RawPatch(types.JSONPatchType, patch)); err != nil {
		var st apierrors.APIStatus
		if errors.As(err, &st) && st.Status().Code == http.StatusUnprocessableEntity {
			return fmt.Errorf("set lifecycle %s on BatchSandbox %s/%s: %w (it is no longer %s)", to, ns, id, errLeftState, from)
		}
		return fmt.Errorf("set lifecycle %s on BatchSandbox %s/%s: %w", to, ns, id, err)
	}
	return nil
}

// setLifecycle merge-patches the lifecycle annotation of the BatchSandbox.
func (o *Orchestrator) setLifecycle(ctx context.Context, ns, id, state string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	u.SetNamespace(ns)
	u.SetName(id)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationLifecycle, state)
	if err := o.Client.Patch(ctx, u, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		return fmt.Errorf("set lifecycle %s on BatchSandbox %s/%s: %w", state, ns, id, err)
	}
	return nil
}

func batchSandboxRef(ns, id string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	u.SetNamespace(ns)
	u.SetName(id)
	return u
}
