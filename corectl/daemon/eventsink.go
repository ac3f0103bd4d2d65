package daemon

import (
	"context"
	"sync/atomic"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// EventsFlushWait bounds how long Run, once every cluster's manager has
// stopped, waits for the Events still on their way (the Lease's "stopped
// leading" among them) to reach each cluster's apiserver before it shuts
// the cluster's Events broadcaster down and cancels them.
const EventsFlushWait = 5 * time.Second

// flushQuiet is how long no Event may be recorded or start being written,
// with none being written, before flushSink.flush counts the Events as
// through; flushPoll is the period of its checks.
const (
	flushQuiet = 100 * time.Millisecond
	flushPoll  = 10 * time.Millisecond
)

// flushSink is the events.EventSink of a cluster's Events broadcaster: it
// counts the Events recorded (through notingRecorder), the writes to the
// apiserver started and those in progress, so that Run can let the last
// Events through before it shuts the broadcaster down. client-go's
// events.k8s.io recorder queues each Event from a goroutine of its own and
// its broadcaster writes each from another, with no way to wait for them:
// an Event recorded as the managers stop (the Lease's "stopped leading")
// was otherwise dropped.
type flushSink struct {
	events.EventSink
	noted, started, inFlight atomic.Int64
}

func (s *flushSink) enter() func() {
	s.started.Add(1)
	s.inFlight.Add(1)
	return func() { s.inFlight.Add(-1) }
}

// Create creates event.
func (s *flushSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.enter()()
	return s.EventSink.Create(ctx, event)
}

// Update updates event.
func (s *flushSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.enter()()
	return s.EventSink.Update(ctx, event)
}

// Patch patches oldEvent with data.
func (s *flushSink) Patch(ctx context.Context, oldEvent *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.enter()()
	return s.EventSink.Patch(ctx, oldEvent, data)
}

// flush waits until, for flushQuiet, no Event was recorded, no write
// started and none is in progress, or until wait has passed; it reports
// whether the Events went through within wait. An Event waiting to be
// written again (its apiserver refused it for a while) is not waited for.
func (s *flushSink) flush(wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	t := time.NewTicker(flushPoll)
	defer t.Stop()
	mark := func() int64 { return s.noted.Load() + s.started.Load() }
	last, since := mark(), time.Now()
	for time.Now().Before(deadline) {
		<-t.C
		n := mark()
		switch {
		case n != last || s.inFlight.Load() > 0:
			last, since = n, time.Now()
		case time.Since(since) >= flushQuiet:
			return true
		}
	}
	return false
}

// notingRecorder records through the recorder of the cluster's Events
// broadcaster while Run runs (set), counting each Event in sink.noted; it
// drops Events while there is none (before Run and after it), as a
// broadcaster that is not recording does.
type notingRecorder struct {
	rec  atomic.Pointer[events.EventRecorder]
	sink *flushSink
}

// set records through rec from now on; nil drops Events.
func (n *notingRecorder) set(rec events.EventRecorder) {
	if rec == nil {
		n.rec.Store(nil)
		return
	}
	n.rec.Store(&rec)
}

// Eventf records an Event (events.EventRecorder).
func (n *notingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	rec := n.rec.Load()
	if rec == nil {
		return
	}
	n.sink.noted.Add(1)
	(*rec).Eventf(regarding, related, eventtype, reason, action, note, args...)
}
