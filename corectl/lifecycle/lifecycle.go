// Package lifecycle is corectl's sandbox lifecycle orchestration behind
// the E2B control API (spec §3.1, §4.1, §4.2, §5.2 deletion, §5.3): create
// with the sandbox's network objects in the fail-closed order and
// compensation on failure, readiness through the cluster's fixed entry,
// the runtime token, connect, the lifecycle state, deletion, and the
// orphan scan that converges leftovers.
//
// Create runs these steps in order (Step*); any failure before the token
// compensates: the BatchSandbox, once written, is marked Deleting (so
// network PUTs are refused from then on), then the managed Ingress is
// deleted first and confirmed gone, then the ingress desired state, the
// BatchSandbox and the policy:
//
//  1. StepCNIGate: the cluster's CNI qualification (spec §5.3);
//  2. StepIngress: when the resolved ingress allowlist U is non-empty, the
//     managed Ingress sandbox-ingress-<id> is created and read back until it
//     passes ingressallow.CheckCarrier (an empty U means an unrestricted
//     sandbox: no carrier, spec §5.2.1);
//  3. StepPolicy: the egress NetworkPolicy sandbox-egress-<allocationID> is
//     created with the resolved egress set as its verified spec and read
//     back;
//  4. StepBatchSandbox: the BatchSandbox CR with the allocation label in its
//     pod template and lifecycle Creating;
//  5. StepOwners: owner references (and the owner annotation) back-filled
//     on the Ingress and the policy, read back and verified; the egress GET
//     view must be networkReady (selector and conflict checks);
//  6. StepDesired: the ingress desired state (SandboxIngressAllowlist,
//     owned by the BatchSandbox) persisted and one reconcile cycle run
//     synchronously; it must end Verified (the desired state needs the
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
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/token"
	"golang.org/x/sync/errgroup"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// StepDeletePolicy deletes the egress NetworkPolicy.
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

// CreateError is a failed Create.
type CreateError struct {
	// Code is one of the Code* constants.
	Code string
	// Step is the step that failed.
	Step Step
	// Reason says why (never contains a token).
	Reason string
	// Cleanup lists the compensation steps that ran, in order; a step that
	// could not be confirmed is suffixed ":unconfirmed".
	Cleanup []string
}

// Error implements error: "<code>: step <step>: <reason>".
func (e *CreateError) Error() string {
	return fmt.Sprintf("%s: step %s: %s", e.Code, e.Step, e.Reason)
}

// Orchestrator runs the lifecycle of the sandboxes of one cluster.
type Orchestrator struct {
	// Client reaches the cluster's apiserver (uncached).
	Client client.Client
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
	// OrphanGrace is how old a leftover must be before the orphan scan
	// removes it (default 5 min), so creates in flight are not touched.
	OrphanGrace time.Duration
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

// CreateRequest is what Create needs.
type CreateRequest struct {
	// CredentialID binds the token (the caller's resource credential).
	CredentialID string
	// Namespace is the credential's project namespace.
	Namespace string
	// TemplateID is the E2B template.
	TemplateID string
	// Network is the resolved initial network (package createnet).
	Network *createnet.Initial
	// Metadata is E2B's sandbox metadata, stored on the BatchSandbox
	// (v1alpha1.AnnotationMetadata) and reported by GET and the lists;
	// validated by the caller (ValidateMetadata).
	Metadata map[string]string
	// EnvVars are E2B's envVars: set in the sandbox container's env
	// (replacing a template entry of the same name); validated by the
	// caller (ValidateEnvVars).
	EnvVars map[string]string
	// Timeout is the sandbox's time to live from now (0: DefaultTimeout);
	// the caller checks it with CheckTimeout.
	Timeout time.Duration
	// SandboxID, when set, is used instead of a random ID (tests).
	SandboxID string
}

// Created is a successful Create.
type Created struct {
	// SandboxID is the new sandbox.
	SandboxID string
	// AllocationID is its allocation identity.
	AllocationID string
	// Token is the envd access token. Never log it.
	Token string
}

// NewID returns a random sandbox or allocation ID: prefix + 20 lowercase
// hex digits (a DNS-1123 label and E2B's ^[a-z0-9]+$).
func NewID(prefix string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Create runs the create orchestration (see the package documentation).
// The error is a *CreateError.
func (o *Orchestrator) Create(ctx context.Context, req CreateRequest) (*Created, error) {
	id := req.SandboxID
	if id == "" {
		id = NewID("sb")
	}
	if err := sandbox.ValidateID(id); err != nil {
		return nil, &CreateError{Code: CodeCreateFailed, Step: StepCNIGate, Reason: err.Error()}
	}
	alloc := NewID("al")
	c := &creation{o: o, id: id, ns: req.Namespace, alloc: alloc}
	net := req.Network
	if net == nil {
		net = &createnet.Initial{}
	}
	c.ingressSet = ingressallow.CIDRs(net.Ingress)
	prov := &sandbox.Sandbox{ID: id, Namespace: req.Namespace, AllocationLabel: o.Cluster.AllocationLabelKey(), AllocationID: alloc,
		TemplateLabels: map[string]string{o.Cluster.AllocationLabelKey(): alloc}, Owner: req.CredentialID}

	step := func(s Step, f func() error) error {
		return o.timed(metrics.OperationCreate, s, func() error {
			if err := o.fault(id, s); err != nil {
				return err
			}
			return f()
		})
	}
	fail := func(s Step, code string, err error) (*Created, error) {
		ce := &CreateError{Code: code, Step: s, Reason: err.Error()}
		pending := c.compensate(ctx, ce)
		if pending {
			ce.Code = CodeIngressPendingCleanup
		}
		return nil, ce
	}

	if err := step(StepCNIGate, o.Cluster.CNIGate); err != nil {
		return fail(StepCNIGate, CodeCNIUnqualified, err)
	}
	if len(c.ingressSet) > 0 {
		if err := step(StepIngress, func() error { return c.createIngress(ctx, prov) }); err != nil {
			return fail(StepIngress, CodeCreateFailed, err)
		}
	}
	if err := step(StepPolicy, func() error { return c.createPolicy(ctx, prov, net.Egress) }); err != nil {
		return fail(StepPolicy, CodeCreateFailed, err)
	}
	var sb *sandbox.Sandbox
	if err := step(StepBatchSandbox, func() (err error) {
		sb, err = c.createBatchSandbox(ctx, req)
		return err
	}); err != nil {
		return fail(StepBatchSandbox, CodeCreateFailed, err)
	}
	if err := step(StepOwners, func() error { return c.backfillOwners(ctx, sb) }); err != nil {
		return fail(StepOwners, CodeCreateFailed, err)
	}
	if len(c.ingressSet) > 0 {
		if err := step(StepDesired, func() error { return c.persistDesired(ctx, sb, net.Ingress) }); err != nil {
			return fail(StepDesired, CodeCreateFailed, err)
		}
	}
	if err := step(StepReadiness, func() error { return o.readiness(ctx, id, c.onForbidden) }); err != nil {
		return fail(StepReadiness, CodeNotReady, err)
	}
	var tok string
	if err := step(StepToken, func() (err error) {
		tok, err = o.mint(req.CredentialID, id, sb.Start)
		if err != nil {
			return err
		}
		// Only a sandbox still Creating becomes Ready: a DELETE that marked
		// it Deleting meanwhile (the create holds no lock here) wins, and
		// this create fails and compensates instead of reviving it.
		return o.transition(ctx, c.ns, c.id, StateCreating, StateReady)
	}); err != nil {
		tok = ""
		return fail(StepToken, CodeCreateFailed, err)
	}
	return &Created{SandboxID: id, AllocationID: alloc, Token: tok}, nil
}

// mint signs the envd access token for credential and sandbox id, which
// started at start; it expires at tokenExpiry(start).
func (o *Orchestrator) mint(credentialID, id string, start time.Time) (string, error) {
	now := o.now()
	ttl := o.tokenExpiry(start).Sub(now)
	if ttl <= 0 {
		return "", fmt.Errorf("mint the envd access token: sandbox %s started more than %s ago", id, o.maxTimeout())
	}
	t, err := o.Key.Mint(token.Target{CredentialID: credentialID, SandboxID: id, Port: EnvdPort}, ttl, now)
	if err != nil {
		// token errors never contain key material or tokens.
		return "", fmt.Errorf("mint the envd access token: %w", err)
	}
	return t, nil
}

// creation is the state of one Create: what it has written.
type creation struct {
	o          *Orchestrator
	id, ns     string
	alloc      string
	ingressSet []string

	// wroteIngress and wrotePolicy: this create wrote the carrier, the
	// policy. The desired state needs no flag of its own: it is written
	// after the BatchSandbox, and the compensation removes it whenever
	// the BatchSandbox was written (wroteCR).
	wroteIngress, wrotePolicy, wroteCR bool

	// ingress and policy are the objects as read back at their creation
	// (policy: after the owner back-fill, once that ran); the back-fill
	// writes over them (at their resourceVersion) instead of reading them
	// again.
	ingress *networkingv1.Ingress
	policy  *networkingv1.NetworkPolicy
}

// createIngress creates the managed Ingress through the ingress engine,
// which reads it back and checks it.
func (c *creation) createIngress(ctx context.Context, prov *sandbox.Sandbox) error {
	ing, written, err := c.o.Ingress.CreateCarrier(ctx, prov, c.ingressSet)
	c.wroteIngress = c.wroteIngress || written
	if err != nil {
		return err
	}
	c.ingress = ing
	return nil
}

// createPolicy creates the verified egress policy through the egress
// engine, which reads it back and checks it.
func (c *creation) createPolicy(ctx context.Context, prov *sandbox.Sandbox, set []string) error {
	np, written, err := c.o.Egress.CreateVerified(ctx, prov, set)
	c.wrotePolicy = c.wrotePolicy || written
	if err != nil {
		return err
	}
	c.policy = np
	return nil
}

func (c *creation) createBatchSandbox(ctx context.Context, req CreateRequest) (*sandbox.Sandbox, error) {
	pod, err := c.o.podSpec(req)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"replicas": int64(1),
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{c.o.Cluster.AllocationLabelKey(): c.alloc}},
				"spec":     pod,
			},
		},
	}}
	u.SetGroupVersionKind(sandbox.GVK)
	u.SetNamespace(c.ns)
	u.SetName(c.id)
	u.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: c.o.Cluster.ID})
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ann := map[string]string{v1alpha1.AnnotationLifecycle: StateCreating, AnnotationTemplateID: req.TemplateID,
		v1alpha1.AnnotationEndAt: formatEndAt(c.o.now().Add(timeout))}
	if len(req.Metadata) > 0 {
		b, err := json.Marshal(req.Metadata)
		if err != nil {
			return nil, fmt.Errorf("encode the metadata: %w", err)
		}
		ann[v1alpha1.AnnotationMetadata] = string(b)
	}
	u.SetAnnotations(ann)
	(&sandbox.Sandbox{Owner: req.CredentialID}).MarkOwner(u)
	if err := c.o.Client.Create(ctx, u); err != nil {
		return nil, fmt.Errorf("create BatchSandbox %s/%s: %w", c.ns, c.id, err)
	}
	c.wroteCR = true
	// The create's answer is the object as stored (after admission): it
	// carries the UID the owner references need.
	sb, err := sandbox.From(u, c.o.Cluster.AllocationLabelKey())
	if err != nil {
		return nil, fmt.Errorf("BatchSandbox as created: %w", err)
	}
	if sb.AllocationID != c.alloc {
		return nil, fmt.Errorf("BatchSandbox %s/%s read back with allocation %q", c.ns, c.id, sb.AllocationID)
	}
	return sb, nil
}

// AnnotationTemplateID records the E2B template ID on the BatchSandbox.
const AnnotationTemplateID = "network.sandgate.io/template-id"

// backfillOwners makes the BatchSandbox the owner of the managed Ingress
// and the NetworkPolicy (each engine's AdoptOwner: written over the object
// as read back at its creation, read back and checked) and checks the
// egress policy's readiness. The two objects are independent, so their
// back-fills run concurrently; both run to the end, and the first error
// is returned. (Interleaved A/B runs of BenchmarkCreate: the owners step
// 22–25 ms this way, 29–31 ms with the egress check after the back-fills,
// 32 ms with all three in turn.)
//
// The egress readiness check (selector against the pods, conflicting
// policies) reads the policy as read back at its creation: the back-fill
// changes only owner fields, which the check does not look at, so it runs
// beside the back-fills, and egress's AdoptOwner checks that the policy
// read back after the back-fill still carries the checked spec and
// verification annotations.
func (c *creation) backfillOwners(ctx context.Context, sb *sandbox.Sandbox) error {
	var g errgroup.Group
	if len(c.ingressSet) > 0 {
		g.Go(func() error { return c.o.Ingress.AdoptOwner(ctx, sb, c.ingress, c.ingressSet) })
	}
	checked := c.policy
	g.Go(func() error {
		np, err := c.o.Egress.AdoptOwner(ctx, sb, checked)
		if err != nil {
			return err
		}
		c.policy = np
		return nil
	})
	g.Go(func() error {
		st, err := c.o.Egress.StatusOf(ctx, sb, checked)
		if err != nil {
			return fmt.Errorf("verify the egress policy: %w", err)
		}
		if !st.NetworkReady {
			return fmt.Errorf("egress policy not ready: %s", st.NotReadyReason)
		}
		return nil
	})
	return g.Wait()
}

// persistDesired writes the ingress desired state and settles its first
// cycle (the ingress engine's Settle). A PUT /network/ingress made since
// the BatchSandbox appeared is the later writer and its rules stand;
// either way the allowlist is this sandbox's, so a failed create removes
// it (the compensation removes it whenever the BatchSandbox was written).
func (c *creation) persistDesired(ctx context.Context, sb *sandbox.Sandbox, rules []v1alpha1.IngressRule) error {
	return c.o.Ingress.Settle(ctx, sb, rules)
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

// compensate undoes a failed create in the fail-closed order and records
// the steps in ce.Cleanup. It returns true when the Ingress deletion could
// not be confirmed (then nothing else is touched: the orphan scan
// converges the rest).
func (c *creation) compensate(ctx context.Context, ce *CreateError) (ingressPending bool) {
	ctx = context.WithoutCancel(ctx)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	o := c.o
	rec := func(s Step, err error) bool {
		if err != nil {
			ce.Cleanup = append(ce.Cleanup, string(s)+":unconfirmed")
			ce.Reason += fmt.Sprintf("; cleanup %s: %s", s, err.Error())
			return false
		}
		ce.Cleanup = append(ce.Cleanup, string(s))
		return true
	}
	// The compensation is the sandbox's deletion: as Delete does, the CR
	// is marked Deleting first, so from here on a PUT /network/ingress or
	// /network is refused (409, spec §5.3) instead of writing state that
	// nothing will apply, an ingress cycle (in any replica) writes no
	// carrier, and GET shows Deleting, not Creating. A failed mark only
	// loses that fence; the removal goes on. A CR already gone (a DELETE
	// during the create) needs no mark.
	if c.wroteCR {
		if err := o.setLifecycle(ctx, c.ns, c.id, StateDeleting); err != nil && !apierrors.IsNotFound(err) {
			ce.Reason += "; cleanup: " + err.Error()
		}
	}
	// No ingress cycle may run between removing the carrier and removing
	// the desired state it would be rewritten from.
	defer o.Ingress.Lock(c.ns, c.id)()
	step := func(s Step, f func() error) error {
		return o.timed(metrics.OperationCompensate, s, func() error {
			if err := o.fault(c.id, s); err != nil {
				return err
			}
			return f()
		})
	}
	// Once the BatchSandbox exists, a PUT /network/ingress may have written
	// a carrier and an allowlist for this sandbox (it is allowed while
	// Creating, spec §5.3), even when this create wrote neither (an
	// unrestricted create, or one that failed before its desired step);
	// an allowlist of that name owned by an earlier BatchSandbox is a
	// leftover now that this one holds the name. So from then on both are
	// removed whatever this create wrote itself, the carrier first.
	if c.wroteIngress || c.wroteCR {
		err := step(StepDeleteIngress, func() error { return o.deleteIngress(ctx, c.ns, c.id) })
		if !rec(StepDeleteIngress, err) {
			if c.wroteCR {
				_ = o.setLifecycle(ctx, c.ns, c.id, StateCleanupFailed)
			}
			return true
		}
	}
	if c.wroteCR {
		rec(StepDeleteDesired, step(StepDeleteDesired, func() error {
			return deleteConfirm(ctx, o.Client, &v1alpha1.SandboxIngressAllowlist{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: c.id}})
		}))
	}
	if c.wroteCR {
		rec(StepDeleteBatchSandbox, step(StepDeleteBatchSandbox, func() error {
			return deleteConfirm(ctx, o.Client, batchSandboxRef(c.ns, c.id))
		}))
	}
	if c.wrotePolicy {
		rec(StepDeletePolicy, step(StepDeletePolicy, func() error {
			return deleteConfirm(ctx, o.Client, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: egress.PolicyName(c.alloc)}})
		}))
	}
	return false
}

func batchSandboxRef(ns, id string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	u.SetNamespace(ns)
	u.SetName(id)
	return u
}

// deleteConfirm deletes obj (absent is fine) and reads it back to confirm
// it is gone.
func deleteConfirm(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("confirm deletion of %s: %w", client.ObjectKeyFromObject(obj), err)
	default:
		return fmt.Errorf("%s still exists after deletion", client.ObjectKeyFromObject(obj))
	}
}

// deleteIngress deletes the managed Ingress of sandbox ns/id and confirms
// it is gone. An Ingress of that name that is not corectl's (identity
// labels differ) is never touched: ours is not there.
func (o *Orchestrator) deleteIngress(ctx context.Context, ns, id string) error {
	key := client.ObjectKey{Namespace: o.Cluster.Ingress.Namespace, Name: ingressallow.IngressName(id)}
	cur := &networkingv1.Ingress{}
	if err := o.Client.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read Ingress %s: %w", key, err)
	}
	l := cur.Labels
	if l[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue || l[v1alpha1.LabelSandboxID] != id ||
		l[v1alpha1.LabelSandboxNamespace] != ns || l[v1alpha1.LabelClusterID] != o.Cluster.ID {
		return nil
	}
	return deleteConfirm(ctx, o.Client, cur)
}

// onForbidden handles a 403 from the fixed entry during readiness (spec
// §5.2.2 IV): the probe source may have moved (NAT pool drift), so the
// cache is dropped, the sources rediscovered, and the carrier rewritten
// with them and verified by the ingress engine (RewriteProbeSources): with
// the user set the allowlist was last verified with, which is a PUT's
// when one was made since the BatchSandbox appeared, not necessarily this
// create's; dropping any annotation a carrier may not carry, as every
// cycle's write does; under the sandbox's lock. An unrestricted create
// (no carrier of its own) does the same when a PUT made the sandbox
// restricted meanwhile (its allowlist exists: one read, on a 403 only).
// Without discovery, or unrestricted without an allowlist, it does
// nothing.
func (c *creation) onForbidden(ctx context.Context) error {
	if c.o.Probe == nil {
		return nil
	}
	if len(c.ingressSet) == 0 {
		err := c.o.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: c.id}, &v1alpha1.SandboxIngressAllowlist{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read SandboxIngressAllowlist %s/%s: %w", c.ns, c.id, err)
		}
	}
	c.o.Probe.Invalidate()
	p, err := c.o.Probe.Sources(ctx)
	if err != nil {
		return fmt.Errorf("rediscover the probe source: %w", err)
	}
	return c.o.Ingress.RewriteProbeSources(ctx, c.ns, c.id, p)
}

// FirstReadyInterval is the first pause between readiness attempts; the
// pauses double from it up to Orchestrator.ReadyInterval.
const FirstReadyInterval = 10 * time.Millisecond

// readyBudget is ReadyBudget or its default, 60 s.
func (o *Orchestrator) readyBudget() time.Duration {
	if o.ReadyBudget > 0 {
		return o.ReadyBudget
	}
	return 60 * time.Second
}

// readiness polls GET <fixedEntry>/<id>/44772/ping until it answers 200 or
// the budget is spent (spec §4.2), pausing FirstReadyInterval after the
// first attempt and twice as long after each next one, up to
// ReadyInterval.
func (o *Orchestrator) readiness(ctx context.Context, id string, onForbidden func(context.Context) error) error {
	budget := o.readyBudget()
	maxInterval := o.ReadyInterval
	if maxInterval <= 0 {
		maxInterval = 200 * time.Millisecond
	}
	interval := min(FirstReadyInterval, maxInterval)
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	url := strings.TrimRight(o.Cluster.FixedEntry, "/") + fmt.Sprintf("/%s/%d/ping", id, ExecdPort)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if h := o.Cluster.Ingress.Host; h != "" {
			req.Host = h // the managed Ingress rules match this host
		}
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d", resp.StatusCode)
			if resp.StatusCode == http.StatusForbidden && onForbidden != nil {
				if err := onForbidden(ctx); err != nil {
					last += "; " + err.Error()
				}
			}
		} else {
			last = err.Error()
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("GET /%s/%d/ping through the fixed entry did not answer 200 within %s (last: %s)", id, ExecdPort, budget, last)
		case <-t.C:
		}
		interval = min(2*interval, maxInterval)
	}
}

// Info is what GET /sandboxes/{id} reports: E2B's SandboxDetail (the
// fields and types its OpenAPI document requires, which both SDKs'
// getInfo decode: infra spec/openapi.yml) and, beside them, sandgate's
// own lifecycle state, network views and the business-port projection
// (spec §3.1, §4.4, §5.3).
type Info struct {
	// TemplateID is the template it was created from ("" if unknown).
	TemplateID string `json:"templateID"`
	// SandboxID is the sandbox.
	SandboxID string `json:"sandboxID"`
	// ClientID is a constant for SDK compatibility (E2B: deprecated).
	ClientID string `json:"clientID"`
	// StartedAt is the BatchSandbox creation time (RFC 3339).
	StartedAt string `json:"startedAt"`
	// EndAt is when the sandbox expires (RFC 3339 with milliseconds; see
	// SetTimeout); a sandbox without a recorded end time reports its
	// start + MaxTimeout.
	EndAt string `json:"endAt"`
	// CPUCount, MemoryMB and DiskSizeMB are the sandbox container's
	// limits in its pod template (cluster.SizesOf); 0 when the object has
	// none (a BatchSandbox not created from a configured template).
	CPUCount   int32 `json:"cpuCount"`
	MemoryMB   int32 `json:"memoryMB"`
	DiskSizeMB int32 `json:"diskSizeMB"`
	// EnvdVersion is the envd version reported to the SDKs.
	EnvdVersion string `json:"envdVersion"`
	// Metadata is the create's metadata (never null).
	Metadata map[string]string `json:"metadata"`
	// State is E2B's SandboxState: always "running" (OpenSandbox sandboxes
	// are never paused); LifecycleState tells the rest.
	State string `json:"state"`
	// Lifecycle is E2B's SandboxLifecycle: never auto-resumed, killed on
	// timeout.
	Lifecycle E2BLifecycle `json:"lifecycle"`
	// Domain is always null: the data plane is the fixed sandboxUrl.
	Domain *string `json:"domain"`

	// LifecycleState is one of the State* constants (spec §5.3).
	LifecycleState string `json:"lifecycleState"`
	// Egress is the egress GET view (absent when it cannot be read).
	Egress *egress.Status `json:"egress,omitempty"`
	// Ingress is the ingress GET view (absent for an unrestricted sandbox).
	Ingress *ingressallow.Status `json:"ingress,omitempty"`
	// Endpoints is the business-port projection through the fixed entry.
	Endpoints Endpoints `json:"endpoints"`

	start time.Time
}

// E2BLifecycle is E2B's SandboxLifecycle object.
type E2BLifecycle struct {
	// AutoResume is always false.
	AutoResume bool `json:"autoResume"`
	// OnTimeout is always "kill": the expiry reconciler deletes.
	OnTimeout string `json:"onTimeout"`
}

// timeMillis is RFC 3339 with milliseconds, the form of E2B's endAt.
const timeMillis = "2006-01-02T15:04:05.000Z07:00"

// Endpoints is the business-port entry projection (spec §4.4 "Generic
// E2B endpoint projection"): requests go to BaseURL + URITemplate with
// {sandboxID}, {port} and {upstreamPath} filled in, straight to the
// cluster's fixed entry (not through the gateway).
type Endpoints struct {
	// BaseURL is the cluster's fixed entry, e.g. "http://10.0.0.1:80".
	BaseURL string `json:"baseURL"`
	// URITemplate is "/{sandboxID}/{port}/{upstreamPath}" (literal).
	URITemplate string `json:"uriTemplate"`
	// NoVNC is this sandbox's port 6080 through the fixed entry.
	NoVNC string `json:"noVNC"`
	// CDP is this sandbox's port 9222 through the fixed entry.
	CDP string `json:"cdp"`
}

// URITemplate is Endpoints.URITemplate (spec §4.4).
const URITemplate = "/{sandboxID}/{port}/{upstreamPath}"

// describe fills what a BatchSandbox itself says (no network reads): the
// E2B fields and the endpoints.
func (o *Orchestrator) describe(u *unstructured.Unstructured) *Info {
	id := u.GetName()
	start := u.GetCreationTimestamp().Time
	end, ok := EndAt(u)
	if !ok {
		end = start.Add(o.maxTimeout())
	}
	sz := o.SizesOf(u)
	base := strings.TrimRight(o.Cluster.FixedEntry, "/")
	return &Info{SandboxID: id, TemplateID: u.GetAnnotations()[AnnotationTemplateID], ClientID: "sandgate",
		StartedAt: start.UTC().Format(time.RFC3339), EndAt: end.UTC().Format(timeMillis),
		CPUCount: sz.CPUCount, MemoryMB: sz.MemoryMB, DiskSizeMB: sz.DiskSizeMB,
		EnvdVersion: o.EnvdVer(), Metadata: Metadata(u), State: "running",
		Lifecycle: E2BLifecycle{AutoResume: false, OnTimeout: "kill"},
		Endpoints: Endpoints{BaseURL: base, URITemplate: URITemplate,
			NoVNC: base + "/" + id + "/6080/", CDP: base + "/" + id + "/9222/"},
		start: start}
}

// Status reads sandbox ns/id and derives its lifecycle state. A sandbox
// whose end time has passed is gone for Status (the expiry reconciler is
// deleting it). Errors: ErrNotFound, ErrUnavailable.
func (o *Orchestrator) Status(ctx context.Context, ns, id string) (*Info, error) {
	u, err := o.readLive(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	info := o.describe(u)
	info.LifecycleState = o.derive(ctx, u, info)
	return info, nil
}

// readLive reads the BatchSandbox of sandbox ns/id (uncached) for a
// lifecycle route: absent, an invalid ID, or an end time that has passed
// is ErrNotFound; a read failure ErrUnavailable.
func (o *Orchestrator) readLive(ctx context.Context, ns, id string) (*unstructured.Unstructured, error) {
	if sandbox.ValidateID(id) != nil {
		return nil, ErrNotFound
	}
	u := batchSandboxRef(ns, id)
	if err := o.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, ns, id)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
	}
	if o.expired(u) {
		return nil, fmt.Errorf("%w: %s/%s has expired", ErrNotFound, ns, id)
	}
	return u, nil
}

// derive computes the lifecycle state (spec §5.3) and fills the network
// views.
func (o *Orchestrator) derive(ctx context.Context, u *unstructured.Unstructured, info *Info) string {
	recorded := u.GetAnnotations()[v1alpha1.AnnotationLifecycle]
	switch {
	case u.GetDeletionTimestamp() != nil || recorded == StateDeleting:
		return StateDeleting
	case recorded == StateCleanupFailed:
		return StateCleanupFailed
	}
	ns, id := u.GetNamespace(), u.GetName()
	if st, err := o.Egress.Get(ctx, ns, id); err == nil {
		info.Egress = st
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := o.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, al); err == nil {
		if st, err := o.Ingress.Get(ctx, ns, id); err == nil {
			info.Ingress = st
		}
	}
	if recorded == StateCreating || recorded == "" {
		return StateCreating
	}
	ready, _, _ := unstructured.NestedInt64(u.Object, "status", "ready")
	var eps []string
	if v := u.GetAnnotations()[EndpointsAnnotation]; v != "" {
		_ = json.Unmarshal([]byte(v), &eps)
	}
	if ready < 1 || len(eps) == 0 {
		return StatePodUnavailable
	}
	for _, s := range []string{stateOfIngress(info.Ingress), stateOfEgress(info.Egress)} {
		if s != "" {
			return s
		}
	}
	return StateReady
}

// EndpointsAnnotation is the BatchSandbox annotation OpenSandbox's
// controller writes the pod IPs to, a JSON array (docs/wire-facts.md §X2.4).
const EndpointsAnnotation = "sandbox.opensandbox.io/endpoints"

func stateOfEgress(st *egress.Status) string {
	switch {
	case st == nil:
		return StateIndeterminate
	case st.NetworkReady:
		return ""
	case st.NotReadyReason == egress.ReasonPolicyConflict, st.VerificationState == egress.CodePolicyConflict:
		return StatePolicyConflict
	case st.VerificationState == v1alpha1.StateIndeterminate:
		return StateIndeterminate
	default:
		return StateUnverifiedSpec
	}
}

func stateOfIngress(st *ingressallow.Status) string {
	switch {
	case st == nil || st.Ready:
		return ""
	case st.VerificationState == v1alpha1.StateIndeterminate:
		return StateIndeterminate
	case st.VerificationState == v1alpha1.StateVerifying || st.VerificationState == v1alpha1.StatePending:
		return ""
	default:
		return StateUnverifiedSpec
	}
}

// Connect returns a new envd access token for sandbox ns/id when its
// state is Ready (spec §5.3: Creating, PodUnavailable, UnverifiedSpec,
// PolicyConflict, Indeterminate, Deleting and CleanupFailed are
// ErrConflict; a missing or expired sandbox ErrNotFound). A non-nil
// timeout extends the end time to now + timeout first, as E2B's connect
// does (never shortens; the caller checks it with CheckTimeout). Errors
// also: ErrMaxLifetime, ErrUnavailable.
func (o *Orchestrator) Connect(ctx context.Context, credentialID, ns, id string, timeout *time.Duration) (string, *Info, error) {
	info, err := o.Status(ctx, ns, id)
	if err != nil {
		return "", nil, err
	}
	if info.LifecycleState != StateReady {
		return "", info, fmt.Errorf("%w: sandbox %s is %s", ErrConflict, id, info.LifecycleState)
	}
	if timeout != nil {
		end, err := o.SetTimeout(ctx, ns, id, *timeout, ExtendEnd)
		if err != nil {
			return "", info, err
		}
		info.EndAt = end.UTC().Format(timeMillis)
	}
	tok, err := o.mint(credentialID, id, info.start)
	if err != nil {
		return "", info, err
	}
	return tok, info, nil
}

// DeleteError is a Delete whose Ingress revocation could not be
// confirmed: the sandbox is CleanupFailed and refuses access.
type DeleteError struct {
	// Reason says why.
	Reason string
}

// Error implements error.
func (e *DeleteError) Error() string { return CodeDeletePending + ": " + e.Reason }

// Delete deletes sandbox ns/id in the fail-closed order (spec §5.2): mark
// it Deleting (every network route and connect refuse it from then on),
// delete the managed Ingress and confirm it is gone (else CleanupFailed
// and a *DeleteError; the rule is never reopened), then the ingress
// desired state, the egress policy and the BatchSandbox, each confirmed.
// Once the sandbox is found, the delete no longer follows ctx's
// cancellation: a caller that goes away (the DELETE's client disconnects)
// does not leave it Deleting half-way, as the create's compensation does
// not; it is bounded by deleteTimeout instead.
// Errors: ErrNotFound, ErrUnavailable, *DeleteError.
func (o *Orchestrator) Delete(ctx context.Context, ns, id string) error {
	if sandbox.ValidateID(id) != nil {
		return ErrNotFound
	}
	u := batchSandboxRef(ns, id)
	if err := o.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: %s/%s", ErrNotFound, ns, id)
		}
		return fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	return o.deleteSandbox(ctx, u)
}

// deleteTimeout bounds a Delete once it has begun (the control API's own
// bound on a request, httpapi's requestContext).
const deleteTimeout = 60 * time.Second

func (o *Orchestrator) deleteSandbox(ctx context.Context, u *unstructured.Unstructured) error {
	ns, id := u.GetNamespace(), u.GetName()
	if u.GetDeletionTimestamp() == nil {
		if err := o.setLifecycle(ctx, ns, id, StateDeleting); err != nil {
			return fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
		}
	}
	// No ingress cycle may run between removing the carrier and removing
	// the desired state it would be rewritten from.
	unlock := o.Ingress.Lock(ns, id)
	err := o.timed(metrics.OperationDelete, StepDeleteIngress, func() error {
		if err := o.fault(id, StepDeleteIngress); err != nil {
			return err
		}
		return o.deleteIngress(ctx, ns, id)
	})
	if err != nil {
		unlock()
		_ = o.setLifecycle(ctx, ns, id, StateCleanupFailed)
		return &DeleteError{Reason: err.Error()}
	}
	var errs []error
	if err := o.timed(metrics.OperationDelete, StepDeleteDesired, func() error {
		return deleteConfirm(ctx, o.Client, &v1alpha1.SandboxIngressAllowlist{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: id}})
	}); err != nil {
		errs = append(errs, err)
	}
	unlock()
	labels, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
	if alloc := labels[o.Cluster.AllocationLabelKey()]; alloc != "" && sandbox.ValidateID(alloc) == nil {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: egress.PolicyName(alloc)}}
		if err := o.Client.Get(ctx, client.ObjectKeyFromObject(np), np); err == nil && np.Labels[v1alpha1.LabelSandboxID] == id &&
			np.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue {
			if err := o.timed(metrics.OperationDelete, StepDeletePolicy, func() error { return deleteConfirm(ctx, o.Client, np) }); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := o.timed(metrics.OperationDelete, StepDeleteBatchSandbox, func() error {
		return deleteConfirm(ctx, o.Client, batchSandboxRef(ns, id))
	}); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// The Ingress is gone; what is left is converged by the orphan
		// scan and ownerReference GC.
		return fmt.Errorf("%w: %s", ErrUnavailable, errors.Join(errs...).Error())
	}
	return nil
}
