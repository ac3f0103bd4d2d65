package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/browser"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/scanmeta"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// defaultOrphanGrace is Orchestrator.OrphanGrace's default.
const defaultOrphanGrace = 5 * time.Minute

// ScanReport is what one orphan scan did: the objects it deleted
// ("<kind> <namespace>/<name>"), and the failures it will retry.
type ScanReport struct {
	// Deleted lists the removed leftovers.
	Deleted []string
	// Failed lists leftovers whose deletion failed, with the reason.
	Failed []string
	// Kept lists leftover NetworkPolicies not deleted yet because a pod
	// they select still exists (or the pods could not be listed), with the
	// reason: a later scan removes them once the pods are gone.
	Kept []string
}

// Scan converges leftovers of this cluster (spec §4.1, §5.2, §5.2.2, §5.3),
// only objects carrying corectl's managed-by and this cluster's label:
//
//   - a managed Ingress whose BatchSandbox does not exist, or does exist
//     with lifecycle CleanupFailed (the sandbox's delete is then retried);
//   - a managed NetworkPolicy whose BatchSandbox never appeared (or is
//     gone), or that has no owner reference to the current BatchSandbox
//     and is not the policy of its current allocation (that one still
//     confines the sandbox's pods and is kept), once no pod its
//     podSelector selects exists (else it is listed in Kept);
//   - probe-echo Ingresses (label v1alpha1.LabelProbeEcho), once older
//     than the grace or past the lifetime they record
//     (probesource.EchoExpired), whichever comes first;
//   - a Native Browser carrier (package browser) whose BatchSandbox does
//     not exist: its sb-<id> Ingress, Service and EndpointSlice;
//   - CleanupFailed sandboxes: the delete orchestration is run again;
//   - sandboxes left Deleting once older than OrphanGrace: the delete that
//     marked them stopped before it finished (its corectl was killed or
//     cut off at shutdown), and nothing else takes a
//     Deleting sandbox (the expiry reconciler skips it), so the delete
//     orchestration is run again (spec §5.2: a sandbox whose delete did
//     not finish is left to retries and the orphan scan). Should that
//     delete still be running on another replica, both only delete, in
//     the same order, each step tolerating the other's;
//   - abandoned creates: a BatchSandbox still Creating once older than
//     OrphanGrace plus the readiness budget (ReadyBudget), longer than
//     any create runs, so the create that wrote it is gone (its corectl
//     was killed, or the request was cut off at shutdown): it is deleted
//     through the same fail-closed delete, which removes its carrier
//     first (spec §4.1: the resources of a failed create are converged,
//     the orphan scan being the safeguard; §3.1.1: a policy left by a
//     failed owner back-fill is converged by the orphan scan).
//
// Objects younger than OrphanGrace (default 5 min) are left alone, so a
// create or a probe-source discovery in flight (on this or another
// replica) is not undone.
func (o *Orchestrator) Scan(ctx context.Context) (*ScanReport, error) {
	rep := &ScanReport{}
	grace := o.OrphanGrace
	if grace <= 0 {
		grace = defaultOrphanGrace
	}
	age := func(obj client.Object) time.Duration { return o.now().Sub(obj.GetCreationTimestamp().Time) }
	old := func(obj client.Object) bool { return age(obj) >= grace }
	managed := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: o.Cluster.ID}
	note := func(kind string, obj client.Object, err error) {
		name := fmt.Sprintf("%s %s/%s", kind, obj.GetNamespace(), obj.GetName())
		if err != nil {
			rep.Failed = append(rep.Failed, name+": "+err.Error())
			return
		}
		rep.Deleted = append(rep.Deleted, name)
	}

	// CleanupFailed sandboxes and abandoned creates first: deleting them
	// removes their Ingress in the fail-closed order.
	// live holds the listed sandboxes that are neither being deleted nor
	// without an allocation: an Ingress or policy of one of them is kept
	// without a read of its own (the outcome that read would give). Every
	// deletion below is still decided on a read of its own.
	live := map[string]*sandbox.Sandbox{}
	err := o.scanSandboxes(ctx, managed, func(u *sandbox.Cached) {
		if alloc, err := sandbox.AllocationID(u, o.Cluster.AllocationLabelKey()); err == nil {
			// What the checks below read of the sandbox sandbox.From
			// would give, without the template labels (10,000 maps while
			// the scan runs).
			live[u.GetNamespace()+"/"+u.GetName()] = &sandbox.Sandbox{ID: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), AllocationID: alloc}
		}
		st, _ := sandbox.Annotation(u, v1alpha1.AnnotationLifecycle)
		switch st {
		case StateCleanupFailed:
			note("BatchSandbox", u, o.deleteSandbox(ctx, u, 0))
		case StateDeleting:
			if old(u) {
				note("BatchSandbox", u, o.deleteSandbox(ctx, u, 0))
			}
		case StateCreating:
			// A live create holds Creating for its steps and at most
			// the readiness budget; one that has not finished well
			// after that never will. Should it still be running, the
			// Deleting mark makes its last step (Ready only over
			// Creating) fail and compensate: never a 201 for it.
			if u.GetDeletionTimestamp() == nil && age(u) >= grace+o.readyBudget() {
				note("BatchSandbox", u, o.deleteSandbox(ctx, u, 0))
			}
		}
	})
	if err != nil {
		return rep, fmt.Errorf("%w: list BatchSandboxes: %s", ErrUnavailable, err.Error())
	}

	// The Ingresses' and NetworkPolicies' pages are their metadata only
	// (PartialObjectMetadataList, protobuf): every decision below reads
	// names, labels, annotations, owner references and the creation time,
	// and a policy's podSelector is read with the policy itself, whole,
	// only once it is about to be deleted. Still a consistent list from
	// the apiserver, not the informers' cache: a stale cache could make a
	// new sandbox's objects look orphaned.
	err = o.scanMetadata(ctx, "ingresses", "IngressList", o.Cluster.Ingress.Namespace, managed, func(ings []metav1.PartialObjectMetadata) {
		for i := range ings {
			ing := &ings[i]
			if _, echo := ing.Labels[v1alpha1.LabelProbeEcho]; echo {
				// A discovery uses its echo Ingress for at most the lifetime
				// it records: past that it is a dead discovery's leftover,
				// removed at once (the start-up scan included) rather than
				// after the grace.
				if old(ing) || probesource.EchoExpired(&networkingv1.Ingress{ObjectMeta: ing.ObjectMeta}, o.now()) {
					note("Ingress", ing, deleteConfirm(ctx, o.Client, ingressRef(ing)))
				}
				continue
			}
			if !old(ing) {
				continue
			}
			ns, id := ing.Labels[v1alpha1.LabelSandboxNamespace], ing.Labels[v1alpha1.LabelSandboxID]
			if _, ok := live[ns+"/"+id]; ok {
				continue
			}
			exists, err := o.crExists(ctx, ns, id)
			if err != nil {
				rep.Failed = append(rep.Failed, err.Error())
				continue
			}
			if !exists && ing.Labels[browser.LabelNative] == "true" {
				// A Native Browser carrier: its Service and EndpointSlice go
				// with it.
				note("Native Browser carrier", ing, browser.Remove(ctx, o.Client, o.Cluster, ns, id))
				continue
			}
			if !exists {
				note("Ingress", ing, deleteConfirm(ctx, o.Client, ingressRef(ing)))
			}
		}
	})
	if err != nil {
		return rep, fmt.Errorf("%w: list Ingresses: %s", ErrUnavailable, err.Error())
	}

	err = o.scanMetadata(ctx, "networkpolicies", "NetworkPolicyList", "", managed, func(nps []metav1.PartialObjectMetadata) {
		for i := range nps {
			np := &nps[i]
			if !old(np) {
				continue
			}
			ns, id := np.Namespace, np.Labels[v1alpha1.LabelSandboxID]
			if sb, ok := live[ns+"/"+id]; ok && (sb.HasOwnerReference(np.OwnerReferences) || np.Name == egress.PolicyName(sb.AllocationID)) {
				// Kept, as the read below would decide for this sandbox.
				continue
			}
			sb, err := sandbox.Get(ctx, o.Client, ns, id, o.Cluster.AllocationLabelKey())
			switch {
			case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrInvalidID):
				// The BatchSandbox never appeared (or is gone).
			case errors.Is(err, sandbox.ErrDeleting):
				continue // its delete removes the policy
			case err != nil && !errors.Is(err, sandbox.ErrNoAllocation):
				rep.Failed = append(rep.Failed, err.Error())
				continue
			case sb.HasOwnerReference(np.OwnerReferences):
				continue
			case err == nil && np.Name == egress.PolicyName(sb.AllocationID):
				// The live sandbox's current policy that lost its owner
				// reference still selects its pods: deleting it would leave
				// the sandbox's egress unrestricted. Keep it.
				continue
			}
			// A policy goes only after the pods it confines (spec §5.3):
			// one that still selects a pod is kept for a later scan. Its
			// podSelector is read with the whole policy, now.
			pol := &networkingv1.NetworkPolicy{}
			if err := o.Client.Get(ctx, client.ObjectKeyFromObject(np), pol); err != nil {
				if apierrors.IsNotFound(err) {
					// Gone since the list (another scan or delete took
					// it): reported as deleteConfirm reports a policy
					// already gone, as the scan did when it read the
					// podSelector from the list.
					note("NetworkPolicy", np, nil)
				} else {
					rep.Kept = append(rep.Kept, fmt.Sprintf("NetworkPolicy %s/%s: read the policy: %s", np.Namespace, np.Name, err.Error()))
				}
				continue
			}
			if n, err := o.podsSelected(ctx, pol); err != nil || n > 0 {
				if err == nil {
					err = fmt.Errorf("%w (%d)", errPodsRemain, n)
				}
				rep.Kept = append(rep.Kept, fmt.Sprintf("NetworkPolicy %s/%s: %s", np.Namespace, np.Name, err.Error()))
				continue
			}
			note("NetworkPolicy", np, deleteConfirm(ctx, o.Client, pol))
		}
	})
	if err != nil {
		return rep, fmt.Errorf("%w: list NetworkPolicies: %s", ErrUnavailable, err.Error())
	}
	return rep, nil
}

// scanPage is how many objects one list request of the scan returns: the
// scan holds one page at a time, not every managed object of the cluster
// (10,000 sandboxes are 30,000 objects, 300 list requests a scan). The
// Ingresses and NetworkPolicies of a page are whole objects, 500 a page
// were 9 MB of a 103 MB live heap while the scan ran at 10,000 sandboxes
// (hack/corectlload -heap-profile); BatchSandboxes are decoded into
// sandbox.Cached (pod template and managed fields skipped as the JSON is
// read; whole and unstructured, 500 a page were 24 MB).
const scanPage = 100

// scanSandboxes lists the BatchSandboxes labelled sel, scanPage a page,
// calling each with every one: through o.Metadata (scanmeta's
// SandboxPage: name, namespace, UID, creation and deletion time, the
// lifecycle annotation and the template's labels, the rest of the JSON
// skipped as it is read), or without it as a sandbox.CachedList of
// controller-runtime's client (the pod template's containers and limits,
// status.ready and the whole metadata decoded too). Either way a Cached
// holds the fields read here and by deleteSandbox, and lives only while
// its page is handled.
func (o *Orchestrator) scanSandboxes(ctx context.Context, sel client.MatchingLabels, each func(*sandbox.Cached)) error {
	if o.Metadata == nil {
		var bsl sandbox.CachedList
		return o.scanPages(ctx, &bsl, scanPage, func() {
			for _, u := range bsl.Items {
				each(u)
			}
			// The next page decodes into fresh objects: JSON decoded into
			// this page's would keep the keys of their maps.
			bsl.Items = nil
		}, sel)
	}
	opts := &metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set(sel)).String(), Limit: scanPage}
	var page scanmeta.SandboxPage
	for {
		if err := o.Metadata.SandboxPage(ctx, "", opts, &page); err != nil {
			return err
		}
		for i := range page.Items {
			each(&page.Items[i])
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}

// scanMetadata lists the metadata of resource (ingresses or
// networkpolicies, list kind listKind) in namespace ("": every namespace)
// labelled sel, scanPage objects a page, calling each with every page's
// items as scanmeta.Project gives them: through o.Metadata, or without it as
// a PartialObjectMetadataList of controller-runtime's client (client-go's
// metadata client, which asks for protobuf and decodes the metadata
// whole).
func (o *Orchestrator) scanMetadata(ctx context.Context, resource, listKind, namespace string, sel client.MatchingLabels, each func([]metav1.PartialObjectMetadata)) error {
	if o.Metadata == nil {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind(listKind))
		return o.scanPages(ctx, l, scanPage, func() { each(l.Items) }, client.InNamespace(namespace), sel)
	}
	opts := &metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set(sel)).String(), Limit: scanPage}
	for {
		items, cont, err := o.Metadata.Page(ctx, resource, namespace, opts)
		if err != nil {
			return err
		}
		each(items)
		if cont == "" {
			return nil
		}
		opts.Continue = cont
	}
}

// ingressRef is the Ingress m names, to delete it by name.
func ingressRef(m *metav1.PartialObjectMetadata) *networkingv1.Ingress {
	return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
}

// scanPages lists list's kind with opts, limit objects a page, calling
// each after every page (list then holds that page).
func (o *Orchestrator) scanPages(ctx context.Context, list client.ObjectList, limit int64, each func(), opts ...client.ListOption) error {
	cont := ""
	for {
		if err := o.Client.List(ctx, list, append(opts, client.Limit(limit), client.Continue(cont))...); err != nil {
			return err
		}
		each()
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// podsSelected counts the pods of np's namespace that np's podSelector
// selects (an unevaluable selector is an error: the policy is kept).
func (o *Orchestrator) podsSelected(ctx context.Context, np *networkingv1.NetworkPolicy) (int, error) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return 0, fmt.Errorf("podSelector: %w", err)
	}
	var pods corev1.PodList
	if err := o.Client.List(ctx, &pods, client.InNamespace(np.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, fmt.Errorf("list the pods the policy selects: %w", err)
	}
	return len(pods.Items), nil
}

func (o *Orchestrator) crExists(ctx context.Context, ns, id string) (bool, error) {
	if ns == "" || sandbox.ValidateID(id) != nil {
		return false, nil
	}
	u := batchSandboxRef(ns, id)
	err := o.Client.Get(ctx, client.ObjectKeyFromObject(u), u)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("read BatchSandbox %s/%s: %s", ns, id, err.Error())
	}
}
