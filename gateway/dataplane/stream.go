package dataplane

import (
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
)

// What the server streams (Process/Start and Connect, Filesystem/WatchDir)
// share at their end.

// endStream ends the server stream sw, which has started, with e as its
// end-stream error (the Connect code e's code maps to), and returns e.
func endStream(sw *connect.StreamWriter, e *Error) *Error {
	_ = sw.Close(&connect.Error{Code: e.Code.StreamCode(true), Message: e.Error()})
	return e
}

// deadlineTimer returns a channel that receives at deadline (nil for the
// zero time: no deadline) and the function that stops its timer.
func deadlineTimer(deadline time.Time) (<-chan time.Time, func()) {
	if deadline.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(deadline))
	return t.C, func() { t.Stop() }
}

// deadline is when the call's Connect-Timeout-Ms ends it, counted from
// now (the zero time: no timeout).
func (c streamCall) deadline() time.Time {
	if c.timeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(c.timeout)
}
