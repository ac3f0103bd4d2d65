package hub

import "errors"

// WebSocket close codes Core sends (RFC 6455 §7.4; 4000-4999 are this
// protocol's own). The close frame's reason text says why in a fixed
// phrase, and for an invalid frame names the node/proto rule and the JSON
// pointer of the offending member, never a value.
const (
	// CloseGoingAway: the hub is closing (gateway stopping, or the node
	// connection service removed from the config).
	CloseGoingAway = 1001
	// CloseProtocolError: an invalid frame (proto.Decode refused it),
	// a frame Core does not expect (a second hello, a request, …), a
	// heartbeat, response or retention for another connection, a response
	// for no pending request, a retention out of sequence, or retention
	// from a node without generation management.
	CloseProtocolError = 1002
	// CloseUnsupportedData: a binary message; frames are JSON text.
	CloseUnsupportedData = 1003
	// CloseMessageTooBig: a message over proto.MaxRequestFrame bytes.
	CloseMessageTooBig = 1009
	// CloseInternalError: Core could not encode or write one of its frames.
	CloseInternalError = 1011
	// CloseHelloTimeout: no hello within the hello timeout (15 s).
	CloseHelloTimeout = 4000
	// CloseIdleTimeout: no frame within the idle timeout (35 s).
	CloseIdleTimeout = 4001
	// CloseIdentityMismatch: hello's identity (node_id, installation_id,
	// provider, backend_fingerprint, deployment_generation,
	// specification_digest, generation_management) differs from the
	// authenticated node's enrolment, or the enrolment changed since.
	CloseIdentityMismatch = 4002
	// CloseCredentialRejected: re-authentication at a heartbeat failed
	// (the credential was revoked, replaced or the node disabled).
	CloseCredentialRejected = 4003
	// CloseEpochMismatch: a heartbeat or retention carried an owner epoch
	// other than the welcome's.
	CloseEpochMismatch = 4004
	// CloseEpochSuperseded: Core's owner epoch has moved past the one this
	// connection was welcomed under; reconnect to be welcomed under the new
	// one.
	CloseEpochSuperseded = 4005
	// CloseNoDeployment: a generation-managing node connected but Core has
	// no deployment to advertise.
	CloseNoDeployment = 4006
	// CloseFlood: heartbeats faster than the protocol's period
	// (Timers.Heartbeat, 10 s): more than Idle/Heartbeat + 2 at once, or
	// more than one per half period on average; retention requests beyond
	// the same budget (a node asks at most once per heartbeat_ack);
	// WebSocket pings (which Core answers with pongs, and nodes need not
	// send) more than PingBurst at once or one per second on average; or
	// WebSocket pongs (all unsolicited: Core never pings) more than
	// PongBurst at once or one per second on average.
	CloseFlood = 4007
)

// Errors of Dispatch before anything is sent to the node; the connection
// is not touched. Wrapped errors add the node ID.
var (
	// ErrUnknownNode: the node is neither enrolled nor seen.
	ErrUnknownNode = errors.New("hub: unknown node")
	// ErrOffline: the node is not online (not connected, still connecting
	// or closing, welcomed under an older owner epoch, or its last
	// heartbeat is too old).
	ErrOffline = errors.New("hub: node is not online")
	// ErrTooManyPending: the connection already has
	// proto.MaxPendingRequests requests waiting for a response.
	ErrTooManyPending = errors.New("hub: too many pending requests on the node connection")
	// ErrNotReady: create or a resume that is not observe-only, for a
	// deployment generation the node does not report ready.
	ErrNotReady = errors.New("hub: the deployment generation is not ready on the node")
	// ErrInvalidRequest: the operation and its parameters do not form a
	// valid request frame; the error also wraps the *proto.Error.
	ErrInvalidRequest = errors.New("hub: invalid provider request")
	// ErrPlacementUnrecorded: the placement of the request's allocation
	// on its generation could not be recorded (Config.Placements), so the
	// request was not sent.
	ErrPlacementUnrecorded = errors.New("hub: the allocation's placement could not be recorded")
	// ErrClosed: the hub is closed or not configured.
	ErrClosed = errors.New("hub: node connection service unavailable")
)

// HTTPError is a refusal of a connect request before the WebSocket upgrade.
type HTTPError struct {
	// Status is the HTTP status: 400 (malformed node_id), 401 (credential
	// missing or rejected), 405 (not GET), 409 (a connection for the node
	// is already connecting, live or closing), 429 (the node connects
	// faster than ConnectBurst/ConnectEvery allow), 503 (hub closed or not
	// configured).
	Status int
	// Err says why, without the credential.
	Err error
}

// Error returns the reason.
func (e *HTTPError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *HTTPError) Unwrap() error { return e.Err }

func httpErr(status int, err error) *HTTPError { return &HTTPError{Status: status, Err: err} }

// Connect refusal reasons (HTTPError.Err).
var (
	// ErrNoCredential: no "Authorization: Bearer <credential>" header.
	ErrNoCredential = errors.New("hub: missing bearer credential")
	// ErrRejected: the credential does not authenticate the node (unknown
	// node, wrong credential, disabled node).
	ErrRejected = errors.New("hub: node credential rejected")
	// ErrBusy: a connection for the node is connecting, live or closing.
	ErrBusy = errors.New("hub: a connection for this node is already open")
	// ErrBadNodeID: node_id is missing or not a lowercase UUID.
	ErrBadNodeID = errors.New("hub: node_id must be a lowercase UUID")
	// ErrMethod: the connect request is not a GET.
	ErrMethod = errors.New("hub: the node connection is opened with GET")
	// ErrConnectFlood: the node connects faster than its budget
	// (ConnectBurst at once, then one per ConnectEvery); the 429 carries
	// Retry-After in whole seconds.
	ErrConnectFlood = errors.New("hub: the node connects faster than allowed")
)
