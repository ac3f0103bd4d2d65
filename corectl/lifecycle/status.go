package lifecycle

// GET and connect: the E2B view of a sandbox, its lifecycle state (spec
// §5.3) and the network views, and a new envd access token.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/sandbox"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
	// Domain is the cluster's E2B domain (cluster.Cluster.Domain); null
	// without one, so the SDK uses its own domain or sandboxUrl.
	Domain *string `json:"domain"`
	// TrafficTokenRequired: the sandbox was created with
	// network.allowPublicTraffic false (AnnotationTrafficToken); its
	// ports need its traffic access token. Not in E2B's SandboxDetail.
	TrafficTokenRequired bool `json:"-"`

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

// describe fills what a BatchSandbox itself says (no network reads): the
// E2B fields and the endpoints.
func (o *Orchestrator) describe(u client.Object) *Info {
	id := u.GetName()
	start := u.GetCreationTimestamp().Time
	end, ok := EndAt(u)
	if !ok {
		end = start.Add(o.maxTimeout())
	}
	sz := o.SizesOf(u)
	return &Info{SandboxID: id, TemplateID: u.GetAnnotations()[AnnotationTemplateID], ClientID: "sandgate",
		StartedAt: start.UTC().Format(time.RFC3339), EndAt: end.UTC().Format(timeMillis),
		CPUCount: sz.CPUCount, MemoryMB: sz.MemoryMB, DiskSizeMB: sz.DiskSizeMB,
		EnvdVersion: o.EnvdVer(), Metadata: Metadata(u), State: "running",
		Lifecycle: E2BLifecycle{AutoResume: false, OnTimeout: "kill"}, Domain: o.domain(),
		TrafficTokenRequired: u.GetAnnotations()[AnnotationTrafficToken] == TrafficTokenRequired,
		Endpoints:            o.endpoints(id),
		start:                start}
}

// Status reads sandbox ns/id and derives its lifecycle state. A sandbox
// whose end time has passed is gone for Status (the expiry reconciler is
// deleting it). read, when not nil, is BatchSandbox ns/id as the caller
// has read it whole from the apiserver within this call (the control
// API's ownership check), used instead of reading it again; nil: Status
// reads it. Errors: ErrNotFound, ErrUnavailable.
func (o *Orchestrator) Status(ctx context.Context, ns, id string, read *unstructured.Unstructured) (*Info, error) {
	u, err := o.readLive(ctx, ns, id, read)
	if err != nil {
		return nil, err
	}
	return o.statusOf(ctx, u), nil
}

// statusOf is Status of BatchSandbox u, as readLive returned it.
func (o *Orchestrator) statusOf(ctx context.Context, u *unstructured.Unstructured) *Info {
	info := o.describe(u)
	info.LifecycleState = o.derive(ctx, u, info)
	return info
}

// readLive returns the BatchSandbox of sandbox ns/id (uncached) for a
// lifecycle route (readOnce): absent, an invalid ID, or an end time that
// has passed is ErrNotFound; a read failure ErrUnavailable.
func (o *Orchestrator) readLive(ctx context.Context, ns, id string, read *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	u, err := o.readOnce(ctx, ns, id, read)
	if err != nil {
		return nil, err
	}
	if o.expired(u) {
		return nil, fmt.Errorf("%w: %s/%s has expired", ErrNotFound, ns, id)
	}
	return u, nil
}

// readOnce returns read when it is BatchSandbox ns/id (the caller's read
// of this call, whole and uncached), else reads it from the apiserver.
// Errors: ErrNotFound (absent, or an invalid ID), ErrUnavailable.
func (o *Orchestrator) readOnce(ctx context.Context, ns, id string, read *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if sandbox.ValidateID(id) != nil {
		return nil, ErrNotFound
	}
	if read != nil && read.GetNamespace() == ns && read.GetName() == id && read.GroupVersionKind() == sandbox.GVK {
		return read, nil
	}
	u := batchSandboxRef(ns, id)
	if err := o.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, ns, id)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
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
	// The views read the network objects live (a getInfo right after a
	// create or a PUT /network must show what it wrote, and Connect
	// refuses a sandbox whose views are not ready), but not the
	// BatchSandbox again: they take u, this call's read.
	if st, err := o.Egress.GetOf(ctx, u); err == nil {
		info.Egress = st
	}
	// An unrestricted sandbox has no SandboxIngressAllowlist and no
	// ingress view.
	if st, err := o.Ingress.GetOf(ctx, u); err == nil && st.NotReadyReason != ingressallow.ReasonNotConfigured {
		info.Ingress = st
	}
	if recorded == StateCreating || recorded == "" {
		return StateCreating
	}
	if !PodServing(u) {
		return StatePodUnavailable
	}
	for _, s := range []string{stateOfIngress(info.Ingress), stateOfEgress(info.Egress)} {
		if s != "" {
			return s
		}
	}
	return StateReady
}

// PodServing reports whether BatchSandbox u reports its pod serving, as
// OpenSandbox's ingress needs it to route there (docs/wire-facts.md
// §X2.4): status.ready at least 1 and an endpoints annotation with at
// least one address. Otherwise a created sandbox is PodUnavailable.
func PodServing(u client.Object) bool {
	v, _ := sandbox.Annotation(u, EndpointsAnnotation)
	return sandbox.Ready(u) >= 1 && endpointsListed(v)
}

// endpointsListed reports whether v is valid JSON and an array of at
// least one element: exactly when json.Unmarshal of v into a []string
// leaves it non-empty (an element of another type decodes as ""), without
// decoding it (the authorizer asks this per question).
func endpointsListed(v string) bool {
	if !json.Valid([]byte(v)) {
		return false
	}
	const space = " \t\r\n"
	rest, ok := strings.CutPrefix(strings.TrimLeft(v, space), "[")
	return ok && !strings.HasPrefix(strings.TrimLeft(rest, space), "]")
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
// does (never shortens; the caller checks it with CheckTimeout). read is
// as for Status. Errors also: ErrMaxLifetime, ErrUnavailable.
func (o *Orchestrator) Connect(ctx context.Context, credentialID, ns, id string, read *unstructured.Unstructured, timeout *time.Duration) (string, *Info, error) {
	u, err := o.readLive(ctx, ns, id, read)
	if err != nil {
		return "", nil, err
	}
	info := o.statusOf(ctx, u)
	if info.LifecycleState != StateReady {
		return "", info, fmt.Errorf("%w: sandbox %s is %s", ErrConflict, id, info.LifecycleState)
	}
	if timeout != nil {
		// SetTimeout's patch requires u's resourceVersion: a change
		// since u was read is a conflict, and SetTimeout reads again.
		end, err := o.SetTimeout(ctx, ns, id, u, *timeout, ExtendEnd)
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
