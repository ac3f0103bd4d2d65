package hub

import (
	"context"

	"github.com/sandgate/sandgate/node/proto"
)

// Kinds of an Observation (Observation.Kind).
const (
	// ObservedPresent: the node answered the observation with a success:
	// the exact reference (or compute instance) exists, in the state the
	// Observation's Result carries.
	ObservedPresent = "present"
	// ObservedAbsent: the node answered the observation not_found: it does
	// not know the exact reference (or compute instance) now. For a kill
	// that is what the kill would have left; for a create it means the
	// attempt left nothing (or something removed it since).
	ObservedAbsent = "absent"
	// ObservedUnknown: the observation's own outcome proves nothing (no
	// answer, another failure, a refusal before sending); observe again
	// later, never replay.
	ObservedUnknown = "unknown"
	// ObservedUnobservable: the operation has no read-only observation of
	// its exact attempt (command, command_compute, observe, initial,
	// new_compute, delete_snapshot); nothing was sent.
	ObservedUnobservable = "unobservable"
)

// Observation is what Core learnt by observing an operation whose
// outcome was unknown (spec "Provider requests": after a timeout, a lost
// response or a disconnect Core never replays a mutating operation and
// observes the original one instead).
type Observation struct {
	// Kind is one of the Observed* constants.
	Kind string
	// Result is the observing operation's Result (its request, response
	// and outcome); nil when Kind is ObservedUnobservable or the
	// observation was refused before it was sent (Refusal).
	Result *Result
	// Refusal is the RefusalCode of a Dispatch error of the observing
	// operation (the node went offline, too many pending, …); "" otherwise.
	Refusal string
}

// observing returns the read-only operation that observes original's
// exact attempt, and false when there is none: info on the same reference
// for create, info, renew, kill and suspend; compute on the same compute
// instance for compute, kill_compute and resume_compute; an observe-only
// resume of the same snapshot for resume. It keeps the deployment
// generation, the reference and the time budget of original.
func observing(original proto.Request) (proto.Request, bool) {
	obs := proto.Request{DeploymentGeneration: original.DeploymentGeneration, TimeoutMS: original.TimeoutMS,
		Reference: original.Reference}
	switch original.Operation {
	case proto.OpCreate, proto.OpInfo, proto.OpRenew, proto.OpKill, proto.OpSuspend:
		obs.Operation = proto.OpInfo
	case proto.OpCompute, proto.OpKillCompute, proto.OpResumeCompute:
		if original.Compute == nil {
			return proto.Request{}, false
		}
		ref := *original.Compute
		obs.Operation, obs.Compute = proto.OpCompute, &ref
	case proto.OpResume:
		if original.Resume == nil {
			return proto.Request{}, false
		}
		obs.Operation, obs.Resume = proto.OpResume, &proto.Resume{Snapshot: original.Resume.Snapshot, ObserveOnly: true}
	default:
		return proto.Request{}, false
	}
	return obs, true
}

// ObserveOutcome observes the operation original (as sent: the Request of
// a Result whose outcome was unknown) on node nodeID, with the read-only
// operation of its exact reference (see observing), and returns the
// observation. It never sends original again. An operation without a
// read-only observation is ObservedUnobservable and nothing is sent; a
// Dispatch refusal is ObservedUnknown with its RefusalCode.
func (h *Hub) ObserveOutcome(ctx context.Context, nodeID string, original proto.Request) *Observation {
	req, ok := observing(original)
	if !ok {
		return &Observation{Kind: ObservedUnobservable}
	}
	res, err := h.Dispatch(ctx, nodeID, req)
	if err != nil {
		return &Observation{Kind: ObservedUnknown, Refusal: RefusalCode(err)}
	}
	o := &Observation{Kind: ObservedUnknown, Result: res}
	switch {
	case res.Outcome == proto.OutcomeSuccess:
		o.Kind = ObservedPresent
	case res.Outcome == proto.OutcomeFailed && res.ErrorCode == proto.ErrNotFound:
		o.Kind = ObservedAbsent
	}
	return o
}
