package dataplane

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// A Process/Connect on a PTY whose WebSocket a stream of this gateway
// process already holds follows that stream: execd allows one WebSocket
// per terminal, and envd lets several streams follow one terminal, so the
// holding stream's relay hands every piece of output it sends to its own
// client to the followers as well, and its end (the shell's exit) too. A
// follower does not hold the terminal: when the holding stream ends first
// (its client left, its deadline, a drain), the follower's stream ends
// with PTY_ATTACHED, saying to connect again, which then holds it. On
// another replica the Connect stays PTY_ATTACHED.

// maxPTYFollowerBytes bounds the output waiting for one follower's client
// (bytes). The holding stream never waits for a follower: one that falls
// this far behind is ended (PTY_ATTACHED, "fell behind"), so a follower
// that stops reading costs the gateway at most this, and the terminal and
// its holding stream nothing.
const maxPTYFollowerBytes = 1 << 20

// ptyHold is a terminal WebSocket that a stream of this gateway process
// holds (ptyHolds), with the streams that follow its output.
type ptyHold struct {
	conn *execd.PTYConn

	mu        sync.Mutex
	followers map[*ptyFollower]struct{}
	// over is set once the holding stream has ended its relay: no
	// follower is taken any more.
	over bool
}

// ptyFollower is one stream following a held terminal: the output not
// yet sent to its client (queued: the bytes taken or waiting, counted
// until sent, at most maxPTYFollowerBytes) and, once set, how its stream
// ends.
type ptyFollower struct {
	wake chan struct{} // buffered 1: queue or end changed

	mu     sync.Mutex
	queue  [][]byte
	queued int
	ended  bool
	end    *envd.EndEvent // the shell's end, or
	err    *Error         // why the stream ends without one
}

// signal wakes the follower's relay (never blocks).
func (f *ptyFollower) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// take returns the queued output and the end (ended false: not yet). The
// output taken stays counted in queued until sent reports it.
func (f *ptyFollower) take() (out [][]byte, ended bool, end *envd.EndEvent, err *Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out, f.queue = f.queue, nil
	return out, f.ended, f.end, f.err
}

// sent gives back n bytes of taken output, sent to the client.
func (f *ptyFollower) sent(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued -= n
}

// stop ends f with end or err unless it has ended; it reports whether it
// did.
func (f *ptyFollower) stop(end *envd.EndEvent, err *Error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return false
	}
	f.ended, f.end, f.err = true, end, err
	return true
}

// follow adds a follower to p; nil once the holding stream's relay is
// over.
func (p *ptyHold) follow() *ptyFollower {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over {
		return nil
	}
	f := &ptyFollower{wake: make(chan struct{}, 1)}
	if p.followers == nil {
		p.followers = map[*ptyFollower]struct{}{}
	}
	p.followers[f] = struct{}{}
	return f
}

// unfollow removes f from p.
func (p *ptyHold) unfollow(f *ptyFollower) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.followers, f)
}

// publish hands b, a piece of output the holding stream is sending, to
// every follower (a copy, shared by them: b is the holder's; nil p: no
// hold, nothing to do). A follower
// whose queue would go over maxPTYFollowerBytes is ended instead.
func (p *ptyHold) publish(b []byte) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.followers) == 0 {
		return
	}
	c := append([]byte(nil), b...)
	for f := range p.followers {
		f.mu.Lock()
		switch {
		case f.ended:
		case f.queued+len(c) > maxPTYFollowerBytes:
			f.ended, f.err = true, fail(CodePTYAttached, "this stream fell over "+strconv.Itoa(maxPTYFollowerBytes>>10)+
				" KiB behind the stream that holds the terminal and was ended; the terminal keeps running: connect again")
			delete(p.followers, f)
		default:
			f.queue = append(f.queue, c)
			f.queued += len(c)
		}
		f.mu.Unlock()
		f.signal()
	}
}

// finish ends p's relay: every follower ends after its queued output,
// with end (the shell's end event) or, when end is nil, with PTY_ATTACHED
// (the holding stream left while the terminal runs on). Later calls, and
// a nil p, do nothing.
func (p *ptyHold) finish(end *envd.EndEvent) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over {
		return
	}
	p.over = true
	var err *Error
	if end == nil {
		err = fail(CodePTYAttached, "the stream that held the terminal's connection through this gateway ended, and this "+
			"stream followed it; the terminal keeps running: connect again to hold it")
	}
	for f := range p.followers {
		if f.stop(end, err) {
			f.signal()
		}
	}
	p.followers = nil
}

// followPTY serves Process/Connect on a PTY process whose WebSocket hold
// (a stream of this gateway process's) holds: the start event, then the
// output the holding stream relays from now on, until the shell's end
// event, the holding stream's end (PTY_ATTACHED), the client leaving, the
// call's timeout (COMMAND_TIMEOUT; the terminal keeps running) or the
// drain.
func (h *Handler) followPTY(w http.ResponseWriter, r *http.Request, pid uint32, hold *ptyHold, call streamCall) *Error {
	ctx := r.Context()
	f := hold.follow()
	if f == nil {
		return ptyAttached(pid, "a stream through this gateway that is ending")
	}
	defer hold.unfollow(f)
	sw := connect.NewStreamWriter(w)
	if err := sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{Start: &envd.StartEvent{PID: pid}}}); err != nil {
		return fail(CodeCanceled, "the client closed the stream")
	}
	deadlineC, stop := deadlineTimer(call.deadline())
	defer stop()
	ka := time.NewTimer(call.keepalive)
	defer ka.Stop()
	for {
		select {
		case <-ctx.Done():
			return fail(CodeCanceled, "the client closed the stream")
		case <-ending(ctx):
			return endStream(sw, drainingError("ended this stream at the end of its drain grace; the terminal keeps running in the sandbox"))
		case <-deadlineC:
			return endStream(sw, fail(CodeCommandTimeout, "the connection ran past its "+call.timeout.String()+" timeout; the terminal keeps running"))
		case <-ka.C:
			_ = sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{KeepAlive: &envd.KeepAlive{}}})
			ka.Reset(call.keepalive)
		case <-f.wake:
			out, ended, end, e := f.take()
			for _, b := range out {
				_ = sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{Data: &envd.DataEvent{PTY: b}}})
				f.sent(len(b))
			}
			if len(out) > 0 {
				ka.Reset(call.keepalive)
			}
			if !ended {
				continue
			}
			if end != nil {
				_ = sw.Send(envd.ConnectResponse{Event: envd.ProcessEvent{End: end}})
				_ = sw.Close(nil)
				return nil
			}
			return endStream(sw, e)
		}
	}
}
