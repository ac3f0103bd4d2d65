package daemon

import (
	"context"

	"github.com/sandgate/sandgate/corectl/sandboxlogs"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SingleRequestCalls returns, by client, one request through each client
// New built for its i-th cluster that makes single requests (not
// watches): the Events sink, the namespace-rights check's
// SelfSubjectAccessReviews (when the credentials can be listed), pods/log,
// and the uncached client.
func SingleRequestCalls(d *Daemon, i int) map[string]func(context.Context) error {
	p := d.clusters[i].parts
	calls := map[string]func(context.Context) error{
		"Events sink": func(ctx context.Context) error {
			_, err := p.sink.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e"}})
			return err
		},
		"pods/log": func(ctx context.Context) error {
			r, err := p.handle.Logs.Stream(ctx, "default", "pod", "c", sandboxlogs.ReadOptions{})
			if err == nil {
				r.Close()
			}
			return err
		},
		"uncached client": func(ctx context.Context) error {
			return p.direct.Get(ctx, client.ObjectKey{Namespace: "default", Name: "x"}, &corev1.ConfigMap{})
		},
	}
	if p.rights != nil {
		calls["SelfSubjectAccessReview"] = func(ctx context.Context) error {
			_, err := p.rights.Reviewer.Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
			return err
		}
	}
	return calls
}
