package daemon

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// leaderEvents is the Events recorder provider of a cluster's leader
// election (controller-runtime's leaderelection.NewResourceLock): the
// Lease's events ("<identity> became leader", "stopped leading") go
// through the cluster's one events.k8s.io recorder "corectl"
// (clusterParts.events), reason LeaderElection, instead of a broadcaster
// the manager would otherwise start for them alone (seven goroutines and
// their event queues per cluster; docs/benchmarks.md "Many clusters").
type leaderEvents struct{ rec events.EventRecorder }

// GetEventRecorderFor returns the adapter of the old events API that the
// resource lock records with.
func (l leaderEvents) GetEventRecorderFor(string) record.EventRecorder { return leaderRecorder(l) }

// GetEventRecorder returns nil: the resource lock records through
// GetEventRecorderFor only (controller-runtime v0.25), and nothing else is
// handed this provider.
func (l leaderEvents) GetEventRecorder(string) recorder.EventRecorder { return nil }

// leaderRecorder records the old API's calls as events.k8s.io Events with
// the reason as their action.
type leaderRecorder struct{ rec events.EventRecorder }

// Event records message.
func (l leaderRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	l.rec.Eventf(obj, nil, eventtype, reason, reason, "%s", message)
}

// Eventf records the formatted message.
func (l leaderRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.rec.Eventf(obj, nil, eventtype, reason, reason, "%s", fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf records the formatted message (the annotations are not
// kept: the events API has none).
func (l leaderRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	l.Eventf(obj, eventtype, reason, messageFmt, args...)
}
