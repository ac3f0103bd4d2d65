// Package createnet resolves a sandbox's initial network policy at
// creation from its template's defaults and the create request's optional
// network object, exactly as the table of spec §3.1.1 II says:
//
//   - allowOut: normalised (single IP → /32, mask-aligned, deduplicated,
//     sorted); becomes the egress allowlist;
//   - allowPublicTraffic: true adds 0.0.0.0/0 to allowOut (the union);
//     false or absent adds nothing;
//   - egress (native, [{cidr}]): wins over allowOut and allowPublicTraffic;
//   - ingress (extension, [{cidr, description?}]): the ingress allowlist;
//   - denyOut, egressProxy, maskRequestHost, rules: silently ignored;
//   - per dimension, an absent or empty value inherits the template
//     (a network object that is not passed inherits both);
//   - an invalid CIDR is a 400 with network_cidr_invalid (allowOut,
//     egress) or ingress_cidr_invalid (ingress).
//
// The result is a copy: later template changes do not reach it.
package createnet

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/template"
	"github.com/sandgate/sandgate/corectl/wire"
)

// Error codes of the flat E2B error envelope (spec §3.1.1 II).
const (
	// CodeNetworkCIDRInvalid: an allowOut or egress entry is not an IPv4
	// CIDR.
	CodeNetworkCIDRInvalid = "network_cidr_invalid"
	// CodeIngressCIDRInvalid: an ingress entry is not an IPv4 CIDR.
	CodeIngressCIDRInvalid = "ingress_cidr_invalid"
	// CodeBadRequest: the network object is not JSON of the right shape
	// (a list that is not a list, a CIDR that is not a string).
	CodeBadRequest = "bad_request"
)

// Error is a resolution failure; Code is one of the Code* constants.
type Error struct {
	// Code is the stable error code.
	Code string
	// Message says which field and entry.
	Message string
	// Err is the cause when it has a class callers may test for
	// (strictjson's ErrMalformed, ErrDuplicateMember, ErrTooDeep); nil
	// otherwise. Message already says what it says.
	Err error
}

// Error implements error: "<code>: <message>".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// PublicTraffic is the CIDR allowPublicTraffic adds.
const PublicTraffic = "0.0.0.0/0"

// Request is the create request's network object (package wire).
type Request = wire.Network

// Source says where a dimension of the initial network came from.
type Source string

// Sources.
const (
	// FromTemplate: inherited from the template defaults.
	FromTemplate Source = "template"
	// FromRequest: the request's value.
	FromRequest Source = "request"
)

// Initial is a sandbox's initial network policy.
type Initial struct {
	// Ingress is the initial ingress allowlist (normalised).
	Ingress []v1alpha1.IngressRule `json:"ingress"`
	// Egress is the initial egress allowlist (normalised CIDRs).
	Egress []string `json:"egress"`
	// IngressSource says where Ingress came from.
	IngressSource Source `json:"ingressSource"`
	// EgressSource says where Egress came from.
	EgressSource Source `json:"egressSource"`
}

// Decode decodes the network object of a create request with
// wire.DecodeNetwork (empty input or JSON null: not passed, nil, nil) and
// turns its refusal into an *Error with CodeBadRequest and the same
// message; Err is strictjson's error where the object broke one of its
// rules.
func Decode(raw []byte) (*Request, error) {
	r, err := wire.DecodeNetwork(raw)
	var ne *wire.NetworkError
	if errors.As(err, &ne) {
		return nil, &Error{Code: CodeBadRequest, Message: ne.Message, Err: ne.Err}
	}
	return r, err
}

// Resolve returns the initial network policy for a sandbox created from a
// template with defaults tpl and the request's network object req (nil
// when not passed). Every CIDR given is validated, including an allowOut
// that egress overrides. Errors are *Error.
func Resolve(tpl template.Network, req *Request) (*Initial, error) {
	out := &Initial{
		Ingress: slices.Clone(tpl.Ingress), Egress: tpl.EgressCIDRs(),
		IngressSource: FromTemplate, EgressSource: FromTemplate,
	}
	if out.Ingress == nil {
		out.Ingress = []v1alpha1.IngressRule{}
	}
	if req == nil {
		return out, nil
	}
	allowOut, err := cidr.Normalize(req.AllowOut)
	if err != nil {
		return nil, cidrError(CodeNetworkCIDRInvalid, "allowOut", err)
	}
	native := make([]string, len(req.Egress))
	for i, e := range req.Egress {
		native[i] = e.CIDR
	}
	egress, err := cidr.Normalize(native)
	if err != nil {
		return nil, cidrError(CodeNetworkCIDRInvalid, "egress", err)
	}
	in := make([]v1alpha1.IngressRule, len(req.Ingress))
	for i, e := range req.Ingress {
		if len(e.Description) > ingressallow.MaxDescription {
			return nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("network.ingress[%d].description is longer than %d bytes", i, ingressallow.MaxDescription)}
		}
		in[i] = v1alpha1.IngressRule{CIDR: e.CIDR, Description: e.Description}
	}
	ingress, err := ingressallow.NormalizeRules(in)
	if err != nil {
		return nil, cidrError(CodeIngressCIDRInvalid, "ingress", err)
	}
	public := req.AllowPublicTraffic != nil && *req.AllowPublicTraffic
	switch {
	case len(egress) > 0:
		out.Egress, out.EgressSource = egress, FromRequest
	case len(allowOut) > 0 || public:
		set := allowOut
		if public {
			if set, err = cidr.Normalize(append(slices.Clone(allowOut), PublicTraffic)); err != nil {
				return nil, cidrError(CodeNetworkCIDRInvalid, "allowOut", err)
			}
		}
		out.Egress, out.EgressSource = set, FromRequest
	}
	if len(ingress) > 0 {
		out.Ingress, out.IngressSource = ingress, FromRequest
	}
	return out, nil
}

func cidrError(code, field string, err error) *Error {
	var ee *cidr.EntryError
	if errors.As(err, &ee) {
		return &Error{Code: code, Message: fmt.Sprintf("network.%s[%d]: %s", field, ee.Index, ee.Reason)}
	}
	return &Error{Code: code, Message: fmt.Sprintf("network.%s: %s", field, err.Error())}
}
