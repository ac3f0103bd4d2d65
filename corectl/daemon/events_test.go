package daemon_test

import (
	"bytes"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/deploy"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestEventsAtShutdown: the Lease's "became leader" Event is what kubectl
// describe lease lists (its core/v1 view names the Lease by kind, name and
// UID); a replica that shuts down releases the cluster's
// Lease, and the "stopped leading" Event its leader election records on
// the way out reaches the apiserver (the Events broadcaster outlives the
// managers and is flushed before Run returns, not cut off with the
// Event in flight); once Run has returned, no goroutine of the Events
// broadcaster is left.
func TestEventsAtShutdown(t *testing.T) {
	s := newSetup(t, "c-events-shutdown")
	r := s.start(t, env.Config, 0)
	kubetest.Eventually(t, 30*time.Second, "leadership", func() (bool, error) { return elected(r, s.id), nil })
	leaseEvent(t, s, s.id)
	// What kubectl describe lease lists: the core/v1 view of the Events
	// whose involved object is the Lease, by name, kind and UID.
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.leaseNS, Name: daemon.LeaseName(s.id)}, lease); err != nil {
		t.Fatal(err)
	}
	var core corev1.EventList
	if err := env.Client.List(ctx, &core, client.InNamespace(s.leaseNS)); err != nil {
		t.Fatal(err)
	}
	described := false
	for _, e := range core.Items {
		o := e.InvolvedObject
		if o.Kind == "Lease" && o.Name == lease.Name && o.UID == lease.UID && e.Reason == "LeaderElection" && e.Type == corev1.EventTypeNormal &&
			strings.HasSuffix(e.Message, "became leader") {
			described = true
		}
	}
	if !described {
		t.Errorf("no core/v1 Event of the Lease (UID %s) with reason LeaderElection and \"became leader\": %+v", lease.UID, core.Items)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// What Run left: the Event is in the apiserver or never will be.
	var evs eventsv1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(s.leaseNS)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if e.Regarding.Name == daemon.LeaseName(s.id) && strings.HasSuffix(e.Note, "stopped leading") {
			found = true
		}
	}
	if !found {
		t.Error(`the Lease's "stopped leading" Event was not recorded by the time Run returned`)
	}
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "k8s.io/client-go/tools/events.") || strings.Contains(g, "k8s.io/apimachinery/pkg/watch.(*Broadcaster)") {
			t.Errorf("an Events broadcaster goroutine left after Run returned:\n%s", g)
		}
	}
}

// TestEventsRefused: corectl running as a user whom RBAC refuses Events
// (the corectl ClusterRole of rbac.yaml without its events.k8s.io rule)
// still leads the cluster and shuts down: a refused Event is dropped, not
// retried, and holds nothing (Run returns; the flush at shutdown finds no
// write in progress), and no Event of it is in the apiserver.
func TestEventsRefused(t *testing.T) {
	s := newSetup(t, "c-events-refused")
	user := "corectl-no-events"
	objs, err := deploy.RBAC()
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.ClusterRole
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == "corectl" {
			role = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role == nil {
		t.Fatal("rbac.yaml has no ClusterRole corectl")
	}
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "events") {
			rules = append(rules, r)
		}
	}
	if len(rules) == len(role.Rules) {
		t.Fatal("the corectl ClusterRole has no events rule to leave out")
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: s.leaseNS, Name: user}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: s.leaseNS, Name: user}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}},
	} {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	as := rest.CopyConfig(env.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	probe, err := client.New(as, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: s.leaseNS, Name: "probe"}, EventTime: metav1.NowMicro(),
		ReportingController: "corectl", ReportingInstance: "probe", Action: "Probe", Reason: "Probe", Type: "Normal"}
	if err := probe.Create(ctx, ev); !apierrors.IsForbidden(err) {
		t.Fatalf("creating an Event as %s = %v, want Forbidden", user, err)
	}
	r := s.start(t, as, 0)
	kubetest.Eventually(t, 30*time.Second, "leadership without the right to write Events", func() (bool, error) { return elected(r, s.id), nil })
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var evs eventsv1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(s.leaseNS)); err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 0 {
		t.Fatalf("%d Events written without the right to", len(evs.Items))
	}
}
