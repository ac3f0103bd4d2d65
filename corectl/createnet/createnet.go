// Package createnet resolves a sandbox's initial network policy at
// creation from its template's defaults and the create request's optional
// network object, exactly as the table of spec §3.1.1 II says:
//
//   - allowOut: normalised (single IP → /32, mask-aligned, deduplicated,
//     sorted); becomes the egress allowlist;
//   - allowPublicTraffic: never an egress rule (it is about who may reach
//     the sandbox's URLs); wire.DecodeNetwork refuses false;
//   - egress (native, [{cidr}]): wins over allowOut;
//   - denyOut, and the create's allow_internet_access false (E2B: "the
//     same as denyOut 0.0.0.0/0"): carved out of the egress allowlist
//     with ipBlock.except (egress.Carve), unless the allowlist is the
//     request's allowOut, which E2B ranks above denyOut;
//   - ingress (extension, [{cidr, description?}]): the ingress allowlist;
//   - a domain name in allowOut or denyOut: refused (a NetworkPolicy
//     matches IP ranges only); egressProxy, maskRequestHost, rules,
//     httpsPorts: refused unless empty (wire.DecodeNetwork);
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
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/egress"
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
	// (strictjson's ErrMalformed, ErrDuplicateMember, ErrTooDeep, or a
	// *wire.UnsupportedError); nil otherwise. Message already says what it
	// says.
	Err error
}

// Error implements error: "<code>: <message>".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// domainName matches host-name syntax: dot-separated labels, the first
// optionally "*", at least one dot.
var domainName = regexp.MustCompile(`^(\*|[A-Za-z0-9-]{1,63})(\.[A-Za-z0-9-]{1,63})+\.?$`)

// Internet is the CIDR allow_internet_access false denies (E2B's
// definition: the same as denyOut ["0.0.0.0/0"]).
const Internet = "0.0.0.0/0"

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
	// EgressExcept is what is carved out of Egress (normalised CIDRs, each
	// strictly inside an Egress CIDR; egress.Carve's normal form): the
	// policy's ipBlock.except. Empty when nothing is denied.
	EgressExcept []string `json:"egressExcept"`
	// IngressSource says where Ingress came from.
	IngressSource Source `json:"ingressSource"`
	// EgressSource says where Egress came from.
	EgressSource Source `json:"egressSource"`
}

// Decode decodes the network object of a create request with
// wire.DecodeNetwork (empty input or JSON null: not passed, nil, nil) and
// turns its refusal into an *Error with CodeBadRequest and the same
// message; Err is strictjson's error where the object broke one of its
// rules, or the *wire.UnsupportedError.
func Decode(raw []byte) (*Request, error) {
	r, err := wire.DecodeNetwork(raw)
	var ne *wire.NetworkError
	if errors.As(err, &ne) {
		return nil, &Error{Code: CodeBadRequest, Message: ne.Message, Err: ne.Err}
	}
	var ue *wire.UnsupportedError
	if errors.As(err, &ue) {
		return nil, &Error{Code: CodeBadRequest, Message: ue.Error(), Err: ue}
	}
	return r, err
}

// Resolve returns the initial network policy for a sandbox created from a
// template with defaults tpl and the request's network object req (nil
// when not passed); it is ResolveCreate without allow_internet_access.
func Resolve(tpl template.Network, req *Request) (*Initial, error) {
	return ResolveCreate(tpl, req, nil)
}

// ResolveCreate returns the initial network policy for a sandbox created
// from a template with defaults tpl, the request's network object req
// (nil when not passed) and the create's allow_internet_access (nil: not
// given). Every CIDR given is validated, including an allowOut that
// egress overrides and a denyOut that allowOut overrides. Errors are
// *Error.
func ResolveCreate(tpl template.Network, req *Request, allowInternetAccess *bool) (*Initial, error) {
	out := &Initial{
		Ingress: slices.Clone(tpl.Ingress), Egress: tpl.EgressCIDRs(), EgressExcept: []string{},
		IngressSource: FromTemplate, EgressSource: FromTemplate,
	}
	if out.Ingress == nil {
		out.Ingress = []v1alpha1.IngressRule{}
	}
	var deny []string
	if allowInternetAccess != nil && !*allowInternetAccess {
		deny = append(deny, Internet)
	}
	fromAllowOut := false
	if req != nil {
		if err := refuseDomains(req); err != nil {
			return nil, err
		}
		allowOut, err := cidr.Normalize(req.AllowOut)
		if err != nil {
			return nil, cidrError(CodeNetworkCIDRInvalid, "allowOut", err)
		}
		denyOut, err := cidr.Normalize(req.DenyOut)
		if err != nil {
			return nil, cidrError(CodeNetworkCIDRInvalid, "denyOut", err)
		}
		deny = append(deny, denyOut...)
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
		switch {
		case len(egress) > 0:
			out.Egress, out.EgressSource = egress, FromRequest
		case len(allowOut) > 0:
			out.Egress, out.EgressSource, fromAllowOut = allowOut, FromRequest, true
		}
		if len(ingress) > 0 {
			out.Ingress, out.IngressSource = ingress, FromRequest
		}
	}
	if len(deny) > 0 && !fromAllowOut {
		allow, err := cidr.NormalizePrefixes(out.Egress)
		if err != nil {
			return nil, cidrError(CodeNetworkCIDRInvalid, "egress", err)
		}
		denied, err := cidr.NormalizePrefixes(deny)
		if err != nil {
			return nil, cidrError(CodeNetworkCIDRInvalid, "denyOut", err)
		}
		list := egress.Carve(allow, denied)
		out.Egress, out.EgressExcept = cidr.Strings(list.Allow), cidr.Strings(list.Except)
		if out.EgressSource == FromTemplate && (req != nil || allowInternetAccess != nil) {
			out.EgressSource = FromRequest
		}
	}
	return out, nil
}

// refuseDomains refuses a domain name in allowOut or denyOut: E2B allows
// them in allowOut, but a NetworkPolicy matches IP ranges only, so
// sandgate cannot honour one. An entry counts as a domain when it is
// host-name syntax (dot-separated labels of letters, digits and '-',
// optionally "*." first) with a letter and a dot ("example.com",
// "*.example.com"); other invalid entries are left to the CIDR check.
func refuseDomains(req *Request) error {
	if len(req.AllowOut)+len(req.DenyOut) > 2*cidr.MaxEntries {
		return nil // the CIDR check refuses the count
	}
	for _, f := range []struct {
		name    string
		entries []string
	}{{"allowOut", req.AllowOut}, {"denyOut", req.DenyOut}} {
		for i, e := range f.entries {
			if domainName.MatchString(e) && strings.ContainsFunc(e, unicode.IsLetter) {
				ue := &wire.UnsupportedError{
					Field: fmt.Sprintf("network.%s[%d]", f.name, i),
					Why:   "domain names: sandgate enforces egress with a Kubernetes NetworkPolicy, which matches IP ranges only; give CIDRs or IP addresses",
				}
				return &Error{Code: CodeBadRequest, Message: ue.Error(), Err: ue}
			}
		}
	}
	return nil
}

func cidrError(code, field string, err error) *Error {
	var ee *cidr.EntryError
	if errors.As(err, &ee) {
		return &Error{Code: code, Message: fmt.Sprintf("network.%s[%d]: %s", field, ee.Index, ee.Reason)}
	}
	return &Error{Code: code, Message: fmt.Sprintf("network.%s: %s", field, err.Error())}
}
