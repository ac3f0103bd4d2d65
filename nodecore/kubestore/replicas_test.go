package kubestore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/internal/waittest"
	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/enrolment/enrolmenttest"
	"github.com/sandgate/sandgate/nodecore/kubestore"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/placement/placementtest"
	"github.com/sandgate/sandgate/nodecore/pool"
	"github.com/sandgate/sandgate/nodecore/pool/pooltest"
)

func ptr(v int64) *int64 { return &v }

// TestDeploymentReachesTheOtherReplica: a deployment set through replica
// A's registry reaches replica B's registry through B's watch, without a
// reload; deleting the NodePool with kubectl changes no running replica.
func TestDeploymentReachesTheOtherReplica(t *testing.T) {
	ns := namespace(t)
	a, err := open(t, ns, nil, nil).Pools()
	if err != nil {
		t.Fatal(err)
	}
	b, err := open(t, ns, nil, nil).Pools()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*pool.Registry{a, b} {
		if _, err := r.Configure(pooltest.Spec7()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Set("default", 8, ptr(7), &pool.Binding{Generation: 8, SpecificationDigest: pooltest.D8, Source: "rel-8"}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, "B sees A's deployment", func() bool {
		d, ok := b.Deployment("default")
		return ok && pooltest.Same(d, 8, pooltest.D8, 7)
	})
	if bd, ok := b.Binding("default", 8); !ok || bd.Source != "rel-8" {
		t.Fatalf("B's binding: %+v", bd)
	}
	// B changes it back; A follows.
	if _, err := b.Set("default", 8, ptr(8), nil); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, "A sees B's deployment", func() bool {
		d, _ := a.Deployment("default")
		return pooltest.Same(d, 8, pooltest.D8, 8)
	})
	if err := kube.Delete(ctx, &v1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	// A later write through A: once B has it, B has had the deletion too
	// (one watch delivers the NodePools in the order they were written).
	gpu := map[string]pool.Spec{"gpu": {Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: pooltest.D9}}, Target: 1}}
	if _, err := a.Configure(gpu); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, "B sees the gpu pool", func() bool {
		return errors.Is(b.Check(map[string]pool.Spec{"gpu": {Bindings: []pool.Binding{{Generation: 1, SpecificationDigest: pooltest.D8}}}}), pool.ErrConflict)
	})
	if d := pooltest.Dep(t, b, "default"); !pooltest.Same(d, 8, pooltest.D8, 8) {
		t.Fatalf("deleting the NodePool changed B: %+v", d)
	}
}

// TestNodePoolsAsKubectlShowsThem: the objects carry the pool's state in
// the documented form.
func TestNodePoolsAsKubectlShowsThem(t *testing.T) {
	ns := namespace(t)
	r, _ := open(t, ns, nil, nil).Pools()
	if _, err := r.Configure(pooltest.Spec7()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Set("default", 8, ptr(7), &pool.Binding{Generation: 8, SpecificationDigest: pooltest.D8}); err != nil {
		t.Fatal(err)
	}
	var p v1.NodePool
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &p); err != nil {
		t.Fatal(err)
	}
	want := v1.NodePoolSpec{Target: 8, Serving: 7, Generations: map[string]v1.GenerationBinding{
		"7": {SpecificationDigest: pooltest.D7, Release: "rel-7"}, "8": {SpecificationDigest: pooltest.D8}}}
	if p.Spec.Target != want.Target || p.Spec.Serving != want.Serving || len(p.Spec.Generations) != 2 ||
		p.Spec.Generations["7"] != want.Generations["7"] || p.Spec.Generations["8"] != want.Generations["8"] ||
		p.Status.Configured == nil || *p.Status.Configured != (v1.ConfiguredDeployment{Target: 7}) ||
		p.Labels[v1.LabelManagedBy] != v1.ManagedByValue {
		t.Fatalf("%+v", p)
	}
}

// TestEnrolmentGivesTheTokenBack: when the node cannot be created after
// the token was used (here the identity may update tokens but not create
// nodes), the token is given back: it is usable again and no node exists.
func TestEnrolmentGivesTheTokenBack(t *testing.T) {
	ns := namespace(t)
	admin := open(t, ns, nil, nil).Enrolment()
	tok, _, err := admin.Issue("default", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	half := open(t, ns, limited(t, ns, map[string][]string{"nodeenrolmenttokens": {"update"}}), nil).Enrolment()
	before := snapshot(t, ns)
	if _, err := half.Enrol(tok, enrolmenttest.Request(), enrolmenttest.Resolve7); !errors.Is(err, enrolment.ErrState) {
		t.Fatalf("%v, want ErrState", err)
	}
	var tokens v1.NodeEnrolmentTokenList
	if err := kube.List(ctx, &tokens, client.InNamespace(ns)); err != nil || len(tokens.Items) != 1 || tokens.Items[0].Status.UsedAt != nil {
		t.Fatalf("the token was not given back: %+v %v", tokens.Items, err)
	}
	if after := snapshot(t, ns); after == before {
		t.Fatal("the use and its undo were not written (the test does not test the undo)")
	}
	// Each store reads tokens from its watch: the undo reaches it when
	// the watch delivers it.
	for _, s := range []*kubestore.Enrolment{half, admin} {
		waittest.Until(t, 10*time.Second, "the token usable again", func() bool {
			p, err := s.Check(tok)
			return err == nil && p == "default"
		})
	}
	if len(half.Nodes()) != 0 {
		t.Fatal("a node was added")
	}
	e, err := admin.Enrol(tok, enrolmenttest.Request(), enrolmenttest.Resolve7)
	if err != nil {
		t.Fatalf("the given-back token: %v", err)
	}
	if _, err := admin.Authenticate(e.Node.NodeID, credential.Sum(e.Credential)); err != nil {
		t.Fatal(err)
	}
}

// TestDisableAndRemoveReachTheOtherReplica: a node disabled through A is
// refused by B once B's watch has delivered it, enabled again accepted,
// removed unknown; the EnrolledNode holds the credential's SHA-256 only.
func TestDisableAndRemoveReachTheOtherReplica(t *testing.T) {
	ns := namespace(t)
	a, b := open(t, ns, nil, nil).Enrolment(), open(t, ns, nil, nil).Enrolment()
	tok, _, _ := a.Issue("default", time.Hour)
	e, err := a.Enrol(tok, enrolmenttest.Request(), enrolmenttest.Resolve7)
	if err != nil {
		t.Fatal(err)
	}
	id, cred := e.Node.NodeID, credential.Sum(e.Credential)
	var n v1.EnrolledNode
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, &n); err != nil {
		t.Fatal(err)
	}
	if n.Spec.CredentialSHA256 != fmt.Sprintf("%x", cred[:]) || n.Labels[v1.LabelPool] != "default" {
		t.Fatalf("%+v", n.Spec)
	}
	if snap := snapshot(t, ns); strings.Contains(snap, tok) || strings.Contains(snap, e.Credential) {
		t.Fatal("a secret is stored")
	}
	waittest.Until(t, 10*time.Second, "B knows the node", func() bool { _, err := b.Authenticate(id, cred); return err == nil })
	if found, err := a.SetEnabled(id, false); !found || err != nil {
		t.Fatal(found, err)
	}
	waittest.Until(t, 10*time.Second, "B refuses the disabled node", func() bool {
		_, err := b.Authenticate(id, cred)
		return errors.Is(err, credential.ErrDisabled)
	})
	if found, err := b.SetEnabled(id, true); !found || err != nil {
		t.Fatal(found, err)
	}
	waittest.Until(t, 10*time.Second, "A accepts the enabled node", func() bool { _, err := a.Authenticate(id, cred); return err == nil })
	if found, err := b.Remove(id); !found || err != nil {
		t.Fatal(found, err)
	}
	waittest.Until(t, 10*time.Second, "A forgets the removed node", func() bool {
		_, err := a.Authenticate(id, cred)
		return errors.Is(err, credential.ErrUnknownNode)
	})
	if found, _ := a.Remove(id); found {
		t.Fatal("removed twice")
	}
}

// TestPlacementsReachTheOtherReplica: B's view learns A's placement
// through its watch (no Sync), and A's release likewise.
func TestPlacementsReachTheOtherReplica(t *testing.T) {
	ns := namespace(t)
	a, b := open(t, ns, nil, nil).Placements(), open(t, ns, nil, nil).Placements()
	if err := a.Place(placementtest.P(3, "x")); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, "B sees the placement", func() bool { return b.InUse(placementtest.NodeA, 3) })
	if ok, err := a.Release(placementtest.P(3, "x")); !ok || err != nil {
		t.Fatal(ok, err)
	}
	waittest.Until(t, 10*time.Second, "B sees the release", func() bool { return !b.InUse(placementtest.NodeA, 3) })
	// The empty object is deleted.
	var l v1.NodePlacementsList
	if err := kube.List(ctx, &l, client.InNamespace(ns)); err != nil || len(l.Items) != 0 {
		t.Fatalf("%d objects, %v", len(l.Items), err)
	}
	// A release through B of a placement B's view may not have yet (A
	// placed it a moment ago) is found in the apiserver.
	if err := a.Place(placementtest.P(4, "y")); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Release(placementtest.P(4, "y")); !ok || err != nil {
		t.Fatalf("B's release of A's placement: %v %v", ok, err)
	}
}

// TestPlacementGroupCommit: 64 placements on one node at once are written
// in fewer writes than placements (the object's metadata.generation counts
// its spec's writes).
func TestPlacementGroupCommit(t *testing.T) {
	ns := namespace(t)
	s := open(t, ns, nil, nil).Placements()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Place(placementtest.P(1, fmt.Sprintf("a%d", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var o v1.NodePlacements
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: placementtest.NodeA}, &o); err != nil {
		t.Fatal(err)
	}
	if len(o.Spec.Placements) != 64 || o.Generation >= 64 {
		t.Fatalf("%d placements in %d writes", len(o.Spec.Placements), o.Generation)
	}
	t.Logf("64 placements in %d writes", o.Generation)
}

// TestMaxPlacements: a node holding v1alpha1.MaxPlacements refuses one
// more (ErrJournal), records nothing, and placing one it has is still a
// no-op.
func TestMaxPlacements(t *testing.T) {
	ns := namespace(t)
	o := &v1.NodePlacements{ObjectMeta: metav1.ObjectMeta{Name: placementtest.NodeA, Namespace: ns}}
	for i := range v1.MaxPlacements {
		o.Spec.Placements = append(o.Spec.Placements, v1.PlacedAllocation{Generation: 1, TenantID: "t", EnvironmentID: "e", AllocationID: fmt.Sprintf("a%d", i)})
	}
	if err := kube.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	s := open(t, ns, nil, nil).Placements()
	if err := s.Place(placementtest.P(2, "one-more")); !errors.Is(err, placement.ErrJournal) {
		t.Fatalf("%v, want ErrJournal", err)
	}
	if s.InUse(placementtest.NodeA, 2) || len(s.List(placementtest.NodeA)) != v1.MaxPlacements {
		t.Fatal("the refused placement was recorded")
	}
	if err := s.Place(placementtest.P(1, "a7")); err != nil {
		t.Fatal(err)
	}
}

// TestOpenWithoutRights: a store that cannot list its objects
// fails Open with ErrSync, naming the namespace.
func TestOpenWithoutRights(t *testing.T) {
	ns := namespace(t)
	rc := limited(t, ns, nil)
	rc.Impersonate.UserName = "nobody"
	_, err := kubestore.Open(kubestore.Config{REST: rc, Namespace: ns, SyncTimeout: 2 * time.Second})
	if !errors.Is(err, kubestore.ErrSync) {
		t.Fatalf("%v, want ErrSync", err)
	}
}
