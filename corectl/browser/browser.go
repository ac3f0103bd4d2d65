// Package browser is the Native Browser path of spec §4.4: GET
// /api/v1/sandbox/instances/<id>/endpoint?port=6080 binds a sandbox's
// browser pod to its own carrier behind the fixed entry and answers
// http://<fixed entry>/sandbox/<id>/vnc.html. The carrier, all three named
// sb-<id> in the cluster's ingress namespace (where the managed Ingresses
// live, so the fixed entry's ingress-nginx serves it):
//
//   - an Ingress with the Prefix path /sandbox/<id>/ on the fixed entry's
//     class and host, with the annotations noVNC needs from ingress-nginx
//     (long proxy timeouts for the WebSocket, no request or response
//     buffering; no rewrite, see ingressAnnotations);
//   - a Service without a selector, port 6080;
//   - an EndpointSlice (discovery.k8s.io/v1) for that Service with the
//     browser pod's IP and port 6080. An EndpointSlice rather than
//     core/v1 Endpoints: ingress-nginx reads EndpointSlices, and the
//     Endpoints API is deprecated since Kubernetes 1.33. Its
//     endpointslice.kubernetes.io/managed-by label names corectl, so the
//     cluster's EndpointSlice controller leaves it alone.
//
// The binder (Binder.Bind) reads the BatchSandbox and its pod, and checks
// again before it writes and before it answers that the BatchSandbox UID,
// its generation (the allocation generation: a changed spec is another
// allocation) and resourceVersion, and the Pod UID and IP are those it
// read: a sandbox deleted and created again under the same ID, or a pod
// replaced in between, never gets the old binding (each refusal is an
// Error with a Code). Every object records the binding it was written for
// (AnnotationBinding).
//
// Restricted sandboxes (those with an ingress allowlist) are refused
// (CodeRestricted): the sb-* carrier is not the sandbox's managed Ingress,
// so it would not carry the sandbox's whitelist-source-range, and keeping
// a copy in step with the ingress engine's read-back and last known good
// is not done; their ports are reached through the generic projection,
// where the allowlist holds.
//
// Nothing here authenticates the noVNC page or its WebSocket: the path's
// sandbox ID routes; the application (a VNC password) authenticates.
package browser

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Port is the browser pod's noVNC port, the only port of the Native path.
const Port = 6080

// Page is the noVNC page the answer points at.
const Page = "vnc.html"

// Labels and annotations of the carrier.
const (
	// LabelNative marks the three sb-* objects (value "true") beside
	// corectl's identity labels (sandbox.IdentityLabels).
	LabelNative = "network.sandgate.io/native-browser"
	// AnnotationBinding records the binding an object was written for:
	// "<BatchSandbox UID>/<generation>/<Pod UID>/<Pod IP>".
	AnnotationBinding = "network.sandgate.io/native-binding"
	// ManagedByEndpointSlice is the EndpointSlice's
	// endpointslice.kubernetes.io/managed-by value: not the cluster's
	// EndpointSlice controller's, so it never rewrites the slice.
	ManagedByEndpointSlice = "corectl.network.sandgate.io"
)

// ingress-nginx annotations of the sb-* Ingress, for noVNC's page and its
// long-lived WebSocket (ingress-nginx proxies WebSocket upgrades itself;
// its default 60 s read timeout would cut an idle VNC session). There is
// deliberately no rewrite-target or use-regex: ingress-nginx turns every
// path of the host into a case-insensitive regular expression as soon as
// one Ingress of that host uses either, which would change how the shared
// fixed entry matches every sandbox's managed Ingress and its allowlist.
// So the pod sees the path as sent, /sandbox/<id>/…, and the browser pod
// serves noVNC under that prefix.
var ingressAnnotations = map[string]string{
	"nginx.ingress.kubernetes.io/proxy-read-timeout":      "3600",
	"nginx.ingress.kubernetes.io/proxy-send-timeout":      "3600",
	"nginx.ingress.kubernetes.io/proxy-buffering":         "off",
	"nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
	"nginx.ingress.kubernetes.io/proxy-http-version":      "1.1",
}

// Refusal codes (Error.Code), each a stable error code of the route.
const (
	// CodeNotFound: no BatchSandbox, or one being deleted.
	CodeNotFound = "sandbox_not_found"
	// CodeRestricted: the sandbox has an ingress allowlist (see the
	// package doc).
	CodeRestricted = "native_restricted"
	// CodePodUnavailable: no running pod of the sandbox with an IP; any
	// existing binding was emptied.
	CodePodUnavailable = "native_pod_unavailable"
	// CodeSandboxReplaced: the BatchSandbox's UID is not the one read
	// (deleted and created again under the same ID).
	CodeSandboxReplaced = "native_sandbox_replaced"
	// CodeGenerationChanged: the BatchSandbox's generation is not the one
	// read (another allocation).
	CodeGenerationChanged = "native_generation_changed"
	// CodeSandboxChanged: the BatchSandbox's resourceVersion is not the
	// one read (written in between; asking again binds afresh).
	CodeSandboxChanged = "native_sandbox_changed"
	// CodePodReplaced: the pod's UID or IP is not the one read.
	CodePodReplaced = "native_pod_replaced"
	// CodeConflict: an sb-* object changed under the binder's write, or
	// is not corectl's.
	CodeConflict = "native_conflict"
	// CodeUnavailable: the apiserver could not answer.
	CodeUnavailable = "unavailable"
)

// Error is a refusal of Bind.
type Error struct {
	// Code is one of the Code* constants.
	Code string
	// Reason says what was seen, without secrets.
	Reason string
}

// Error returns "<code>: <reason>".
func (e *Error) Error() string { return e.Code + ": " + e.Reason }

func refuse(code, format string, a ...any) *Error {
	return &Error{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// CodeOf returns err's Code ("" when err is not an *Error).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Name is the name of the three carrier objects of sandbox id.
func Name(id string) string { return "sb-" + id }

// Path is the sb-* Ingress path of sandbox id (a Prefix path). It cannot
// shadow a managed Ingress's /<id>/: corectl's sandbox IDs are "sb" and
// 20 hex digits, never "sandbox".
func Path(id string) string { return "/sandbox/" + id + "/" }

// Binding is what Bind answers.
type Binding struct {
	// SandboxID is the sandbox.
	SandboxID string `json:"sandboxID"`
	// Port is Port.
	Port int `json:"port"`
	// URL is <fixed entry>/sandbox/<id>/vnc.html.
	URL string `json:"url"`
	// Host is the Host header the request must carry (the cluster's
	// ingress host), absent when any Host is routed; as in the generic
	// projection.
	Host string `json:"host,omitempty"`
}

// Binder binds sandboxes of one cluster to their Native Browser carrier.
type Binder struct {
	// Client reaches the cluster's apiserver, uncached: every check reads
	// what is stored now.
	Client client.Client
	// Cluster is the cluster's configuration.
	Cluster *cluster.Cluster
	// BeforeWrite, when set, runs after the first reads and before the
	// checks that precede the writes (tests replace the pod or the
	// sandbox there).
	BeforeWrite func(ctx context.Context, ns, id string)
	// BeforeAnswer, when set, runs after the writes and before the checks
	// that precede the answer.
	BeforeAnswer func(ctx context.Context, ns, id string)
}

// read is one reading of the sandbox and its pod.
type read struct {
	sb         *sandbox.Sandbox
	generation int64
	version    string
	pod        *corev1.Pod // nil: none running with an IP
}

// binding is the AnnotationBinding value of r.
func (r *read) binding() string {
	return string(r.sb.UID) + "/" + strconv.FormatInt(r.generation, 10) + "/" + string(r.pod.UID) + "/" + r.pod.Status.PodIP
}

// Bind binds sandbox ns/id (whose ownership the caller checked) to its
// browser pod and returns the Native URL. A sandbox without a running pod
// has its binding emptied and is refused CodePodUnavailable. Errors are
// *Error.
func (b *Binder) Bind(ctx context.Context, ns, id string) (*Binding, error) {
	first, err := b.read(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	switch err := b.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, al); {
	case err == nil:
		return nil, refuse(CodeRestricted, "sandbox %s has an ingress allowlist the Native carrier would not carry; use its generic projection", id)
	case !apierrors.IsNotFound(err):
		return nil, refuse(CodeUnavailable, "read the ingress allowlist: %s", err.Error())
	}
	if first.pod == nil {
		if err := b.unbind(ctx, ns, id); err != nil {
			return nil, err
		}
		return nil, refuse(CodePodUnavailable, "sandbox %s has no running pod with an IP", id)
	}
	if b.BeforeWrite != nil {
		b.BeforeWrite(ctx, ns, id)
	}
	if err := b.check(ctx, ns, id, first); err != nil {
		return nil, err
	}
	if err := b.write(ctx, first); err != nil {
		return nil, err
	}
	if b.BeforeAnswer != nil {
		b.BeforeAnswer(ctx, ns, id)
	}
	if err := b.check(ctx, ns, id, first); err != nil {
		return nil, err
	}
	eps := &discoveryv1.EndpointSlice{}
	if err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Cluster.Ingress.Namespace, Name: Name(id)}, eps); err != nil {
		return nil, refuse(CodeUnavailable, "read back the EndpointSlice: %s", err.Error())
	}
	if eps.Annotations[AnnotationBinding] != first.binding() {
		return nil, refuse(CodeConflict, "the EndpointSlice holds binding %q, not the one written", eps.Annotations[AnnotationBinding])
	}
	base := strings.TrimRight(b.Cluster.FixedEntry, "/")
	return &Binding{SandboxID: id, Port: Port, URL: base + "/sandbox/" + id + "/" + Page, Host: b.Cluster.Ingress.Host}, nil
}

// read reads the BatchSandbox ns/id and its running pod.
func (b *Binder) read(ctx context.Context, ns, id string) (*read, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	if err := b.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, refuse(CodeNotFound, "no BatchSandbox %s/%s", ns, id)
		}
		return nil, refuse(CodeUnavailable, "read BatchSandbox %s/%s: %s", ns, id, err.Error())
	}
	sb, err := sandbox.From(u, b.Cluster.AllocationLabelKey())
	switch {
	case errors.Is(err, sandbox.ErrDeleting):
		return nil, refuse(CodeNotFound, "BatchSandbox %s/%s is being deleted", ns, id)
	case errors.Is(err, sandbox.ErrNoAllocation):
		return nil, refuse(CodePodUnavailable, "%s", err.Error())
	case err != nil:
		return nil, refuse(CodeUnavailable, "%s", err.Error())
	}
	r := &read{sb: sb, generation: u.GetGeneration(), version: u.GetResourceVersion()}
	var pods corev1.PodList
	if err := b.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{sb.AllocationLabel: sb.AllocationID}); err != nil {
		return nil, refuse(CodeUnavailable, "list the sandbox's pods: %s", err.Error())
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && controlledBy(p, sb.UID) {
			if r.pod != nil {
				return nil, refuse(CodeConflict, "sandbox %s has more than one running pod", id)
			}
			r.pod = p
		}
	}
	return r, nil
}

func controlledBy(p *corev1.Pod, uid types.UID) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.UID == uid
}

// check reads the sandbox and its pod again and refuses when anything the
// binding rests on changed since first.
func (b *Binder) check(ctx context.Context, ns, id string, first *read) error {
	now, err := b.read(ctx, ns, id)
	if err != nil {
		return err
	}
	switch {
	case now.sb.UID != first.sb.UID:
		return refuse(CodeSandboxReplaced, "BatchSandbox %s/%s has UID %s, not %s", ns, id, now.sb.UID, first.sb.UID)
	case now.generation != first.generation:
		return refuse(CodeGenerationChanged, "BatchSandbox %s/%s is at generation %d, not %d", ns, id, now.generation, first.generation)
	case now.version != first.version:
		return refuse(CodeSandboxChanged, "BatchSandbox %s/%s is at resourceVersion %s, not %s", ns, id, now.version, first.version)
	case now.pod == nil:
		return refuse(CodePodReplaced, "the pod %s is gone", first.pod.Name)
	case now.pod.UID != first.pod.UID || now.pod.Status.PodIP != first.pod.Status.PodIP:
		return refuse(CodePodReplaced, "the sandbox's pod is %s (%s), not %s (%s)", now.pod.UID, now.pod.Status.PodIP, first.pod.UID, first.pod.Status.PodIP)
	}
	return nil
}

// objects returns the three carrier objects of r's binding, as written.
func (b *Binder) objects(r *read) (*networkingv1.Ingress, *corev1.Service, *discoveryv1.EndpointSlice) {
	c, sb := b.Cluster, r.sb
	name, ns := Name(sb.ID), c.Ingress.Namespace
	meta := func() metav1.ObjectMeta {
		labels := sb.IdentityLabels(c.ID)
		labels[LabelNative] = "true"
		m := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
			Annotations: map[string]string{v1alpha1.AnnotationOwner: sb.OwnerAnnotation(), AnnotationBinding: r.binding()}}
		if ns == sb.Namespace {
			m.OwnerReferences = []metav1.OwnerReference{sb.OwnerReference()}
		}
		return m
	}
	class := c.Ingress.ClassName
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: meta(), Spec: networkingv1.IngressSpec{
		IngressClassName: &class,
		Rules: []networkingv1.IngressRule{{Host: c.Ingress.Host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: Path(sb.ID), PathType: &pt, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: Port}}}}},
		}}}},
	}}
	for k, v := range ingressAnnotations {
		ing.Annotations[k] = v
	}
	svc := &corev1.Service{ObjectMeta: meta(), Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "novnc", Protocol: corev1.ProtocolTCP, Port: Port, TargetPort: intstr.FromInt32(Port)}},
	}}
	eps := &discoveryv1.EndpointSlice{ObjectMeta: meta(), AddressType: addressType(r.pod.Status.PodIP)}
	eps.Labels[discoveryv1.LabelServiceName] = name
	eps.Labels[discoveryv1.LabelManagedBy] = ManagedByEndpointSlice
	ready := true
	port, proto, pname := int32(Port), corev1.ProtocolTCP, "novnc"
	eps.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{r.pod.Status.PodIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: r.pod.Namespace, Name: r.pod.Name, UID: r.pod.UID}}}
	eps.Ports = []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}}
	return ing, svc, eps
}

func addressType(ip string) discoveryv1.AddressType {
	if strings.Contains(ip, ":") {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// write creates or updates the three objects: the EndpointSlice and the
// Service before the Ingress, so the Ingress never routes to an older
// binding's address. An existing object is overwritten only when it is
// corectl's carrier of this sandbox ID (identity labels) and only at the
// resourceVersion read (a concurrent write is CodeConflict).
func (b *Binder) write(ctx context.Context, r *read) error {
	ing, svc, eps := b.objects(r)
	for _, pair := range []struct{ want, cur client.Object }{
		{eps, &discoveryv1.EndpointSlice{}}, {svc, &corev1.Service{}}, {ing, &networkingv1.Ingress{}},
	} {
		if err := b.put(ctx, r.sb, pair.want, pair.cur); err != nil {
			return err
		}
	}
	return nil
}

// put creates want, or updates cur (read into) to want when it is
// corectl's carrier of sb and holds another binding or owner.
func (b *Binder) put(ctx context.Context, sb *sandbox.Sandbox, want, cur client.Object) error {
	err := b.Client.Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := b.Client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return refuse(CodeConflict, "%s appeared during the bind", want.GetName())
			}
			return refuse(CodeUnavailable, "create %s: %s", want.GetName(), err.Error())
		}
		return nil
	case err != nil:
		return refuse(CodeUnavailable, "read %s: %s", want.GetName(), err.Error())
	}
	if !isOurs(b.Cluster, sb, cur) {
		return refuse(CodeConflict, "%s %s/%s is not corectl's carrier of sandbox %s", kindOf(cur), cur.GetNamespace(), cur.GetName(), sb.ID)
	}
	if cur.GetAnnotations()[AnnotationBinding] == want.GetAnnotations()[AnnotationBinding] &&
		cur.GetAnnotations()[v1alpha1.AnnotationOwner] == want.GetAnnotations()[v1alpha1.AnnotationOwner] {
		return nil
	}
	want.SetResourceVersion(cur.GetResourceVersion())
	if svc, ok := want.(*corev1.Service); ok {
		old := cur.(*corev1.Service)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
	}
	if err := b.Client.Update(ctx, want); err != nil {
		if apierrors.IsConflict(err) {
			return refuse(CodeConflict, "%s changed during the bind", want.GetName())
		}
		return refuse(CodeUnavailable, "update %s: %s", want.GetName(), err.Error())
	}
	return nil
}

func kindOf(o client.Object) string {
	switch o.(type) {
	case *networkingv1.Ingress:
		return "Ingress"
	case *corev1.Service:
		return "Service"
	default:
		return "EndpointSlice"
	}
}

// isOurs reports whether obj carries corectl's identity labels for a
// sandbox with sb's namespace and ID in c and LabelNative (whatever
// BatchSandbox UID it was written for: one deleted and created again
// under the same ID is rebound).
func isOurs(c *cluster.Cluster, sb *sandbox.Sandbox, obj client.Object) bool {
	want := sb.IdentityLabels(c.ID)
	want[LabelNative] = "true"
	for k, v := range want {
		if obj.GetLabels()[k] != v {
			return false
		}
	}
	return true
}

// unbind empties the EndpointSlice of sandbox ns/id, if any, so its
// carrier routes nowhere while the sandbox has no pod.
func (b *Binder) unbind(ctx context.Context, ns, id string) error {
	eps := &discoveryv1.EndpointSlice{}
	err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Cluster.Ingress.Namespace, Name: Name(id)}, eps)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return refuse(CodeUnavailable, "read the EndpointSlice: %s", err.Error())
	case len(eps.Endpoints) == 0:
		return nil
	case eps.Labels[v1alpha1.LabelSandboxNamespace] != ns || eps.Labels[LabelNative] != "true":
		return refuse(CodeConflict, "EndpointSlice %s is not corectl's carrier of sandbox %s", eps.Name, id)
	}
	eps.Endpoints = nil
	eps.Annotations[AnnotationBinding] = ""
	if err := b.Client.Update(ctx, eps); err != nil {
		return refuse(CodeUnavailable, "empty the EndpointSlice: %s", err.Error())
	}
	return nil
}

// Remove deletes the carrier of sandbox ns/id in cluster c (the Ingress
// first, so nothing routes to a Service being removed) and confirms each
// object is gone; objects that are not corectl's carrier of that sandbox
// are left. It is a step of the sandbox's fail-closed delete.
func Remove(ctx context.Context, cl client.Client, c *cluster.Cluster, ns, id string) error {
	for _, obj := range []client.Object{&networkingv1.Ingress{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}} {
		err := cl.Get(ctx, client.ObjectKey{Namespace: c.Ingress.Namespace, Name: Name(id)}, obj)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("read %s %s: %w", kindOf(obj), Name(id), err)
		case obj.GetLabels()[v1alpha1.LabelSandboxNamespace] != ns || obj.GetLabels()[LabelNative] != "true":
			continue
		}
		if err := cl.Delete(ctx, obj, client.Preconditions{UID: ptr(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", kindOf(obj), Name(id), err)
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			if err == nil {
				return fmt.Errorf("%s %s still exists after its delete", kindOf(obj), Name(id))
			}
			return fmt.Errorf("confirm %s %s gone: %w", kindOf(obj), Name(id), err)
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
