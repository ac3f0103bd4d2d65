package deploy

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// checkLeaderElectionVerbsNeeded runs, after deploy/compute is applied,
// the Lease lock controller-runtime's leader election uses (client-go's
// LeaseLock: get, create, update) as corectl's ServiceAccount: with the
// Role corectl-leader-election as shipped every step succeeds, and with
// each of its verbs removed in turn the step that needs it is Forbidden.
// So every verb the Role grants is needed. The Role is restored after.
func checkLeaderElectionVerbsNeeded(t *testing.T, admin *rest.Config) {
	t.Helper()
	ctx := context.Background()
	const ns, roleName, user = "corectl-system", "corectl-leader-election", "system:serviceaccount:corectl-system:corectl"
	acs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := acs.RbacV1().Roles(ns).Get(ctx, roleName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(shipped.Rules) != 1 {
		t.Fatalf("Role %s has %d rules, want one on Leases", roleName, len(shipped.Rules))
	}
	granted := shipped.Rules[0].Verbs
	sa := rest.CopyConfig(admin)
	sa.Impersonate = rest.ImpersonationConfig{UserName: user}
	scs, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	// setVerbs replaces the Role's verbs and waits until the authorizer
	// answers accordingly for every verb of the shipped Role.
	setVerbs := func(verbs []string) {
		r, err := acs.RbacV1().Roles(ns).Get(ctx, roleName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Rules = []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}}
		if _, err := acs.RbacV1().Roles(ns).Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			for _, v := range granted {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: v, Group: "coordination.k8s.io", Resource: "leases"}}}
				got, err := acs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				if got.Status.Allowed != slices.Contains(verbs, v) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the authorizer did not take the verbs %v: %v", verbs, err)
		}
	}
	defer setVerbs(granted)
	const leaseName = "corectl-rbac-necessity"
	cleanup := func() {
		if err := acs.CoordinationV1().Leases(ns).Delete(ctx, leaseName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	// elect runs the lock's steps: get (none yet), create, get, update.
	// It returns the step that failed and its error.
	elect := func() (string, error) {
		defer cleanup()
		lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName}, Client: scs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "corectl-0"}}
		if _, _, err := lock.Get(ctx); !apierrors.IsNotFound(err) {
			return "get", err
		}
		now := metav1.NewTime(time.Now())
		rec := resourcelock.LeaderElectionRecord{HolderIdentity: "corectl-0", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
		if err := lock.Create(ctx, rec); err != nil {
			return "create", err
		}
		if _, _, err := lock.Get(ctx); err != nil {
			return "get", err
		}
		if err := lock.Update(ctx, rec); err != nil {
			return "update", err
		}
		return "", nil
	}
	if step, err := elect(); err != nil {
		t.Fatalf("leader election with the shipped Role: %s: %v", step, err)
	}
	for _, removed := range granted {
		var rest []string
		for _, v := range granted {
			if v != removed {
				rest = append(rest, v)
			}
		}
		setVerbs(rest)
		step, err := elect()
		if !apierrors.IsForbidden(err) || step != removed {
			if err == nil {
				err = errors.New("no error")
			}
			t.Errorf("without %q the Lease lock failed at %q with %v; want %q Forbidden (a verb nothing needs)", removed, step, err, removed)
		}
	}
}
