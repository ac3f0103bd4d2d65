package deploy

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestUpgradeFromSharedInternalPort: a rolling upgrade from the release
// whose gateway served the internal node API and the fixed-entry probe
// relay together on one Caddy site at the pod's 30086 (container port
// node-api) keeps both reachable while old and new gateway pods run side
// by side (docs/runbook.md "Upgrade order"), as far as the manifests decide
// it:
//   - corectl dials the relay at the port of -probe-relay-url on each pod
//     (the Service gateway-probe-relay is headless): the new pods' port
//     probe-relay and the old pods' shared port are that port, and the
//     Service's target port resolves to it on both, so that its name
//     resolves to the old pods too;
//   - the NetworkPolicies as now applied admit corectl to that port on new
//     and old pods alike;
//   - the Service gateway-internal targets a port name both pod versions
//     have (node-api), and the policies admit the gateway replicas to it on
//     both, so a replica of either version forwards to the other at the
//     address it advertises; a new pod advertises its own node-api port.
func TestUpgradeFromSharedInternalPort(t *testing.T) {
	// The previous release's gateway container ports (deploy/portal at
	// bea2304): 30086 served sandbox_node_api and fixed_entry_probe.
	oldPorts := []corev1.ContainerPort{{Name: "dataplane", ContainerPort: 30083}, {Name: "node-connect", ContainerPort: 30085},
		{Name: "node-api", ContainerPort: 30086}, {Name: "health", ContainerPort: 9180}}
	const oldShared = 30086
	for _, dir := range portalKustomizations {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			var policies []networkingv1.NetworkPolicy
			for _, o := range r.objs {
				if o.GetKind() == "NetworkPolicy" {
					var np networkingv1.NetworkPolicy
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
						t.Fatal(err)
					}
					policies = append(policies, np)
				}
			}
			gw := r.deployment(t, "gateway")
			old := gw.DeepCopy()
			old.Spec.Template.Spec.Containers[0].Ports = oldPorts
			newPorts := map[string]int32{}
			for _, p := range gw.Spec.Template.Spec.Containers[0].Ports {
				newPorts[p.Name] = p.ContainerPort
			}

			// The relay's port as corectl dials it.
			var relayURL string
			for _, a := range r.deployment(t, "corectl").Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "-probe-relay-url="); ok {
					relayURL = v
				}
			}
			u, err := url.Parse(relayURL)
			if err != nil || u.Port() == "" {
				t.Fatalf("corectl -probe-relay-url %q: no port (%v)", relayURL, err)
			}
			relayPort, _ := strconv.Atoi(u.Port())
			if relayPort != oldShared || newPorts["probe-relay"] != int32(relayPort) {
				t.Errorf("corectl dials the relay at :%d; the new pods serve it at :%d, the old ones at :%d", relayPort, newPorts["probe-relay"], oldShared)
			}
			admitsCorectl := func(a *portAccess) bool {
				return a != nil && !a.public && peerLabel(a.peers, "app.kubernetes.io/name", "corectl", true)
			}
			if a := accessOf(t, policies, gw)["probe-relay"]; !admitsCorectl(a) {
				t.Errorf("the policies do not admit corectl to the new pods' probe-relay: %+v", a)
			}
			// The headless Service's endpoints, and so the addresses its
			// name resolves to, are the pods on which its target port
			// resolves (a named port a pod lacks leaves it out): the old
			// pods must stay in them, else corectl's relay has no address
			// until a new pod is ready.
			var relaySvc corev1.Service
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.find(t, "Service", "gateway-probe-relay").Object, &relaySvc); err != nil {
				t.Fatal(err)
			}
			for name, ports := range map[string][]corev1.ContainerPort{"new": gw.Spec.Template.Spec.Containers[0].Ports, "old": oldPorts} {
				if got, ok := resolvePort(relaySvc.Spec.Ports[0].TargetPort, ports); !ok || got != int32(relayPort) {
					t.Errorf("Service gateway-probe-relay's target port %s resolves on the %s pods to %d (%v), want the relay's %d",
						relaySvc.Spec.Ports[0].TargetPort.String(), name, got, ok, relayPort)
				}
			}
			oldAccess := accessOf(t, policies, old)
			if a := oldAccess["node-api"]; !admitsCorectl(a) {
				t.Errorf("the policies do not admit corectl to the old pods' shared port node-api (%d): %+v", oldShared, a)
			}

			// The node API through gateway-internal and between replicas.
			var svc corev1.Service
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.find(t, "Service", "gateway-internal").Object, &svc); err != nil {
				t.Fatal(err)
			}
			target := svc.Spec.Ports[0].TargetPort.StrVal
			hasOld := slices.ContainsFunc(oldPorts, func(p corev1.ContainerPort) bool { return p.Name == target })
			if target == "" || newPorts[target] == 0 || !hasOld {
				t.Errorf("Service gateway-internal targets %q, which the new pods (%v) and the old ones must both name", target, newPorts)
			}
			for name, a := range map[string]*portAccess{"new": accessOf(t, policies, gw)["node-api"], "old": oldAccess["node-api"]} {
				if a == nil || !peerLabel(a.peers, "app.kubernetes.io/name", "gateway", true) {
					t.Errorf("the policies do not admit the gateway replicas to the %s pods' node-api: %+v", name, a)
				}
			}
			advertise := regexp.MustCompile(`"advertise":"http://\{env\.POD_IP\}:([0-9]+)"`).FindStringSubmatch(mustJSON(adaptGateway(t, r)))
			if advertise == nil || advertise[1] != strconv.Itoa(int(newPorts["node-api"])) {
				t.Errorf("the new pods advertise %v for forwarding, want their node-api port %d", advertise, newPorts["node-api"])
			}
		})
	}
}

// resolvePort is the port number a Service's targetPort gives for a pod
// with these container ports, as the EndpointSlice controller resolves it:
// a number as is, a name by the container port of that name; false when
// the pod has no port of that name (the pod is then no endpoint of that
// port, and a headless Service's name does not resolve to it).
func resolvePort(target intstr.IntOrString, ports []corev1.ContainerPort) (int32, bool) {
	if target.Type == intstr.Int {
		return target.IntVal, true
	}
	for _, p := range ports {
		if p.Name == target.StrVal {
			return p.ContainerPort, true
		}
	}
	return 0, false
}
