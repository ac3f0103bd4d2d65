package v1alpha1

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/internal/kubeenv"
)

var kube client.Client

const ns = "sandgate"

func TestMain(m *testing.M) {
	crds, err := deploy.NodeCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = AddToScheme(scheme)
	kubeenv.Main(m, crds, scheme, func(env *kubeenv.Env) (err error) {
		if kube, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
			return err
		}
		return kube.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
}

var (
	ctx = context.Background()
	d7  = strings.Repeat("7a", 32)
	d8  = strings.Repeat("8b", 32)
	id  = "0a000000-0000-4000-8000-00000000000a"
)

// invalid asserts err is the apiserver's Invalid refusal naming msg.
func invalid(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: %v, want Invalid with %q", what, err, msg)
	}
}

func TestCRDsInstall(t *testing.T) {
	crds, err := deploy.NodeCRDs()
	if err != nil || len(crds) != 4 {
		t.Fatalf("%d CRDs, %v", len(crds), err)
	}
	for _, c := range crds {
		if c.Spec.Scope != "Namespaced" || len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != Version {
			t.Errorf("%s: scope %s, versions %+v", c.Name, c.Spec.Scope, c.Spec.Versions)
		}
	}
}

// TestNodePoolRules: the CEL rules keep a binding from changing or going
// away and the target bound, as package nodecore/pool does.
func TestNodePoolRules(t *testing.T) {
	p := &NodePool{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns}, Spec: NodePoolSpec{Target: 7,
		Generations: map[string]GenerationBinding{"7": {SpecificationDigest: d7, Release: "rel-7"}}}}
	create(t, p)
	for name, tc := range map[string]struct {
		change func(p *NodePool)
		msg    string
	}{
		"rebinding": {func(p *NodePool) {
			p.Spec.Generations["7"] = GenerationBinding{SpecificationDigest: d8, Release: "rel-7"}
		}, "specification digest never changes"},
		"other release": {func(p *NodePool) {
			p.Spec.Generations["7"] = GenerationBinding{SpecificationDigest: d7, Release: "rel-x"}
		}, "release never changes"},
		"release dropped": {func(p *NodePool) { p.Spec.Generations["7"] = GenerationBinding{SpecificationDigest: d7} }, "release never changes"},
		"binding removed": {func(p *NodePool) { p.Spec.Generations = nil; p.Spec.Target = 0 }, "never removed"},
		"unbound target":  {func(p *NodePool) { p.Spec.Target = 9 }, "must be bound"},
		"bad key":         {func(p *NodePool) { p.Spec.Generations["07"] = GenerationBinding{SpecificationDigest: d8} }, "positive decimal integer"},
		"bad digest": {func(p *NodePool) {
			p.Spec.Generations["8"] = GenerationBinding{SpecificationDigest: strings.ToUpper(d8)}
		}, "specificationDigest"},
		"negative serving": {func(p *NodePool) { p.Spec.Serving = -1 }, "serving"},
	} {
		c := p.DeepCopy()
		tc.change(c)
		invalid(t, name, kube.Update(ctx, c), tc.msg)
	}
	// Adding a binding and moving the deployment is accepted.
	p.Spec.Generations["8"] = GenerationBinding{SpecificationDigest: d8}
	p.Spec.Target, p.Spec.Serving = 8, 7
	p.Status.Configured = &ConfiguredDeployment{Target: 7}
	if err := kube.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	invalid(t, "bad name", kube.Create(ctx, &NodePool{ObjectMeta: metav1.ObjectMeta{Name: "gpu.1", Namespace: ns}}), "pool name")
}

// create creates obj, failing the test on an error, and deletes it when
// the test ends, so that a test run again (-count) starts from no object.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := kube.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kube.Delete(ctx, obj); err != nil {
			t.Errorf("deleting %s: %v", obj.GetName(), err)
		}
	})
}

func TestNodeEnrolmentTokenRules(t *testing.T) {
	tok := &NodeEnrolmentToken{ObjectMeta: metav1.ObjectMeta{Name: d7, Namespace: ns},
		Spec: NodeEnrolmentTokenSpec{Pool: "default", ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))}}
	create(t, tok)
	c := tok.DeepCopy()
	c.Spec.Pool = "gpu"
	invalid(t, "pool change", kube.Update(ctx, c), "never change")
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	tok.Status = NodeEnrolmentTokenStatus{UsedAt: &now, NodeID: id}
	if err := kube.Update(ctx, tok); err != nil {
		t.Fatal(err)
	}
	bad := &NodeEnrolmentToken{ObjectMeta: metav1.ObjectMeta{Name: "not-a-digest", Namespace: ns}, Spec: tok.Spec}
	invalid(t, "bad name", kube.Create(ctx, bad), "SHA-256")
}

func TestEnrolledNodeRules(t *testing.T) {
	n := &EnrolledNode{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns}, Spec: EnrolledNodeSpec{Enabled: true, Pool: "default",
		CredentialSHA256: d7, InstallationID: "11111111-2222-4333-8444-555555555555", Provider: "docker",
		BackendFingerprint: d8, DeploymentGeneration: 7, SpecificationDigest: d7, MaxActive: 4, MaxRetained: 2,
		EnrolledAt: metav1.NewTime(time.Now().Truncate(time.Second))}}
	create(t, n)
	c := n.DeepCopy()
	c.Spec.CredentialSHA256 = d8
	invalid(t, "credential change", kube.Update(ctx, c), "only spec.enabled")
	n.Spec.Enabled = false
	if err := kube.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	bad := n.DeepCopy()
	bad.ResourceVersion, bad.Name, bad.Spec.Provider = "", "0b000000-0000-4000-8000-00000000000b", "kvm"
	invalid(t, "bad provider", kube.Create(ctx, bad), "provider")
}

func TestNodePlacementsRules(t *testing.T) {
	p := &NodePlacements{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns}, Spec: NodePlacementsSpec{
		Placements: []PlacedAllocation{{Generation: 7, TenantID: "t", EnvironmentID: "e", AllocationID: "a"}}}}
	create(t, p)
	c := p.DeepCopy()
	c.Spec.Placements[0].AllocationID = "-a"
	invalid(t, "bad reference", kube.Update(ctx, c), "allocationID")
	invalid(t, "bad name", kube.Create(ctx, &NodePlacements{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}}), "node ID")
}
