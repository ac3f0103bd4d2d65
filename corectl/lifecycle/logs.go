package lifecycle

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// LogSource is one container log of a sandbox: the sandbox container in
// one of its pods.
type LogSource struct {
	// Pod is the pod's name (in the sandbox's namespace).
	Pod string
	// Container is the sandbox container's name in it.
	Container string
}

// LogSources returns where sandbox ns/id's log is: the sandbox container
// (its template's container, else the pod's first) of each current pod;
// none while no pod exists. read is as for Status: the caller's own
// uncached read of the BatchSandbox in this call, or nil. Errors:
// ErrNotFound (absent, expired, or Gone: being deleted), ErrUnavailable.
func (o *Orchestrator) LogSources(ctx context.Context, ns, id string, read *unstructured.Unstructured) ([]LogSource, error) {
	u, err := o.readLive(ctx, ns, id, read)
	if err != nil {
		return nil, err
	}
	if goneObject(u) {
		return nil, fmt.Errorf("%w: %s/%s is being deleted", ErrNotFound, ns, id)
	}
	pods, err := (&sandbox.Sandbox{ID: id, Namespace: ns, UID: u.GetUID()}).Pods(ctx, o.Client)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
	}
	out := []LogSource{}
	for i := range pods {
		if c := o.sandboxContainer(u, &pods[i]); c != "" {
			out = append(out, LogSource{Pod: pods[i].Name, Container: c})
		}
	}
	return out, nil
}

// sandboxContainer is the name of the sandbox container in pod p of
// BatchSandbox u: its template's container, else the pod's first ("" for
// a pod without containers).
func (o *Orchestrator) sandboxContainer(u *unstructured.Unstructured, p *corev1.Pod) string {
	if o.Template != nil {
		if tpl, ok := o.Template(u.GetAnnotations()[AnnotationTemplateID]); ok && tpl.Container != "" {
			return tpl.Container
		}
	}
	if len(p.Spec.Containers) > 0 {
		return p.Spec.Containers[0].Name
	}
	return ""
}
