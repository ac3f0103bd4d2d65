package kubestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/internal/kubeenv"
	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/kubestore"
)

var (
	env  *kubeenv.Env
	kube client.Client
	seq  atomic.Int64
	ctx  = context.Background()
)

func TestMain(m *testing.M) {
	crds, err := deploy.NodeCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	kubeenv.Main(m, crds, kubestore.Scheme(), func(e *kubeenv.Env) (err error) {
		env = e
		kube, err = client.New(e.Config, client.Options{Scheme: kubestore.Scheme()})
		return err
	})
}

// namespace creates a fresh namespace.
func namespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("nodestate-%d", seq.Add(1))
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// open opens a store on ns as the cluster admin (rc nil) or as rc.
func open(t *testing.T, ns string, rc *rest.Config, now func() time.Time) *kubestore.Store {
	t.Helper()
	if rc == nil {
		rc = env.Config
	}
	s, err := kubestore.Open(kubestore.Config{REST: rest.CopyConfig(rc), Namespace: ns, Now: now, SyncTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// resources are the gateway's resources in RBAC rules.
var resources = []string{"nodepools", "nodeenrolmenttokens", "enrollednodes", "nodeplacements"}

// limited returns a client configuration of a user that may read the
// gateway's resources in ns and do only the extra writes given
// (resource → verbs), through a Role and RoleBinding.
func limited(t *testing.T, ns string, writes map[string][]string) *rest.Config {
	t.Helper()
	user := fmt.Sprintf("limited-%d", seq.Add(1))
	rules := []rbacv1.PolicyRule{{APIGroups: []string{v1.Group}, Resources: resources, Verbs: []string{"get", "list", "watch"}}}
	for res, verbs := range writes {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{v1.Group}, Resources: []string{res}, Verbs: verbs})
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules}
	bind := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	for _, o := range []client.Object{role, bind} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	rc := rest.CopyConfig(env.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: user}
	return rc
}

// snapshot returns every object of the gateway's resources in ns (name,
// resourceVersion, spec and status), sorted: any write changes it.
func snapshot(t *testing.T, ns string) string {
	t.Helper()
	var out []string
	for _, l := range []client.ObjectList{&v1.NodePoolList{}, &v1.NodeEnrolmentTokenList{}, &v1.EnrolledNodeList{}, &v1.NodePlacementsList{}} {
		if err := kube.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var items struct {
			Items []struct {
				Metadata struct {
					Name            string `json:"name"`
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Spec   json.RawMessage `json:"spec"`
				Status json.RawMessage `json:"status"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &items); err != nil {
			t.Fatal(err)
		}
		for _, it := range items.Items {
			out = append(out, fmt.Sprintf("%T %s@%s %s %s", l, it.Metadata.Name, it.Metadata.ResourceVersion, it.Spec, it.Status))
		}
	}
	sort.Strings(out)
	b, _ := json.MarshalIndent(out, "", " ")
	return string(b)
}
