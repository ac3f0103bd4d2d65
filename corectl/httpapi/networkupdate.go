package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/createnet"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/corectl/wire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CodeInternal: corectl broke one of its own invariants (a bug); nothing
// was written.
const CodeInternal = "internal_error"

// updateNetwork answers E2B's PUT /sandboxes/{sandboxID}/network
// (SandboxNetworkUpdateConfig, what the SDKs' updateNetwork sends): the
// body is resolved as a create's network is (createnet.ResolveCreate)
// against the egress defaults of the sandbox's template as they are now
// (none for a sandbox without a recorded template), so that a member left
// out is cleared back to what a create without it gets, and written
// through the egress engine (PutAllowlist: read-back, LKG, conflict rules
// as sandgate's PUT). Verified: 204 without a body. Refusals before any
// write: 400 bad_request (the body, a domain name, rules, egressProxy) or
// network_cidr_invalid; the sandbox's errors as sandgate's PUT; a failed
// write: the EgressFailure of its code.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, ch *ClusterHandle, ns, id string, body []byte) {
	upd, err := wire.DecodeNetworkUpdate(body)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	tpl, err := s.sandboxTemplateNetwork(ctx, ch, ns, id)
	if err != nil {
		if errors.Is(err, template.ErrInvalidID) || errors.Is(err, template.ErrUnavailable) {
			s.templateError(w, r, err)
			return
		}
		s.sandboxError(w, r, err)
		return
	}
	in, err := createnet.ResolveCreate(tpl, &createnet.Request{AllowOut: upd.AllowOut, DenyOut: upd.DenyOut}, upd.AllowInternetAccess)
	if err != nil {
		var ce *createnet.Error
		if errors.As(err, &ce) {
			s.fail(w, r, http.StatusBadRequest, ce.Code, ce.Message)
			return
		}
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	allow, err1 := cidr.NormalizePrefixes(in.Egress)
	except, err2 := cidr.NormalizePrefixes(in.EgressExcept)
	if err := errors.Join(err1, err2); err != nil {
		s.fail(w, r, http.StatusInternalServerError, CodeInternal, "the resolved egress: "+err.Error())
		return
	}
	s.writeEgressPut(w, r, ch, ns, id, func(ctx context.Context) (*egress.Result, error) {
		return ch.Egress.PutAllowlist(ctx, ns, id, egress.Allowlist{Allow: allow, Except: except})
	}, true)
}

// sandboxTemplateNetwork returns the egress and ingress defaults of the
// template sandbox ns/id was created from (lifecycle.AnnotationTemplateID
// on its BatchSandbox), as the template store holds them now; a sandbox
// without the annotation, or a template without stored defaults, has none.
// Errors: sandbox.ErrInvalidID, sandbox.ErrNotFound,
// sandbox.ErrUnavailable, the template store's errors.
func (s *Server) sandboxTemplateNetwork(ctx context.Context, ch *ClusterHandle, ns, id string) (template.Network, error) {
	// A malformed ID is the caller's mistake (400, as on every other
	// sandbox route), never sent to the apiserver, whose client refuses a
	// name with a "/" as an error of its own.
	if err := sandbox.ValidateID(id); err != nil {
		return template.Network{}, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandbox.GVK)
	if err := ch.Egress.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return template.Network{}, sandbox.ErrNotFound
		}
		return template.Network{}, errors.Join(sandbox.ErrUnavailable, err)
	}
	tid := u.GetAnnotations()[lifecycle.AnnotationTemplateID]
	if tid == "" || s.Templates == nil {
		return template.Network{}, nil
	}
	v, err := s.Templates.Get(ctx, tid)
	switch {
	case err == nil:
		return v.Network, nil
	case errors.Is(err, template.ErrNotFound):
		return template.Network{}, nil
	default:
		return template.Network{}, err
	}
}
