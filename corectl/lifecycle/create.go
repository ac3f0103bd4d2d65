package lifecycle

// Create and its compensation: the steps of the package documentation, each
// object written through the engine that owns it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/gateway/token"
	"golang.org/x/sync/errgroup"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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

// CreateRequest is what Create needs.
type CreateRequest struct {
	// CredentialID binds the token (the caller's resource credential).
	CredentialID string
	// Namespace is the credential's project namespace.
	Namespace string
	// TemplateID is the E2B template as the request names it ("":
	// DefaultTemplateID).
	TemplateID string
	// Network is the request's network object as it came (nil, empty or
	// JSON null: not passed); Create decodes it and resolves it against
	// the template's network defaults (package createnet).
	Network json.RawMessage
	// AllowInternetAccess is E2B's allow_internet_access (nil: not
	// given); false carves 0.0.0.0/0 out of the egress allowlist
	// (createnet.ResolveCreate).
	AllowInternetAccess *bool
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
	// TemplateID is the template it was created from (the default
	// filled in).
	TemplateID string
	// SandboxID is the new sandbox.
	SandboxID string
	// AllocationID is its allocation identity.
	AllocationID string
	// Token is the envd access token. Never log it.
	Token string
	// TrafficToken is the traffic access token of a sandbox created with
	// network.allowPublicTraffic false; empty otherwise. Never log it.
	TrafficToken string
	// Domain is the cluster's E2B domain; nil without one.
	Domain *string
}

// AnnotationTrafficToken, TrafficTokenRequired on a BatchSandbox, records
// that it was created with network.allowPublicTraffic false: the gateway
// (through the authorizer's Locate answer) refuses its ports without its
// traffic access token.
const AnnotationTrafficToken = "network.sandgate.io/traffic-token"

// TrafficTokenRequired is AnnotationTrafficToken's value.
const TrafficTokenRequired = "required"

// trafficTokenRequired reports whether a create's network object sets
// allowPublicTraffic to false (E2B's private sandbox ports). An
// undecodable object is left to the network resolution, which refuses it.
func trafficTokenRequired(raw json.RawMessage) bool {
	n, err := createnet.Decode(raw)
	return err == nil && n != nil && n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic
}

// domain is the cluster's E2B domain as the answers carry it: nil
// without one.
func (o *Orchestrator) domain() *string {
	if o.Cluster.Domain == "" {
		return nil
	}
	d := o.Cluster.Domain
	return &d
}

// MintTraffic signs the traffic access token of info's sandbox for
// credentialID: audience "traffic", no port, expiring as the envd token
// does (tokenExpiry). The gateway verifies it with the same keys as
// X-Access-Token and refuses it there.
func (o *Orchestrator) MintTraffic(credentialID string, info *Info) (string, error) {
	return o.mintAudience(credentialID, info.SandboxID, info.start, token.AudienceTraffic)
}

// NewID returns a random sandbox or allocation ID: prefix + 20 lowercase
// hex digits (a DNS-1123 label and E2B's ^[a-z0-9]+$).
func NewID(prefix string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// DefaultTemplateID is the template of a create request without one
// (E2B's default template name).
const DefaultTemplateID = "base"

// Errors of a create request that Create refuses before writing anything.
var (
	// ErrTemplateInvalid: the template ID is not a valid template name
	// (it wraps template.ErrInvalidID, whose text says why).
	ErrTemplateInvalid = errors.New("lifecycle: invalid template ID")
)

// requestError is a refused create request: class (ErrTemplateInvalid,
// ErrTemplateNotFound, ErrUnavailable) with the text the client sees.
type requestError struct {
	class error
	text  string
}

func (e *requestError) Error() string        { return e.text }
func (e *requestError) Is(target error) bool { return target == e.class }

// resolve fills in req's template ID and resolves its network: the
// template ID must be valid and configured (Template), the template's
// network defaults are read from Templates (a template without stored
// defaults inherits nothing), and the network object is decoded and
// resolved against them (createnet.Decode, createnet.Resolve). Errors:
// ErrTemplateInvalid (its text template.ValidateID's), ErrTemplateNotFound
// (its text "template '<id>' not found"), ErrUnavailable (the template
// store could not be read; its text the store's error), *createnet.Error.
func (o *Orchestrator) resolve(ctx context.Context, req *CreateRequest) (*createnet.Initial, error) {
	if req.TemplateID == "" {
		req.TemplateID = DefaultTemplateID
	}
	if err := template.ValidateID(req.TemplateID); err != nil {
		return nil, &requestError{class: ErrTemplateInvalid, text: err.Error()}
	}
	if !o.HasTemplate(req.TemplateID) {
		return nil, &requestError{class: ErrTemplateNotFound, text: fmt.Sprintf("template '%s' not found", req.TemplateID)}
	}
	var tpl template.Network
	if o.Templates != nil {
		v, err := o.Templates.Get(ctx, req.TemplateID)
		switch {
		case err == nil:
			tpl = v.Network
		case errors.Is(err, template.ErrNotFound):
			// A template without network defaults: nothing to inherit.
		default:
			return nil, &requestError{class: ErrUnavailable, text: err.Error()}
		}
	}
	nreq, err := createnet.Decode(req.Network)
	if err != nil {
		return nil, err
	}
	return createnet.ResolveCreate(tpl, nreq, req.AllowInternetAccess)
}

// Create runs the create orchestration (see the package documentation).
// Before anything is written it resolves the template and the network
// (errors: ErrTemplateInvalid, ErrTemplateNotFound, ErrUnavailable,
// *createnet.Error, see resolve); after that the error is a *CreateError.
func (o *Orchestrator) Create(ctx context.Context, req CreateRequest) (*Created, error) {
	net, err := o.resolve(ctx, &req)
	if err != nil {
		return nil, err
	}
	id := req.SandboxID
	if id == "" {
		id = NewID("sb")
	}
	if err := sandbox.ValidateID(id); err != nil {
		return nil, &CreateError{Code: CodeCreateFailed, Step: StepCNIGate, Reason: err.Error()}
	}
	alloc := NewID("al")
	c := &creation{o: o, id: id, ns: req.Namespace, alloc: alloc, trafficToken: trafficTokenRequired(req.Network)}
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
	// The carrier and the policy are independent objects, and both exist
	// before the BatchSandbox (so no pod of the sandbox runs without
	// either): they are written side by side, each to its end, and the
	// create fails at the first in step order that failed (the
	// compensation removes whichever was written).
	var ingErr, polErr error
	var pre sync.WaitGroup
	if len(c.ingressSet) > 0 {
		pre.Go(func() { ingErr = step(StepIngress, func() error { return c.createIngress(ctx, prov) }) })
	}
	pre.Go(func() {
		polErr = step(StepPolicy, func() error { return c.createPolicy(ctx, prov, net.Egress, net.EgressExcept) })
	})
	pre.Wait()
	if ingErr != nil {
		return fail(StepIngress, CodeCreateFailed, ingErr)
	}
	if polErr != nil {
		return fail(StepPolicy, CodeCreateFailed, polErr)
	}
	var sb *sandbox.Sandbox
	if err := step(StepBatchSandbox, func() (err error) {
		sb, err = c.createBatchSandbox(ctx, req)
		return err
	}); err != nil {
		return fail(StepBatchSandbox, CodeCreateFailed, err)
	}
	// The egress readiness check (reads only) starts with the owners step
	// and runs on beside the desired step; its failure is the owners
	// step's. Every path below waits for it before it returns.
	var egressCheck errgroup.Group
	egressChecked := false
	waitEgress := func() error {
		if egressChecked {
			return nil
		}
		egressChecked = true
		return egressCheck.Wait()
	}
	failAfter := func(s Step, code string, err error) (*Created, error) {
		if eerr := waitEgress(); eerr != nil && s == StepDesired {
			err = fmt.Errorf("%w; and at step %s: %w", err, StepOwners, eerr)
		}
		return fail(s, code, err)
	}
	if err := step(StepOwners, func() error { return c.backfillOwners(ctx, sb, &egressCheck) }); err != nil {
		return failAfter(StepOwners, CodeCreateFailed, err)
	}
	if len(c.ingressSet) > 0 {
		if err := step(StepDesired, func() error { return c.persistDesired(ctx, sb, net.Ingress) }); err != nil {
			return failAfter(StepDesired, CodeCreateFailed, err)
		}
	}
	if err := waitEgress(); err != nil {
		return fail(StepOwners, CodeCreateFailed, err)
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
	created := &Created{TemplateID: req.TemplateID, SandboxID: id, AllocationID: alloc, Token: tok, Domain: o.domain()}
	if c.trafficToken {
		if created.TrafficToken, err = o.mintAudience(req.CredentialID, id, sb.Start, token.AudienceTraffic); err != nil {
			return fail(StepToken, CodeCreateFailed, err)
		}
	}
	return created, nil
}

// mint signs the envd access token for credential and sandbox id, which
// started at start; it expires at tokenExpiry(start).
func (o *Orchestrator) mint(credentialID, id string, start time.Time) (string, error) {
	return o.mintAudience(credentialID, id, start, "")
}

// mintAudience is mint for the envd token (audience "") or the traffic
// token (token.AudienceTraffic, no port).
func (o *Orchestrator) mintAudience(credentialID, id string, start time.Time, audience string) (string, error) {
	now := o.now()
	ttl := o.tokenExpiry(start).Sub(now)
	if ttl <= 0 {
		return "", fmt.Errorf("mint the envd access token: sandbox %s started more than %s ago", id, o.maxTimeout())
	}
	tgt := token.Target{CredentialID: credentialID, SandboxID: id, Port: EnvdPort}
	if audience != "" {
		tgt = token.Target{CredentialID: credentialID, SandboxID: id, Audience: audience}
	}
	t, err := o.Key.Mint(tgt, ttl, now)
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
	// trafficToken: allowPublicTraffic false; the sandbox is annotated
	// and gets a traffic access token.
	trafficToken bool

	// wroteIngress and wrotePolicy: this create wrote the carrier, the
	// policy. The desired state needs no flag of its own: it is written
	// after the BatchSandbox, and the compensation removes it whenever
	// the BatchSandbox was written (wroteCR).
	wroteIngress, wrotePolicy, wroteCR bool

	// ingress and policy are the objects as the apiserver answered their
	// creation (after the owner back-fill, once that ran: its answer); the
	// back-fill writes over them (at their resourceVersion) instead of
	// reading them again.
	ingress *networkingv1.Ingress
	policy  *networkingv1.NetworkPolicy

	// claims is the path-claim lists asked for when the carrier was
	// created, for the desired step's first cycle; policies the
	// namespace's NetworkPolicies asked for when the policy was created,
	// for the egress readiness check.
	claims   *ingressallow.Claims
	policies *egress.NamespacePolicies

	// uid is the BatchSandbox's UID once written (the owner references
	// the compensation releases from the policy).
	uid types.UID
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
	// The path-claim lists wait for the apiserver's watch cache; asked
	// now, that wait runs beside the BatchSandbox and the back-fill.
	c.claims = c.o.Ingress.StartClaims(ctx, prov.ID)
	return nil
}

// createPolicy creates the verified egress policy through the egress
// engine, which reads it back and checks it.
func (c *creation) createPolicy(ctx context.Context, prov *sandbox.Sandbox, set, except []string) error {
	// set and except are createnet's resolved (normalised, carved) egress
	// allowlist; as prefixes they parse again without loss.
	prefixes, err := cidr.NormalizePrefixes(set)
	if err != nil {
		return fmt.Errorf("the resolved egress set: %w", err)
	}
	excepted, err := cidr.NormalizePrefixes(except)
	if err != nil {
		return fmt.Errorf("the resolved egress carve-outs: %w", err)
	}
	np, written, err := c.o.Egress.CreateVerified(ctx, prov, egress.Allowlist{Allow: prefixes, Except: excepted})
	c.wrotePolicy = c.wrotePolicy || written
	if err != nil {
		return err
	}
	c.policy = np
	// The readiness check's list of the namespace's policies waits for
	// the apiserver's watch cache; asked now, that wait runs beside the
	// BatchSandbox and the back-fill.
	c.policies = c.o.Egress.StartPolicies(ctx, prov.Namespace)
	return nil
}

func (c *creation) createBatchSandbox(ctx context.Context, req CreateRequest) (*sandbox.Sandbox, error) {
	pod, err := c.o.podSpec(req, c.id)
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
	if c.trafficToken {
		ann[AnnotationTrafficToken] = TrafficTokenRequired
	}
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
	c.uid = u.GetUID()
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
// as returned at its creation, the update's answer checked) and starts
// the egress policy's readiness check in check. The two back-fills are
// independent, so they run concurrently; both run to the end, and the
// first error is returned.
//
// The egress readiness check (selector against the pods, conflicting
// policies: two lists served by the apiserver's watch cache, the
// policies' asked for at the policy's creation, see
// egress.Engine.CreatedStatus) reads the policy as returned at its creation:
// the back-fill changes only owner fields, which the check does not look
// at, so it runs beside the back-fills and on beside the desired step
// (Create waits for it before the readiness step), and egress's
// AdoptOwner checks that the policy after the back-fill still carries the
// checked spec and verification annotations. It only reads, so a
// failure of it found late has written nothing.
func (c *creation) backfillOwners(ctx context.Context, sb *sandbox.Sandbox, check *errgroup.Group) error {
	checked := c.policy
	check.Go(func() error {
		st, err := c.o.Egress.CreatedStatus(ctx, sb, checked, c.policies)
		if err != nil {
			return fmt.Errorf("verify the egress policy: %w", err)
		}
		if !st.NetworkReady {
			return fmt.Errorf("egress policy not ready: %s", st.NotReadyReason)
		}
		return nil
	})
	var g errgroup.Group
	if len(c.ingressSet) > 0 {
		g.Go(func() error {
			ing, err := c.o.Ingress.AdoptOwner(ctx, sb, c.ingress, c.ingressSet)
			if err != nil {
				return err
			}
			c.ingress = ing
			return nil
		})
	}
	g.Go(func() error {
		np, err := c.o.Egress.AdoptOwner(ctx, sb, checked)
		if err != nil {
			return err
		}
		c.policy = np
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
	if c.claims != nil && c.ingress != nil {
		// The lists serve the carrier as the back-fill left it.
		c.claims.Carrier = c.ingress.ResourceVersion
	}
	return c.o.Ingress.Settle(ctx, sb, rules, c.claims)
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
	// The BatchSandbox goes before the policy, and the policy only once
	// no pod it selects is left (spec §5.3): the owner reference the
	// owners step wrote is released first, so the garbage collector does
	// not take the policy with the BatchSandbox.
	bsGone := true
	if c.wroteCR {
		bsGone = rec(StepDeleteBatchSandbox, step(StepDeleteBatchSandbox, func() error {
			if c.wrotePolicy && c.uid != "" {
				if err := o.Egress.ReleaseOwner(ctx, c.ns, egress.PolicyName(c.alloc), c.uid); err != nil {
					return err
				}
			}
			return deleteConfirm(ctx, o.Client, batchSandboxRef(c.ns, c.id))
		}))
	}
	if c.wrotePolicy {
		rec(StepDeletePolicy, step(StepDeletePolicy, func() error {
			if !bsGone {
				return errors.New("kept: the BatchSandbox is not confirmed gone, its pods may run")
			}
			if c.wroteCR {
				if err := o.podsGone(ctx, c.ns, c.alloc, o.podGoneWait()); err != nil {
					return err
				}
			}
			return deleteConfirm(ctx, o.Client, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: egress.PolicyName(c.alloc)}})
		}))
	}
	return false
}
