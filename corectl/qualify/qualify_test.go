package qualify_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/qualify"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *kubetest.Env

func TestMain(m *testing.M) { kubetest.Main(m, &env) }

var ctx = context.Background()

const (
	allowed = "203.0.113.10:443"
	denied  = "198.51.100.20:443"
)

// dnsPod makes one pod the test cluster's DNS selectors select (kube-dns
// in kube-system), once.
func dnsPod(t *testing.T) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-qualify", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "dns", Image: "coredns:test"}}}}
	if err := env.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func suite(t *testing.T, p qualify.Prober) (*qualify.Suite, string) {
	t.Helper()
	dnsPod(t)
	ns := env.Namespace(t)
	return &qualify.Suite{Client: env.Client, Cluster: kubetest.Cluster("c-qualify", env.Namespace(t)), Namespace: ns,
		Allowed: allowed, Denied: denied, Prober: p}, ns
}

// nothingLeft checks that the run removed its policy and pods.
func nothingLeft(t *testing.T, ns string) {
	t.Helper()
	var nps networkingv1.NetworkPolicyList
	var pods corev1.PodList
	if err := env.Client.List(ctx, &nps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(nps.Items)+len(pods.Items) != 0 {
		t.Fatalf("left behind: %d policies, %d pods", len(nps.Items), len(pods.Items))
	}
}

// TestMatrixObjectsAgainstTheAPIServer runs the §5.3 matrix against the
// test apiserver (issue 30 item 10): every object half is written, read
// back and checked there; the packet halves need a kubelet and a CNI, so
// they are NotRun (conntrack and the CNI's observability Manual), and the
// report is no qualification.
func TestMatrixObjectsAgainstTheAPIServer(t *testing.T) {
	s, ns := suite(t, nil)
	rep, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{qualify.RowEgressEnforcement, qualify.RowDNS, qualify.RowCIDRAllPorts, qualify.RowUpdateAndDelete,
		qualify.RowFirstPacket, qualify.RowConntrack, qualify.RowHostNetwork, qualify.RowObservability}
	if len(rep.Rows) != len(want) {
		t.Fatalf("rows = %+v", rep.Rows)
	}
	for i, row := range rep.Rows {
		if row.ID != want[i] || row.Objects != qualify.Pass {
			t.Errorf("row %d = %+v, want %s with its objects passed", i, row, want[i])
		}
		wantPackets := qualify.NotRun
		if row.ID == qualify.RowConntrack || row.ID == qualify.RowObservability {
			wantPackets = qualify.Manual
		}
		if row.Packets != wantPackets {
			t.Errorf("row %s packets = %s (%s), want %s", row.ID, row.Packets, row.PacketsDetail, wantPackets)
		}
	}
	if rep.Qualified() {
		t.Fatal("a run without packets qualified the cluster")
	}
	if rep.Facts.Implementation == "" {
		t.Fatalf("facts = %+v", rep.Facts)
	}
	nothingLeft(t, ns)
}

// cni is a Prober that enforces the namespace's NetworkPolicies as a CNI
// would (additive allow rules over default deny for selected pods;
// hostNetwork pods exempt), reading them from the apiserver; ignore makes
// it a CNI that enforces nothing.
type cni struct{ ignore bool }

func (c cni) Reach(ctx context.Context, ns string, podLabels map[string]string, host bool, a qualify.Attempt) (bool, error) {
	if c.ignore || host {
		return true, nil
	}
	var nps networkingv1.NetworkPolicyList
	if err := env.Client.List(ctx, &nps, client.InNamespace(ns)); err != nil {
		return false, err
	}
	selected := false
	for _, np := range nps.Items {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		selected = true
		for _, r := range np.Spec.Egress {
			for _, peer := range r.To {
				switch {
				case a.Proto == "dns" && peer.PodSelector != nil && len(r.Ports) > 0:
					return true, nil
				case a.Proto == "tcp" && peer.IPBlock != nil:
					h, _, _ := net.SplitHostPort(a.Dest)
					if p, err := netip.ParsePrefix(peer.IPBlock.CIDR); err == nil && p.Contains(netip.MustParseAddr(h)) {
						return true, nil
					}
				}
			}
		}
	}
	return !selected, nil
}

// TestMatrixWithAPolicyAwareProber: with a prober that enforces the
// policies, every row passes but the two Manual halves, and the report
// qualifies the cluster listing them; with a CNI that enforces nothing,
// egress enforcement fails and there is no qualification.
func TestMatrixWithAPolicyAwareProber(t *testing.T) {
	s, ns := suite(t, cni{})
	rep, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Qualified() || len(rep.ManualChecks()) != 2 {
		t.Fatalf("enforcing CNI: qualified %v, manual %v, rows %+v", rep.Qualified(), rep.ManualChecks(), rep.Rows)
	}
	nothingLeft(t, ns)

	s, _ = suite(t, cni{ignore: true})
	rep, err = s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Qualified() || rep.Rows[0].Packets != qualify.Fail {
		t.Fatalf("CNI that enforces nothing: qualified %v, rows %+v", rep.Qualified(), rep.Rows)
	}
}
