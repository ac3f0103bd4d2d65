package deploy

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/nsrights"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// checkNativeBrowserRights asks the apiserver (SubjectAccessReview) what
// corectl's service account may do with Services and EndpointSlices after
// deploy/compute is applied: nothing until the RoleBinding `corectl rbac`
// prints for the ingress namespace exists (package corectl/nsrights), then
// exactly what the Native Browser carrier needs there (package
// corectl/browser: get, create, update and delete both; list EndpointSlices
// for the resync), nothing more, and still nothing in another namespace.
func checkNativeBrowserRights(t *testing.T, cfg *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ingressNS = "sandbox-ingress"
	check(t, cs, "before the RoleBinding", ingressNS, nil)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ingressNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range nsrights.Bindings([]nsrights.Grant{{Namespace: ingressNS, Role: nsrights.IngressRole}}, nsrights.DefaultServiceAccount) {
		if _, err := cs.RbacV1().RoleBindings(ingressNS).Create(ctx, &b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]bool{
		"services":       {"get": true, "create": true, "update": true, "delete": true},
		"endpointslices": {"get": true, "list": true, "create": true, "update": true, "delete": true},
	}
	// The authorizer's RBAC cache takes the binding a moment later.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return allowed(t, cs, ingressNS, "create", "services"), nil
	}); err != nil {
		t.Fatalf("the RoleBinding in %s never took effect: %v", ingressNS, err)
	}
	check(t, cs, "with the RoleBinding", ingressNS, want)
	check(t, cs, "in another namespace", "default", nil)
}

// allowed asks whether corectl's service account may verb res in ns.
func allowed(t *testing.T, cs kubernetes.Interface, ns, verb, res string) bool {
	t.Helper()
	group := map[string]string{"services": "", "endpointslices": "discovery.k8s.io"}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:corectl-system:corectl",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb,
			Group: group[res], Resource: res},
	}}
	got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}

// check compares every verb on Services and EndpointSlices in ns with want
// (nil: nothing allowed).
func check(t *testing.T, cs kubernetes.Interface, when, ns string, want map[string]map[string]bool) {
	t.Helper()
	for _, res := range []string{"services", "endpointslices"} {
		verbs := want[res]
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			if got := allowed(t, cs, ns, verb, res); got != verbs[verb] {
				t.Errorf("%s: corectl %s %s in %s: allowed %v, want %v", when, verb, res, ns, got, verbs[verb])
			}
		}
	}
}
