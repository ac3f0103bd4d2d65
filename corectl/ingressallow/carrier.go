package ingressallow

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Carrier builds the managed Ingress for sandbox sb in cluster c carrying
// set (a non-empty normalised CIDR set): name sandbox-ingress-<id> in the
// cluster's ingress namespace; the fixed entry's ingress class and host;
// one Prefix path /<id>/ to the OpenSandbox ingress backend; labels
// managed-by, cluster, sandbox ID and namespace; the owner annotation, and
// an owner reference to the BatchSandbox when both live in the same
// namespace (owner references cannot cross namespaces) and sb.UID is known
// (at creation the carrier is written before the BatchSandbox exists and
// the reference is back-filled, spec §4.1); and the
// whitelist-source-range annotation.
func Carrier(c *cluster.Cluster, sb *sandbox.Sandbox, set []string) *networkingv1.Ingress {
	return CarrierWithProbe(c, sb, set, nil)
}

// CarrierWithProbe is Carrier with the probe sources probe merged into the
// effective whitelist (Effective(set, probe)) and recorded in
// AnnotationProbeSources when non-empty (spec §5.2.2 IV).
func CarrierWithProbe(c *cluster.Cluster, sb *sandbox.Sandbox, set, probe []string) *networkingv1.Ingress {
	class := c.Ingress.ClassName
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Name:      IngressName(sb.ID),
			Namespace: c.Ingress.Namespace,
			Labels:    sb.IdentityLabels(c.ID),
			Annotations: map[string]string{
				AnnotationWhitelist:      strings.Join(Effective(set, probe), cidr.AnnotationSeparator),
				v1alpha1.AnnotationOwner: sb.OwnerAnnotation(),
			},
		},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			Rules: []networkingv1.IngressRule{{
				Host: c.Ingress.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path:     Path(sb.ID),
						PathType: &prefix,
						Backend:  networkingv1.IngressBackend{Service: backend(c)},
					}},
				}},
			}},
		},
	}
	if len(probe) > 0 {
		b, _ := json.Marshal(probe)
		ing.Annotations[AnnotationProbeSources] = string(b)
	}
	if c.Ingress.Namespace == sb.Namespace && sb.UID != "" {
		ing.OwnerReferences = []metav1.OwnerReference{sb.OwnerReference()}
	}
	sb.MarkOwner(ing)
	return ing
}

func backend(c *cluster.Cluster) *networkingv1.IngressServiceBackend {
	b := &networkingv1.IngressServiceBackend{Name: c.Ingress.BackendService}
	if c.Ingress.BackendPort.Type == intstr.Int {
		b.Port.Number = c.Ingress.BackendPort.IntVal
	} else {
		b.Port.Name = c.Ingress.BackendPort.StrVal
	}
	return b
}

// Ref returns the carrierRef of the managed Ingress of sb.
func Ref(c *cluster.Cluster, sb *sandbox.Sandbox) *v1alpha1.CarrierRef {
	return &v1alpha1.CarrierRef{
		Namespace: c.Ingress.Namespace, Name: IngressName(sb.ID),
		Host: c.Ingress.Host, Path: Path(sb.ID), IngressClass: c.Ingress.ClassName,
		BackendService: c.Ingress.BackendService, BackendPort: c.Ingress.BackendPort.String(),
	}
}

// isOurs reports whether ing is corectl's managed Ingress for sb in c
// (labels and owner annotation), the precondition for writing over it.
func isOurs(c *cluster.Cluster, sb *sandbox.Sandbox, ing *networkingv1.Ingress) bool {
	want := sb.IdentityLabels(c.ID)
	for k, v := range want {
		if ing.Labels[k] != v {
			return false
		}
	}
	return ing.Annotations[v1alpha1.AnnotationOwner] == sb.OwnerAnnotation()
}

// awaitsBackfill reports whether ing is the carrier sb's create wrote
// before the BatchSandbox existed and has not back-filled yet (package
// lifecycle, steps ingress and owners): corectl's identity labels for sb,
// the owner annotation naming sb's namespace and ID with no UID, and no
// owner reference. It is neither foreign nor yet sb's (isOurs): the
// create writes its owner next, conditional on the version it read, so a
// cycle writes nothing over it and is retried.
func awaitsBackfill(c *cluster.Cluster, sb *sandbox.Sandbox, ing *networkingv1.Ingress) bool {
	// The create's carrier is isOurs for sb as the create knew it before
	// the BatchSandbox existed: the same identity, no UID.
	pre := sandbox.Sandbox{Namespace: sb.Namespace, ID: sb.ID}
	return sb.UID != "" && len(ing.OwnerReferences) == 0 && isOurs(c, &pre, ing)
}

// CheckCarrier verifies a read-back managed Ingress against the
// expectations of spec §5.2 except the path-claim check: owner (annotation,
// and owner reference when in the sandbox's namespace), management and
// identity labels, ingress class, exactly one rule with the host and
// exactly one Prefix path /<id>/ to the OpenSandbox backend, no default
// backend or TLS changes the routing, and a whitelist-source-range that is
// exactly the canonical form of Effective(set, P_self), P_self being the
// probe sources the carrier itself records (AnnotationProbeSources), so
// the comparison needs no in-process state (spec §5.2.2 IV). Beyond the
// spec's list, the carrier must carry no ingress-nginx annotation that can
// get around the whitelist (refusedAnnotation: a snippet,
// allowlist-source-range, satisfy). It returns the failure code
// (CodeCarrierMismatch or CodeAllowlistMismatch) and reason, or "" when
// everything holds.
func CheckCarrier(c *cluster.Cluster, sb *sandbox.Sandbox, ing *networkingv1.Ingress, set []string) (code, reason string) {
	pself, err := ProbeSources(ing)
	if err != nil {
		return CodeAllowlistMismatch, err.Error()
	}
	want := CarrierWithProbe(c, sb, set, pself)
	eff := Effective(set, pself)
	if !isOurs(c, sb, ing) {
		return CodeCarrierMismatch, "owner annotation or identity labels differ"
	}
	if len(want.OwnerReferences) > 0 && !sb.HasOwnerReference(ing.OwnerReferences) {
		return CodeCarrierMismatch, "owner reference to the BatchSandbox missing"
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != c.Ingress.ClassName {
		return CodeCarrierMismatch, "ingress class differs"
	}
	if ing.Spec.DefaultBackend != nil {
		return CodeCarrierMismatch, "has a default backend"
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != c.Ingress.Host || ing.Spec.Rules[0].HTTP == nil || len(ing.Spec.Rules[0].HTTP.Paths) != 1 {
		return CodeCarrierMismatch, "host or rules differ"
	}
	p := ing.Spec.Rules[0].HTTP.Paths[0]
	wp := want.Spec.Rules[0].HTTP.Paths[0]
	if p.Path != wp.Path || p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix {
		return CodeCarrierMismatch, "path differs"
	}
	if p.Backend.Resource != nil || p.Backend.Service == nil || *p.Backend.Service != *wp.Backend.Service {
		return CodeCarrierMismatch, "backend differs"
	}
	if k := firstRefused(ing.Annotations); k != "" {
		if snippetAnnotation(k) {
			return CodeCarrierMismatch, "carries the nginx snippet annotation " + k
		}
		return CodeCarrierMismatch, "carries the nginx annotation " + k + ", which can get around " + AnnotationWhitelist
	}
	got, canonical, err := cidr.ParseAnnotation(ing.Annotations[AnnotationWhitelist])
	if err != nil {
		return CodeAllowlistMismatch, "whitelist-source-range: " + err.Error()
	}
	if !canonical || !slices.Equal(got, eff) {
		return CodeAllowlistMismatch, fmt.Sprintf("whitelist-source-range is %q, want %q", ing.Annotations[AnnotationWhitelist], want.Annotations[AnnotationWhitelist])
	}
	return "", ""
}

// Configured decompiles the allowlist of a live Ingress as the user sees
// it: the normalised set of its whitelist-source-range without the probe
// sources it records, except those the user set u names (StripProbe); an
// error when an annotation is missing or does not parse.
func Configured(ing *networkingv1.Ingress, u []string) ([]string, error) {
	v, ok := ing.Annotations[AnnotationWhitelist]
	if !ok {
		return nil, fmt.Errorf("no %s annotation", AnnotationWhitelist)
	}
	set, _, err := cidr.ParseAnnotation(v)
	if err != nil {
		return nil, err
	}
	p, err := ProbeSources(ing)
	if err != nil {
		return nil, err
	}
	return StripProbe(set, p, u), nil
}

// Claimants returns "namespace/name" of every Ingress in list, other than
// own (namespace/name), that claims the sandbox path path (/<id>/) on
// host for ingress class class, sorted. An Ingress claims it when one of
// its rules matches host (the same host, no host, or a wildcard covering
// it) and has a path equal to /<id> or /<id>/ or below /<id>/, and its
// class is class or unset (an unset class may be served by the default
// controller, so it is counted); the legacy kubernetes.io/ingress.class
// annotation is honoured. A default backend alone does not claim a path.
func Claimants(list []networkingv1.Ingress, own, host, class, path string) []string {
	bare := strings.TrimSuffix(path, "/")
	var out []string
	for i := range list {
		ing := &list[i]
		if ing.Namespace+"/"+ing.Name == own || ing.DeletionTimestamp != nil {
			continue
		}
		ic := ""
		if ing.Spec.IngressClassName != nil {
			ic = *ing.Spec.IngressClassName
		} else if a, ok := ing.Annotations["kubernetes.io/ingress.class"]; ok {
			ic = a
		}
		if ic != "" && ic != class {
			continue
		}
		if claimsPath(ing, host, path, bare) {
			out = append(out, ing.Namespace+"/"+ing.Name)
		}
	}
	slices.Sort(out)
	return out
}

// claimsOwnPath reports whether ing, the sandbox id's carrier as read,
// already claims the sandbox path (/<id>/) on c's Ingress host for c's
// ingress class, as Claimants counts a claim.
func claimsOwnPath(c *cluster.Cluster, ing *networkingv1.Ingress, id string) bool {
	return len(Claimants([]networkingv1.Ingress{*ing}, "", c.Ingress.Host, c.Ingress.ClassName, Path(id))) == 1
}

func claimsPath(ing *networkingv1.Ingress, host, path, bare string) bool {
	for _, r := range ing.Spec.Rules {
		if !hostMatches(r.Host, host) || r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			if p.Path == bare || p.Path == path || strings.HasPrefix(p.Path, path) {
				return true
			}
		}
	}
	return false
}

// hostMatches reports whether an Ingress rule host covers host.
func hostMatches(rule, host string) bool {
	switch {
	case rule == "" || host == "" || rule == host:
		return true
	case strings.HasPrefix(rule, "*."):
		suffix := rule[1:]
		head, ok := strings.CutSuffix(host, suffix)
		return ok && head != "" && !strings.Contains(head, ".")
	}
	return false
}

// snippetAnnotation reports whether key is an ingress-nginx snippet
// annotation: nginx.ingress.kubernetes.io/<name>-snippet
// (configuration-snippet, server-snippet, auth-snippet,
// modsecurity-snippet, stream-snippet, …). A snippet is raw nginx
// configuration placed in the carrier's location, or in the server block
// the fixed entry's host shares with every other sandbox; it can answer,
// proxy or rewrite a request around the whitelist-source-range check. The
// shared ingress-nginx must allow snippets when the reachability probe is
// used (its echo Ingress answers with a configuration-snippet), so a
// carrier that carries one would be served. corectl never writes one.
func snippetAnnotation(key string) bool {
	name, ok := strings.CutPrefix(key, nginxAnnotationPrefix)
	return ok && strings.HasSuffix(name, "-snippet")
}

// refusedAnnotation reports whether key is an ingress-nginx annotation a
// carrier may not carry because it can get around AnnotationWhitelist: a
// snippet (snippetAnnotation); allowlist-source-range, which ingress-nginx
// reads in place of whitelist-source-range whenever it is non-empty
// (whitelist-source-range is only its alias: internal/ingress/annotations
// ipallowlist and parser.checkAnnotation, controller v1.9 and later); and
// satisfy, whose "any" lets a request that passes an auth check (e.g. an
// added auth-url) in from outside the allow list (nginx's satisfy
// directive). corectl writes none of them.
func refusedAnnotation(key string) bool {
	if snippetAnnotation(key) {
		return true
	}
	name, ok := strings.CutPrefix(key, nginxAnnotationPrefix)
	return ok && (name == "allowlist-source-range" || name == "satisfy")
}

// nginxAnnotationPrefix is ingress-nginx's default annotation prefix, the
// one AnnotationWhitelist uses.
const nginxAnnotationPrefix = "nginx.ingress.kubernetes.io/"

// firstRefused returns the first refused annotation (refusedAnnotation)
// of annotations in name order, "" when there is none.
func firstRefused(annotations map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		if refusedAnnotation(k) {
			return k
		}
	}
	return ""
}

// carrierAnnotations returns what a write over the live carrier sets as
// its annotations: the live ones (cur) with corectl's (want) laid over
// them, less every annotation a carrier may not carry (a snippet,
// allowlist-source-range, satisfy: see CheckCarrier) that want does not
// hold, and less AnnotationProbeSources when want has none: it records
// the probe sources merged into the whitelist written with it, so a
// write without them (probe-source discovery off) must not keep an
// earlier write's record, which CheckCarrier would then require in the
// whitelist. Other annotations someone added are kept. Neither map is
// modified.
func carrierAnnotations(cur, want map[string]string) map[string]string {
	out := mergeMaps(cur, want)
	for k := range out {
		if _, own := want[k]; !own && (refusedAnnotation(k) || k == AnnotationProbeSources) {
			delete(out, k)
		}
	}
	return out
}

// mergeMaps returns base overlaid with over.
func mergeMaps(base, over map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}
