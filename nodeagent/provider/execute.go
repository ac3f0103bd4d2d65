package provider

import (
	"context"
	"errors"

	"github.com/sandgate/sandgate/node/proto"
)

// Execute runs the decoded, valid request req once on p under ctx and
// returns its response (ID and ConnectionID copied from req) and the
// provider's error, if any, for the caller's log.
//
// An operation p does not declare is answered proto.ErrUnsupported with
// the declaration's evidence, without calling p. A success carries the
// operation's result member; a failure carries CodeOf(err), and a failed
// create also carries the *Error's Receipt when there is one.
func Execute(ctx context.Context, p Provider, req *proto.Request) (*proto.Response, error) {
	resp := &proto.Response{ID: req.ID, ConnectionID: req.ConnectionID}
	if u, ok := p.Declaration().Unsupported(req.Operation); ok {
		resp.ErrorCode, resp.Unsupported = proto.ErrUnsupported, &u
		return resp, nil
	}
	c := Call{Reference: req.Reference, DeploymentGeneration: req.DeploymentGeneration}
	var err error
	switch req.Operation {
	case proto.OpCreate:
		resp.Info, err = ptr(p.Create(ctx, c, *req.Bootstrap))
	case proto.OpInfo:
		resp.Info, err = ptr(p.GetInfo(ctx, c))
	case proto.OpRenew:
		resp.Info, err = ptr(p.Renew(ctx, c))
	case proto.OpKill:
		err = p.Kill(ctx, c)
	case proto.OpCommand:
		resp.Command, err = ptr(p.RunCommand(ctx, c, *req.Command))
	case proto.OpObserve:
		resp.Sample, err = ptr(p.Observe(ctx, c, *req.Observation))
	case proto.OpInitial:
		resp.Compute, err = ptr(p.Initial(ctx, c))
	case proto.OpNewCompute:
		resp.Compute, err = ptr(p.NewCompute(ctx, c, *req.Generation, req.Snapshot))
	case proto.OpCompute:
		resp.State, err = ptr(p.GetCompute(ctx, c, *req.Compute))
	case proto.OpKillCompute:
		err = p.KillCompute(ctx, c, *req.Compute)
	case proto.OpResumeCompute:
		resp.State, err = ptr(p.ResumeCompute(ctx, c, *req.Compute))
	case proto.OpCommandCompute:
		resp.Command, err = ptr(p.RunCommandCompute(ctx, c, *req.Compute, *req.Command))
	case proto.OpSuspend:
		resp.State, err = ptr(p.Suspend(ctx, c, *req.Suspend))
	case proto.OpResume:
		resp.State, err = ptr(p.Resume(ctx, c, *req.Resume))
	case proto.OpDeleteSnapshot:
		err = p.DeleteSnapshot(ctx, c, *req.Snapshot)
	default:
		resp.ErrorCode = proto.ErrInvalid
		return resp, nil
	}
	if err != nil {
		failed := &proto.Response{ID: req.ID, ConnectionID: req.ConnectionID, ErrorCode: CodeOf(err)}
		var pe *Error
		if errors.As(err, &pe) && req.Operation == proto.OpCreate && pe.Receipt != nil {
			failed.Info = pe.Receipt
		}
		return failed, err
	}
	return resp, nil
}

// ptr returns a pointer to v, or nil when err is set.
func ptr[T any](v T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return &v, nil
}
