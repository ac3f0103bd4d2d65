package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// portAccess is who a NetworkPolicy lets reach one port of a pod: public
// (a rule without from) or the peers of the rules naming it.
type portAccess struct {
	public bool
	peers  []networkingv1.NetworkPolicyPeer
}

// accessOf evaluates the policies for the pods of d: for each named
// container port (a rule names it or gives its number), who may connect. It fails the test on a selector that
// does not parse.
func accessOf(t *testing.T, policies []networkingv1.NetworkPolicy, d *appsv1.Deployment) map[string]*portAccess {
	t.Helper()
	podLabels := labels.Set(d.Spec.Template.Labels)
	out := map[string]*portAccess{}
	number := map[string]int32{}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			out[p.Name] = &portAccess{}
			number[p.Name] = p.ContainerPort
		}
	}
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		if !sel.Matches(podLabels) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for name, a := range out {
				opens := len(rule.Ports) == 0
				for _, p := range rule.Ports {
					// A rule names the port, or gives its number.
					if p.Port != nil && (p.Port.StrVal == name || p.Port.Type == intstr.Int && p.Port.IntVal == number[name]) {
						opens = true
					}
				}
				if !opens {
					continue
				}
				if len(rule.From) == 0 {
					a.public = true
				}
				a.peers = append(a.peers, rule.From...)
			}
		}
	}
	return out
}

// peerLabel reports whether peers has a pod selector matching exactly
// label=value (in this namespace when sameNamespace, else in any).
func peerLabel(peers []networkingv1.NetworkPolicyPeer, label, value string, sameNamespace bool) bool {
	for _, p := range peers {
		if p.PodSelector == nil || p.PodSelector.MatchLabels[label] != value || p.IPBlock != nil {
			continue
		}
		if sameNamespace == (p.NamespaceSelector == nil) {
			return true
		}
	}
	return false
}

// TestNetworkPolicies: in every Portal kustomization the namespace's pods
// refuse connections by default, and each port of the gateway and of
// corectl is opened to exactly its audience: the data plane, node connect,
// the E2B_DOMAIN listener and corectl's API to anyone; the internal node
// API to the gateway replicas and labelled clients (not corectl, which
// does not call it); the probe relay to corectl only; the metrics ports to
// Prometheus only. No port of a Deployment
// is left unreachable, and every port a policy names exists.
func TestNetworkPolicies(t *testing.T) {
	for _, dir := range portalKustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			var policies []networkingv1.NetworkPolicy
			for _, o := range r.objs {
				if o.GetKind() != "NetworkPolicy" {
					continue
				}
				var np networkingv1.NetworkPolicy
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
					t.Fatal(err)
				}
				if np.Namespace != "sandgate" {
					t.Errorf("NetworkPolicy %s is in namespace %q, want sandgate", np.Name, np.Namespace)
				}
				if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("NetworkPolicy %s: policyTypes %v, want [Ingress]", np.Name, np.Spec.PolicyTypes)
				}
				policies = append(policies, np)
			}
			deny := false
			for _, np := range policies {
				if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 && len(np.Spec.Ingress) == 0 {
					deny = true
				}
			}
			if !deny {
				t.Error("no default-deny NetworkPolicy selects every pod of the namespace")
			}

			want := map[string]map[string]string{
				"gateway": {"dataplane": "public", "node-connect": "public", "node-api": "internal", "probe-relay": "corectl",
					"health": "metrics", "e2b-domain": "public", "corectl-api": "public"},
				"corectl": {"api": "public", "probes": "metrics"},
			}
			named, numbered := map[string]bool{}, map[int32]bool{}
			for name, ports := range want {
				d := r.deployment(t, name)
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						named[p.Name] = true
						numbered[p.ContainerPort] = true
					}
				}
				for port, a := range accessOf(t, policies, d) {
					role, ok := ports[port]
					if !ok {
						t.Errorf("%s: port %s has no expected audience in this test", name, port)
						continue
					}
					switch role {
					case "public":
						if !a.public {
							t.Errorf("%s: port %s is not reachable from everywhere (%+v)", name, port, a.peers)
						}
					case "internal":
						if a.public || !peerLabel(a.peers, "app.kubernetes.io/name", "gateway", true) ||
							!peerLabel(a.peers, "sandgate.io/node-api-client", "true", false) || len(a.peers) != 2 {
							t.Errorf("%s: port %s admits %+v (public %v), want the gateway replicas and labelled node API clients", name, port, a.peers, a.public)
						}
					case "corectl":
						if a.public || len(a.peers) != 1 || !peerLabel(a.peers, "app.kubernetes.io/name", "corectl", true) {
							t.Errorf("%s: port %s admits %+v (public %v), want corectl only", name, port, a.peers, a.public)
						}
					case "metrics":
						if a.public || len(a.peers) != 1 || !peerLabel(a.peers, "app.kubernetes.io/name", "prometheus", false) {
							t.Errorf("%s: port %s admits %+v (public %v), want Prometheus only", name, port, a.peers, a.public)
						}
					}
				}
			}
			for _, np := range policies {
				for _, rule := range np.Spec.Ingress {
					for _, p := range rule.Ports {
						if p.Port == nil || (p.Port.Type == intstr.String && !named[p.Port.StrVal]) ||
							(p.Port.Type == intstr.Int && !numbered[p.Port.IntVal]) {
							t.Errorf("NetworkPolicy %s names port %v, which no container of the gateway or corectl has", np.Name, p.Port)
						}
					}
				}
			}
		})
	}
}
