// Package portroute decides where a sandbox port request goes: a request
// to <port>-<sandboxID>.<domain> (package sandboxhost) for a port other
// than envd's is forwarded to the sandbox's cluster's fixed entry at
// /<sandboxID>/<port>/<path> (the OpenSandbox Ingress's URI mode, spec
// §4.4). This package finds the cluster and who may reach the port; the
// forwarding itself is Caddy's reverse_proxy (caddymodules/e2bdataplane).
//
// Who may reach a port follows E2B: a sandbox created with
// network.allowPublicTraffic false needs its traffic access token in the
// e2b-traffic-access-token header; any other sandbox's ports are open.
//
//   - With the header: the token must verify with the gateway's token keys
//     (no call to corectl), carry aud "traffic" (token.AudienceTraffic)
//     and name the Host's sandbox; its credential, re-read and enabled,
//     names the cluster; the authorizer (corectl, cached about a second)
//     must still allow that credential the sandbox, so a deleted or
//     expired sandbox's token stops working with it.
//   - Without it: the authorizer's Locate names the sandbox's cluster and
//     says whether the sandbox needs a token; one that does is refused
//     with TRAFFIC_TOKEN_REQUIRED. Without an authorizer nobody can say,
//     so such a request is refused (PORT_ROUTING_UNAVAILABLE).
//
// Port 44772 (execd) is reserved: it is the data plane's own upstream,
// reachable only through the envd translation. Every refusal happens
// before anything is dialled.
package portroute

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/sandboxhost"
	"github.com/sandgate/sandgate/gateway/token"
)

// HeaderTrafficToken is the header the E2B SDK user sends a sandbox's
// trafficAccessToken in.
const HeaderTrafficToken = "E2b-Traffic-Access-Token"

// ExecdPort is the reserved port of execd in an OpenSandbox sandbox.
const ExecdPort = 44772

// Code is a stable error code of a refused port request.
type Code string

// The codes, with the HTTP status each is answered with
// (docs/dataplane.md "Host routing").
const (
	// CodeHostNotServed (404): the Host is not <port>-<id>.<domain> for a
	// served domain.
	CodeHostNotServed Code = "HOST_NOT_SERVED"
	// CodePortReserved (403): the port is execd's (44772).
	CodePortReserved Code = "PORT_RESERVED"
	// CodeTrafficTokenRequired (403): the sandbox's ports need a traffic
	// token and none was sent.
	CodeTrafficTokenRequired Code = "TRAFFIC_TOKEN_REQUIRED"
	// CodeTrafficTokenInvalid (403): the traffic token does not verify,
	// has expired, is not a traffic token or names another sandbox.
	CodeTrafficTokenInvalid Code = "TRAFFIC_TOKEN_INVALID"
	// CodeCredentialRefused (403): the token's credential does not exist
	// or is disabled.
	CodeCredentialRefused Code = "CREDENTIAL_REFUSED"
	// CodeSandboxNotFound (404): no such sandbox (or not the token's).
	CodeSandboxNotFound Code = "SANDBOX_NOT_FOUND"
	// CodeSandboxGone (410): the sandbox is being deleted or has expired.
	CodeSandboxGone Code = "SANDBOX_GONE"
	// CodeClusterUnknown (502): the sandbox's cluster is not configured on
	// this gateway.
	CodeClusterUnknown Code = "CLUSTER_UNKNOWN"
	// CodeUnavailable (503): the credential source or the authorizer
	// could not answer.
	CodeUnavailable Code = "PORT_ROUTING_UNAVAILABLE"
	// CodeTooManyRequests (429): the sandbox has as many port requests in
	// progress as an Admission allows one sandbox.
	CodeTooManyRequests Code = "TOO_MANY_PORT_REQUESTS"
	// CodeGatewayBusy (503): the gateway has as many port requests in
	// progress as an Admission allows over all sandboxes.
	CodeGatewayBusy Code = "GATEWAY_BUSY"
)

var statuses = map[Code]int{
	CodeHostNotServed: http.StatusNotFound, CodePortReserved: http.StatusForbidden,
	CodeTrafficTokenRequired: http.StatusForbidden, CodeTrafficTokenInvalid: http.StatusForbidden,
	CodeCredentialRefused: http.StatusForbidden, CodeSandboxNotFound: http.StatusNotFound,
	CodeSandboxGone: http.StatusGone, CodeClusterUnknown: http.StatusBadGateway, CodeUnavailable: http.StatusServiceUnavailable,
	CodeTooManyRequests: http.StatusTooManyRequests, CodeGatewayBusy: http.StatusServiceUnavailable,
}

// Status is the HTTP status the code is answered with.
func (c Code) Status() int { return statuses[c] }

// Refusal is a refused port request. Message never contains a token.
type Refusal struct {
	// Code is the stable code.
	Code Code
	// Message is for the caller.
	Message string
}

func refuse(c Code, msg string) *Refusal { return &Refusal{Code: c, Message: msg} }

// Error returns "CODE: message".
func (r *Refusal) Error() string { return string(r.Code) + ": " + r.Message }

// Deps are the collaborators of a Router.
type Deps struct {
	// Tokens verifies traffic tokens (the gateway's token keys).
	Tokens dataplane.TokenVerifier
	// Credentials is the resource credential source.
	Credentials credential.Source
	// Clusters maps a cluster ID to its fixed entry.
	Clusters dataplane.Clusters
	// Authorizer checks a traffic token's credential against the
	// sandbox; nil skips that check.
	Authorizer authorizer.Authorizer
	// Locator finds a sandbox for a request without a traffic token; nil
	// refuses such requests with CodeUnavailable.
	Locator authorizer.Locator
}

// Router decides port routes. Build it with New; safe for concurrent use.
type Router struct{ deps Deps }

// New returns a Router; Tokens, Credentials and Clusters are required.
func New(deps Deps) (*Router, error) {
	if deps.Tokens == nil || deps.Credentials == nil || deps.Clusters == nil {
		return nil, errors.New("portroute: tokens, credentials and clusters are required")
	}
	return &Router{deps: deps}, nil
}

// Route is where an allowed port request goes.
type Route struct {
	// ClusterID and CredentialID are what the request resolved to
	// (CredentialID empty without a traffic token).
	ClusterID, CredentialID string
	// Dial is the fixed entry's host:port.
	Dial string
	// Host is the Host header for the fixed entry (the cluster's Host,
	// else the fixed entry URL's host).
	Host string
	// PathPrefix is the fixed entry's base path + "/<sandboxID>/<port>",
	// to be put before the request's path.
	PathPrefix string
}

// Decide returns the route of a port request to tgt with header h, or the
// refusal. It dials nothing.
func (rt *Router) Decide(ctx context.Context, tgt sandboxhost.Target, h http.Header) (Route, *Refusal) {
	if tgt.Port == ExecdPort {
		return Route{}, refuse(CodePortReserved, "port 44772 is reserved")
	}
	var (
		rte     Route
		cluster string
	)
	switch vals := h.Values(HeaderTrafficToken); {
	case len(vals) > 1:
		return Route{}, refuse(CodeTrafficTokenInvalid, "more than one traffic token")
	case len(vals) == 1:
		t, err := rt.deps.Tokens.Verify(vals[0])
		if err != nil || t.Audience != token.AudienceTraffic || t.SandboxID != tgt.SandboxID {
			return Route{}, refuse(CodeTrafficTokenInvalid, "the traffic access token is not valid for this sandbox")
		}
		cred, err := rt.deps.Credentials.Lookup(ctx, t.CredentialID)
		switch {
		case errors.Is(err, credential.ErrNotFound), errors.Is(err, credential.ErrDisabled), err == nil && !cred.Enabled:
			return Route{}, refuse(CodeCredentialRefused, "the traffic token's credential is not usable")
		case err != nil:
			return Route{}, refuse(CodeUnavailable, "the resource credential could not be read")
		}
		if a := rt.deps.Authorizer; a != nil {
			d, err := a.Authorize(ctx, cred.ID, tgt.SandboxID)
			if err != nil {
				return Route{}, refuse(CodeUnavailable, "the sandbox authorizer could not answer")
			}
			if r := refusal(d); r != nil {
				return Route{}, r
			}
		}
		cluster, rte.CredentialID = cred.ClusterID, cred.ID
	default:
		if rt.deps.Locator == nil {
			return Route{}, refuse(CodeUnavailable, "this gateway has no authorizer to find the sandbox by; send its traffic token")
		}
		d, err := rt.deps.Locator.Locate(ctx, tgt.SandboxID)
		if err != nil {
			return Route{}, refuse(CodeUnavailable, "the sandbox authorizer could not answer")
		}
		if r := refusal(d); r != nil {
			return Route{}, r
		}
		if d.TrafficTokenRequired {
			return Route{}, refuse(CodeTrafficTokenRequired, "this sandbox's ports need its traffic access token in the e2b-traffic-access-token header")
		}
		cluster = d.ClusterID
	}
	cl, ok := rt.deps.Clusters.Cluster(cluster)
	if !ok || cl.FixedEntry == nil {
		return Route{}, refuse(CodeClusterUnknown, "the sandbox's compute cluster is not configured on this gateway")
	}
	rte.ClusterID = cl.ID
	rte.Dial = dialAddress(cl.FixedEntry)
	rte.Host = cl.Host
	if rte.Host == "" {
		rte.Host = cl.FixedEntry.Host
	}
	base := cl.FixedEntry.Path
	for len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	rte.PathPrefix = base + "/" + tgt.SandboxID + "/" + strconv.Itoa(tgt.Port)
	return rte, nil
}

// refusal maps an authorizer decision; nil when allowed.
func refusal(d authorizer.Decision) *Refusal {
	switch {
	case d.Allowed:
		return nil
	case d.Reason == authorizer.ReasonDeleting || d.Reason == authorizer.ReasonExpired:
		return refuse(CodeSandboxGone, "the sandbox is being deleted or has reached its timeout")
	default:
		return refuse(CodeSandboxNotFound, "the sandbox was not found")
	}
}

// dialAddress is u's host:port, the scheme's default port when u has none.
func dialAddress(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
