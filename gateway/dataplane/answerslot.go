package dataplane

import (
	"context"
	"net/http"
	"sync"
)

// smallMessage is the largest Connect request message a unary call reads
// before it holds an answer slot (bytes): every message of the unary
// operations (a path or two, a pid, a signal) fits many times over. A
// larger or unsized body takes the slot before it is read, as its memory
// is then worth bounding.
const smallMessage = 64 << 10

// answerSlot is a unary call's slot of the upstream bound, taken when the
// call first needs it: when execd's first answer has arrived and is about
// to be read (execd.Target.Admit), or before a request message that is not
// small is read. A call waiting for execd (its pending request, the
// fixed entry, execd's own work) holds none, so an honest sandbox's
// parallel calls do not queue behind each other's round trips: only the
// reading and decoding of answers, the part whose memory the bound is for,
// is counted. Once taken, the slot is held until the call ends (end).
type answerSlot struct {
	h   *Handler
	rq  *request
	ctx context.Context

	mu      sync.Mutex
	release func()
	busy    *Error // GATEWAY_BUSY when the wait for a slot ran out
	ended   bool
}

// take takes the slot, waiting up to UpstreamWait, unless it is held. It
// returns GATEWAY_BUSY (also kept in busy) when no slot came; after end it
// takes nothing.
func (s *answerSlot) take() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.busy != nil:
		return s.busy
	case s.release != nil || s.ended:
		return nil
	}
	s.release, s.busy = s.h.admitUpstream(s.ctx, s.rq, s.h.cfg.UpstreamWait)
	if s.busy != nil {
		return s.busy
	}
	return nil
}

// end gives the slot back, if one was taken, and returns GATEWAY_BUSY when
// a wait for it ran out (the call's error then, whatever the operation made
// of it).
func (s *answerSlot) end() *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.release != nil {
		s.release()
		s.release = nil
	}
	return s.busy
}

// giveBack returns the slot now, if one was taken, for a call whose rest
// waits on the sandbox instead of reading answers (a stdin write into a
// FIFO the command does not read may wait a minute): it must not keep a
// slot of the gateway's bound meanwhile. A later answer read with the
// call's target takes one again.
func (s *answerSlot) giveBack() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// admitLazily gives rq's execd calls the slot s and takes it at once when
// r's message is not small (or has no length).
func (s *answerSlot) admitLazily(r *http.Request) *Error {
	s.rq.target.Admit = s.take
	if r.ContentLength < 0 || r.ContentLength > smallMessage {
		if s.take() != nil {
			return s.busy
		}
	}
	return nil
}
