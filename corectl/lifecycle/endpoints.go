package lifecycle

// The business-port projection (spec §4.4, first bullet of "Business
// authorization boundary"): where a client sends a request for one of a
// sandbox's own ports, straight to the cluster's fixed entry and the
// sandbox's managed Ingress, never through the gateway.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Ports of the projection (spec §4.4): noVNC and Chrome's DevTools.
const (
	// NoVNCPort is the noVNC page and its WebSocket (websockify) port.
	NoVNCPort = 6080
	// CDPPort is Chrome's DevTools protocol port.
	CDPPort = 9222
)

// Errors of ValidatePort.
var (
	// ErrPortInvalid: the port is not a decimal number 1–65535 without
	// leading zeros (the form the OpenSandbox ingress parses from a URI).
	ErrPortInvalid = errors.New("lifecycle: invalid port")
	// ErrPortReserved: the port is not a business port: ExecdPort is the
	// data plane's route to execd and EnvdPort is envd's logical port in
	// the runtime token, not a port anything listens on (spec §4.4).
	ErrPortReserved = errors.New("lifecycle: reserved port")
)

// Endpoints is the business-port entry projection GET /sandboxes/{id}
// reports (spec §4.4 "Generic E2B endpoint projection"): a request for
// port P of the sandbox goes to BaseURL + URITemplate with {sandboxID},
// {port} and {upstreamPath} filled in, with the Host header Host when Host
// is set. The sandbox's managed Ingress (its allowlist) and the
// OpenSandbox ingress behind the fixed entry route it; the URI's ID and
// port route, they do not authenticate.
type Endpoints struct {
	// BaseURL is the cluster's fixed entry as configured
	// (cluster fixedEntry, e.g. "http://10.0.0.1:80"): the address to
	// dial.
	BaseURL string `json:"baseURL"`
	// Host is the host of the cluster's managed Ingress rules
	// (cluster ingress.host), which the request's Host header must name
	// (its port aside) or ingress-nginx matches no rule of the sandbox
	// and answers 404; absent when the rules carry no host (any Host).
	// A client that cannot set Host (a browser) uses a name that resolves
	// to the fixed entry: http://<Host>:<BaseURL's port>/…
	Host string `json:"host,omitempty"`
	// URITemplate is "/{sandboxID}/{port}/{upstreamPath}" (literal).
	URITemplate string `json:"uriTemplate"`
	// NoVNC is this sandbox's port 6080 through the fixed entry
	// (BaseURL + "/<id>/6080/"; send Host when set).
	NoVNC string `json:"noVNC"`
	// CDP is this sandbox's port 9222 through the fixed entry
	// (BaseURL + "/<id>/9222/"; send Host when set).
	CDP string `json:"cdp"`
}

// URITemplate is Endpoints.URITemplate (spec §4.4).
const URITemplate = "/{sandboxID}/{port}/{upstreamPath}"

// Endpoint is the projection of one port of one sandbox, the answer of
// GET /sandboxes/{id}/endpoints?port=N.
type Endpoint struct {
	// SandboxID is the sandbox.
	SandboxID string `json:"sandboxID"`
	// Port is the sandbox's port.
	Port int `json:"port"`
	// URL is BaseURL + "/<id>/<port>/": the port's root; append the
	// upstream path (and query) to it. WebSocket clients use the same
	// URL with the ws scheme.
	URL string `json:"url"`
	// Host is Endpoints.Host: the Host header to send, absent when any
	// Host is routed.
	Host string `json:"host,omitempty"`
}

// ValidatePort parses a business port from its decimal text. Errors wrap
// ErrPortInvalid or ErrPortReserved.
func ValidatePort(s string) (int, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" || len(s) > 5 {
		return 0, fmt.Errorf("%w: %q is not a decimal port 1-65535", ErrPortInvalid, s)
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%w: %q is not a decimal port 1-65535", ErrPortInvalid, s)
	}
	switch p {
	case ExecdPort:
		return 0, fmt.Errorf("%w: %d is execd's port, reached through the gateway", ErrPortReserved, p)
	case EnvdPort:
		return 0, fmt.Errorf("%w: %d is envd's logical port, not a port in the sandbox", ErrPortReserved, p)
	}
	return p, nil
}

// endpoints is the projection of sandbox id in the orchestrator's cluster.
func (o *Orchestrator) endpoints(id string) Endpoints {
	base := strings.TrimRight(o.Cluster.FixedEntry, "/")
	return Endpoints{BaseURL: base, Host: o.Cluster.Ingress.Host, URITemplate: URITemplate,
		NoVNC: portURL(base, id, NoVNCPort), CDP: portURL(base, id, CDPPort)}
}

func portURL(base, id string, port int) string {
	return base + "/" + id + "/" + strconv.Itoa(port) + "/"
}

// Endpoint returns the projection of port (a ValidatePort result) of
// sandbox ns/id, which must exist and not be going away (a sandbox in a
// Gone state is ErrNotFound, as for GET). The caller has checked
// ownership; read is as for Status. Errors: ErrNotFound, ErrUnavailable.
func (o *Orchestrator) Endpoint(ctx context.Context, ns, id string, read *unstructured.Unstructured, port int) (*Endpoint, error) {
	info, err := o.Status(ctx, ns, id, read)
	if err != nil {
		return nil, err
	}
	if Gone(info.LifecycleState) {
		return nil, fmt.Errorf("%w: sandbox %s is %s", ErrNotFound, id, info.LifecycleState)
	}
	return &Endpoint{SandboxID: id, Port: port, URL: portURL(info.Endpoints.BaseURL, id, port), Host: info.Endpoints.Host}, nil
}
