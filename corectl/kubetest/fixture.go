package kubetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/corectl/cluster"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// SandboxID is the ID of the BatchSandbox a Sandbox fixture holds.
const SandboxID = "sbx"

// Sandbox is the world of one test of a network engine (egress,
// ingressallow): a fresh namespace holding the BatchSandbox SandboxID, a
// fresh namespace for the managed Ingresses (as in production, apart from
// the sandboxes), the cluster "c1" whose carrier lives there, and an Event
// recorder for the engine.
type Sandbox struct {
	// Namespace holds the BatchSandbox (and its policy and allowlist).
	Namespace string
	// IngressNamespace holds the managed Ingresses.
	IngressNamespace string
	// CR is the BatchSandbox as created.
	CR *unstructured.Unstructured
	// Cluster is Cluster("c1", IngressNamespace) with an ingress host of
	// the test's own ("<Namespace>.example.test"): sandbox paths are
	// unique per host and class across the apiserver, so tests do not
	// claim each other's paths.
	Cluster *cluster.Cluster
	// Events is given to the engine as its EventRecorder.
	Events *Recorder
}

// Sandbox creates the fixture of one engine test: the two namespaces and
// the BatchSandbox SandboxID whose pod template has labels.
func (e *Env) Sandbox(t testing.TB, labels map[string]string) *Sandbox {
	t.Helper()
	ns := e.Namespace(t)
	ingNS := e.Namespace(t)
	cr := e.BatchSandbox(t, ns, SandboxID, labels)
	c := Cluster("c1", ingNS)
	c.Ingress.Host = ns + ".example.test"
	return &Sandbox{Namespace: ns, IngressNamespace: ingNS, CR: cr, Cluster: c, Events: &Recorder{}}
}

// Event is one Event a Recorder received.
type Event struct {
	// Type is Normal or Warning.
	Type string
	// Kind and Name name the regarding object (an ObjectReference's, or
	// the object's own kind, "" for a typed object, and name).
	Kind, Name string
	// Reason is the Event's reason.
	Reason string
	// Note is the note with its arguments filled in.
	Note string
}

// Recorder collects the Events an engine records (it implements the
// engines' EventRecorder); safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Eventf records one Event.
func (r *Recorder) Eventf(regarding runtime.Object, _ runtime.Object, typ, reason, _, note string, args ...interface{}) {
	ev := Event{Type: typ, Reason: reason, Note: fmt.Sprintf(note, args...)}
	if ref, ok := regarding.(*corev1.ObjectReference); ok {
		ev.Kind, ev.Name = ref.Kind, ref.Name
	} else if m, err := meta.Accessor(regarding); err == nil {
		ev.Kind, ev.Name = regarding.GetObjectKind().GroupVersionKind().Kind, m.GetName()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// Last returns the last Event recorded (false: none yet).
func (r *Recorder) Last() (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return Event{}, false
	}
	return r.events[len(r.events)-1], true
}
