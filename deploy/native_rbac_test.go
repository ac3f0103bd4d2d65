package deploy

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// checkNativeBrowserRights asks the apiserver (SubjectAccessReview) what
// corectl's service account may do with Services and EndpointSlices after
// deploy/compute is applied: exactly what the Native Browser carrier needs
// (package corectl/browser: get, create, update and delete both; list
// EndpointSlices for the resync), nothing more.
func checkNativeBrowserRights(t *testing.T, cfg *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]bool{
		"services":       {"get": true, "create": true, "update": true, "delete": true},
		"endpointslices": {"get": true, "list": true, "create": true, "update": true, "delete": true},
	}
	group := map[string]string{"services": "", "endpointslices": "discovery.k8s.io"}
	for res, verbs := range want {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "system:serviceaccount:corectl-system:corectl",
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "sandbox-ingress", Verb: verb,
					Group: group[res], Resource: res},
			}}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != verbs[verb] {
				t.Errorf("corectl %s %s: allowed %v, want %v", verb, res, got.Status.Allowed, verbs[verb])
			}
		}
	}
}
