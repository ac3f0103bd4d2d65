// Package nsrights is corectl's write rights in the namespaces a compute
// cluster serves (docs/deploy.md "Compute clusters"). deploy/compute/rbac.yaml
// lets corectl read NetworkPolicies and Ingresses cluster-wide but write
// them nowhere: the writes are two ClusterRoles that a RoleBinding grants in
// one namespace each, IngressRole in the cluster's ingress namespace
// (ingress.namespace of clusters.yaml) and ProjectRole in every project
// namespace the cluster's resource credentials name (projectNamespace).
//
// Bindings derives those RoleBindings from the same cluster configuration
// and credential file corectl reads (`corectl rbac` prints them), and
// Checker asks the apiserver, at run time, whether corectl holds them: the
// credentials are re-read while corectl runs, so a credential may name a
// namespace nobody has bound yet, and Checker says so (a metric, an error
// log) before a create there is refused.
package nsrights

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/gateway/credential"
)

// The ClusterRoles of deploy/compute/rbac.yaml that the RoleBindings name.
const (
	// IngressRole holds the writes in the ingress namespace: Ingresses,
	// the Native Browser's Services and EndpointSlices.
	IngressRole = "corectl-ingress-namespace"
	// ProjectRole holds the writes in a project namespace: the egress
	// NetworkPolicies.
	ProjectRole = "corectl-project-namespace"
)

// ServiceAccount names corectl's ServiceAccount in a compute cluster.
type ServiceAccount struct {
	// Namespace is the ServiceAccount's namespace (deploy/compute:
	// corectl-system).
	Namespace string
	// Name is the ServiceAccount's name (deploy/compute: corectl).
	Name string
}

// DefaultServiceAccount is the ServiceAccount deploy/compute installs.
var DefaultServiceAccount = ServiceAccount{Namespace: "corectl-system", Name: "corectl"}

// Grant is one RoleBinding corectl needs: ClusterRole Role in Namespace.
type Grant struct {
	// Namespace is where the RoleBinding lives and grants.
	Namespace string
	// Role is IngressRole or ProjectRole.
	Role string
}

// Needed returns the grants corectl needs in cluster c when creds are its
// resource credentials (of every cluster; those of other clusters are
// skipped): IngressRole in c's ingress namespace first, then ProjectRole in
// each distinct project namespace, sorted. Disabled credentials count: one
// may be enabled again by editing the file.
func Needed(c *cluster.Cluster, creds map[string]credential.Credential) []Grant {
	var ns []string
	for _, cr := range creds {
		if cr.ClusterID == c.ID && !slices.Contains(ns, cr.ProjectNamespace) {
			ns = append(ns, cr.ProjectNamespace)
		}
	}
	slices.Sort(ns)
	out := []Grant{{Namespace: c.Ingress.Namespace, Role: IngressRole}}
	for _, n := range ns {
		out = append(out, Grant{Namespace: n, Role: ProjectRole})
	}
	return out
}

// Bindings returns a RoleBinding per grant binding its ClusterRole to sa,
// named after the ClusterRole (so applying it twice is idempotent).
func Bindings(grants []Grant, sa ServiceAccount) []rbacv1.RoleBinding {
	out := make([]rbacv1.RoleBinding, 0, len(grants))
	for _, g := range grants {
		out = append(out, rbacv1.RoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: g.Role, Namespace: g.Namespace,
				Labels: map[string]string{"app.kubernetes.io/part-of": "sandgate"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: g.Role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}},
		})
	}
	return out
}

// probe is the request whose permission stands for a grant: creating the
// kind the ClusterRole exists for.
func probe(g Grant) authorizationv1.ResourceAttributes {
	ra := authorizationv1.ResourceAttributes{Namespace: g.Namespace, Verb: "create", Group: "networking.k8s.io", Resource: "networkpolicies"}
	if g.Role == IngressRole {
		ra.Resource = "ingresses"
	}
	return ra
}

// Reviewer is the apiserver's SelfSubjectAccessReview endpoint
// (kubernetes.Interface's AuthorizationV1().SelfSubjectAccessReviews()).
type Reviewer interface {
	Create(ctx context.Context, r *authorizationv1.SelfSubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SelfSubjectAccessReview, error)
}

// Missing asks the apiserver, as corectl, whether it may create the kind of
// each grant in its namespace, and returns the grants it may not (nil when
// it holds all). The error is the first review that could not be asked.
func Missing(ctx context.Context, r Reviewer, grants []Grant) ([]Grant, error) {
	var out []Grant
	for _, g := range grants {
		ra := probe(g)
		got, err := r.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("nsrights: reviewing %s %s in %s: %w", ra.Verb, ra.Resource, g.Namespace, err)
		}
		if !got.Status.Allowed {
			out = append(out, g)
		}
	}
	return out, nil
}

// DefaultInterval is how often a Checker re-checks by default.
const DefaultInterval = time.Minute

// Checker re-checks corectl's grants in one cluster while corectl runs: at
// start and every Interval, with the credentials as they are then. It is a
// controller-runtime Runnable that every replica runs (not only the leader:
// every replica serves creates). A grant that goes missing is logged at
// error level once, naming the namespace and the ClusterRole, and reported
// through Report until it is held again.
type Checker struct {
	// Cluster is the cluster checked.
	Cluster *cluster.Cluster
	// Credentials returns the resource credentials now (the credential
	// file's last good version).
	Credentials func() map[string]credential.Credential
	// Reviewer asks the cluster's apiserver as corectl.
	Reviewer Reviewer
	// Interval is the period; 0 means DefaultInterval.
	Interval time.Duration
	// Report, when set, receives after each check every grant needed,
	// keyed by namespace and ClusterRole, true when held.
	Report func(held map[[2]string]bool)
	// Log receives the errors.
	Log logr.Logger

	missing map[Grant]bool // reported missing at the last check
}

// NeedLeaderElection is false: every replica checks.
func (c *Checker) NeedLeaderElection() bool { return false }

// Start checks until ctx ends; it returns nil then. A review that cannot be
// asked is logged and retried at the next tick (the last report stands).
func (c *Checker) Start(ctx context.Context) error {
	every := c.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		c.Check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check runs one check and returns the grants missing (nil when it could
// not ask; the error is logged).
func (c *Checker) Check(ctx context.Context) []Grant {
	grants := Needed(c.Cluster, c.Credentials())
	missing, err := Missing(ctx, c.Reviewer, grants)
	if err != nil {
		if ctx.Err() == nil {
			c.Log.Error(err, "cannot check corectl's rights in the cluster's namespaces", "cluster", c.Cluster.ID)
		}
		return nil
	}
	now := map[Grant]bool{}
	for _, g := range missing {
		now[g] = true
		if !c.missing[g] {
			c.Log.Error(nil, "corectl may not write in a namespace the cluster serves: no RoleBinding to the ClusterRole there; creates and network updates there fail until it exists (apply the output of `corectl rbac`)",
				"cluster", c.Cluster.ID, "namespace", g.Namespace, "clusterRole", g.Role)
		}
	}
	c.missing = now
	if c.Report != nil {
		held := map[[2]string]bool{}
		for _, g := range grants {
			held[[2]string{g.Namespace, g.Role}] = !now[g]
		}
		c.Report(held)
	}
	return missing
}
