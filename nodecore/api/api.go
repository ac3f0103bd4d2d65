// Package api is the gateway's internal HTTP API over the node hub
// (package nodecore/hub): list the sandbox nodes with their presence and last
// health, and send one provider operation to a node and wait for its
// outcome. It is authenticated with its own bearer token, never the data
// plane's access tokens, and is meant for Core's other components on a
// private listener.
//
// Routes, under Prefix (JSON bodies; every answer is application/json):
//
//	GET  /internal/v1/sandbox-nodes                         200 {"nodes": [NodeStatus, …]}
//	GET  /internal/v1/sandbox-nodes/<node_id>               200 NodeStatus | 404
//	POST /internal/v1/sandbox-nodes/<node_id>/operations    200 OperationResult | 4xx/503 Error
//	GET  /internal/v1/sandbox-nodes/<node_id>/placements    200 Placements | 404
//	POST /internal/v1/sandbox-nodes/<node_id>/placements/release  PlacementEntry → 200 Released | 404
//
// The reference is docs/node-connect.md.
package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/bearer"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/placement"
)

// Prefix is the path prefix of the API.
const Prefix = "/internal/v1/sandbox-nodes"

// Handler serves the API. Its fields must not change while it serves.
type Handler struct {
	// Hub is the node hub. Required.
	Hub *hub.Hub
	// Tokens are the SHA-256 digests of the accepted API tokens (several
	// allow rotation). A request must carry "Authorization: Bearer
	// <token>" whose digest is one of them, compared in constant time.
	// With no digests every request is refused.
	Tokens [][sha256.Size]byte
	// Logger receives refused requests; nil means no logging. Tokens are
	// never logged.
	Logger *zap.Logger

	// Peers, when set (several gateway replicas), finds the replica that
	// holds a node not live here: operations and GET <node> are forwarded
	// to it, and the list merges every replica's nodes.
	Peers Peers
	// PeerTokens are the SHA-256 digests of the peer tokens a forwarded
	// request (ForwardedHeader) must carry instead of an API token.
	PeerTokens [][sha256.Size]byte
	// PeerToken is the token this replica forwards with.
	PeerToken string
	// Client forwards requests; nil means a client without proxy, with a
	// 150 s response-header timeout.
	Client *http.Client
	// Observer, when set, receives the result of every forwarded request
	// (metrics).
	Observer ForwardObserver
}

// Owns reports whether path is one of the API's paths (Prefix or below).
func Owns(path string) bool {
	return path == Prefix || strings.HasPrefix(path, Prefix+"/")
}

// OperationRequest is the body of POST …/<node_id>/operations: one
// provider request frame without its envelope (spec "Provider requests").
// Members are exact and unique (unknown, case-variant and duplicate
// members are refused); the parameter members must be exactly those the
// operation takes.
type OperationRequest struct {
	// Operation is one of the 15 operations.
	Operation proto.Operation `json:"operation"`
	// DeploymentGeneration is the allocation's deployment generation, > 0.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// TimeoutMS is the budget, 1..120000 ms; the API waits at most this
	// long plus the hub's response grace.
	TimeoutMS int `json:"timeout_ms"`
	// Reference is the exact (tenant_id, environment_id, allocation_id).
	Reference proto.Reference `json:"reference"`

	// Bootstrap is the create parameter.
	Bootstrap *proto.Bootstrap `json:"bootstrap,omitempty"`
	// Command is the command and command_compute parameter.
	Command *proto.Command `json:"command,omitempty"`
	// Observation is the observe parameter.
	Observation *proto.Observation `json:"observation,omitempty"`
	// Generation is new_compute's compute generation, > 0.
	Generation *int64 `json:"generation,omitempty"`
	// Snapshot is new_compute's optional and delete_snapshot's snapshot.
	Snapshot *proto.Snapshot `json:"snapshot,omitempty"`
	// Compute names the compute instance of compute, kill_compute,
	// resume_compute and command_compute.
	Compute *proto.ComputeRef `json:"compute,omitempty"`
	// Suspend is the suspend parameter.
	Suspend *proto.Suspend `json:"suspend,omitempty"`
	// Resume is the resume parameter.
	Resume *proto.Resume `json:"resume,omitempty"`
}

// OperationResult is the answer of a dispatched operation (HTTP 200,
// whatever the outcome).
type OperationResult struct {
	// Outcome is "success", "failed", "unsupported" or "unknown". Unknown
	// never proves that a resource does not exist or that a mutation did
	// not happen: observe the original operation, never replay it.
	Outcome string `json:"outcome"`
	// ErrorCode is the failure's code, "unsupported", or "unconfirmed" for
	// unknown; absent on success.
	ErrorCode proto.ErrorCode `json:"error_code,omitempty"`
	// Reason says why the outcome is unknown: "unconfirmed", "timeout",
	// "disconnected", "cancelled" or "write_failed".
	Reason string `json:"reason,omitempty"`
	// Sent is false when Core refused the operation before sending it
	// because the node's provider declares it unsupported (package
	// node/operation); request_id, sequence, connection_id and owner_epoch
	// are then absent.
	Sent bool `json:"sent"`
	// RequestID is the request's id (a new UUID).
	RequestID string `json:"request_id,omitempty"`
	// Sequence is the request's sequence on its connection.
	Sequence uint64 `json:"sequence,omitempty"`
	// ConnectionID is the connection the request was sent on.
	ConnectionID string `json:"connection_id,omitempty"`
	// OwnerEpoch is the owner epoch the request carried.
	OwnerEpoch int64 `json:"owner_epoch,omitempty"`
	// Unsupported is the evidence of an unsupported outcome, the
	// registered declaration's (sent is false); a node's unsupported
	// answer to a sent operation is unknown/unconfirmed, its evidence
	// only in response.
	Unsupported *proto.Unsupported `json:"unsupported,omitempty"`
	// Response is the node's response frame, absent when none arrived.
	Response *proto.Response `json:"response,omitempty"`
	// Receipt is the info receipt of a failed create that proves a settled
	// create attempt.
	Receipt *proto.Info `json:"receipt,omitempty"`
	// Observation is present when the outcome is unknown and the request
	// was sent (and the caller is still there): Core observed the original
	// operation with the read-only operation of its exact reference
	// instead of replaying it (hub.ObserveOutcome).
	Observation *ObservationResult `json:"observation,omitempty"`
}

// ObservationResult is what observing an operation of unknown outcome
// found (hub.Observation).
type ObservationResult struct {
	// Kind is "present" (the exact reference or compute instance exists;
	// result.response carries its info or state), "absent" (the node
	// answered not_found), "unknown" (the observation proves nothing:
	// observe again later, never replay) or "unobservable" (the operation
	// has no read-only observation; nothing was sent).
	Kind string `json:"kind"`
	// Refusal is the refusal code when the observing operation was refused
	// before it was sent (node_offline, too_many_pending, …).
	Refusal string `json:"refusal,omitempty"`
	// Result is the observing operation's result (info, compute or an
	// observe-only resume), absent when nothing was sent.
	Result *OperationResult `json:"result,omitempty"`
}

// operationResult is the API's form of a Result.
func operationResult(res *hub.Result) OperationResult {
	return OperationResult{
		Outcome: res.Outcome.String(), ErrorCode: res.ErrorCode, Reason: res.Reason, Sent: !res.NotSent,
		Unsupported: res.Unsupported, RequestID: res.Request.ID, Sequence: res.Request.Sequence, ConnectionID: res.Request.ConnectionID,
		OwnerEpoch: res.Request.OwnerEpoch, Response: res.Response, Receipt: res.Receipt,
	}
}

// Error is the body of every refusal.
type Error struct {
	// Error is the refusal.
	Error ErrorBody `json:"error"`
}

// ErrorBody is a refusal's code and message.
type ErrorBody struct {
	// Code is one of unauthorized, not_found, method_not_allowed,
	// invalid_request, request_too_large, node_offline,
	// generation_not_ready, too_many_pending, unavailable.
	Code string `json:"code"`
	// Message is a fixed explanation; for invalid_request it names the
	// node/proto rule and JSON pointer.
	Message string `json:"message"`
}

// PlacementEntry is one allocation Core has placed on a generation of a
// node.
type PlacementEntry struct {
	// DeploymentGeneration is the generation the allocation belongs to.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// Reference is the allocation's exact reference.
	Reference proto.Reference `json:"reference"`
}

// Placements is the body of GET …/<node_id>/placements.
type Placements struct {
	// Placements are by generation, then reference.
	Placements []PlacementEntry `json:"placements"`
}

// Released is the answer of POST …/<node_id>/placements/release.
type Released struct {
	// Released is true: the placement was forgotten.
	Released bool `json:"released"`
}

// Nodes is the body of the list.
type Nodes struct {
	// Nodes are every enrolled or seen node, sorted by node ID.
	Nodes []hub.NodeStatus `json:"nodes"`
	// Partial is true when some replica's nodes are missing (several
	// replicas; see UnreachableReplicas).
	Partial bool `json:"partial,omitempty"`
	// UnreachableReplicas names the replicas that did not answer.
	UnreachableReplicas []string `json:"unreachable_replicas,omitempty"`
}

// decodeOptions make the body decoder as strict as the frame codec.
var decodeOptions = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// ServeHTTP authenticates and routes one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	forwarded := r.Header.Get(ForwardedHeader) != ""
	if (forwarded && !h.peerAuthorized(r)) || (!forwarded && !h.authorized(r)) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandgate-node-api"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "a valid API bearer token is required")
		return
	}
	// Only a request from a client may be forwarded, and only when
	// several replicas serve.
	forward := !forwarded && h.Peers != nil
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		writeError(w, http.StatusNotFound, "not_found", "no such API path")
		return
	}
	var parts []string
	var partsBuf [maxPathParts]string
	parts = splitPath(partsBuf[:0], rest)
	switch {
	case rest == "" || rest == "/":
		if !allow(w, r, http.MethodGet) {
			return
		}
		if forward {
			writeJSON(w, http.StatusOK, h.mergeNodes(r.Context(), h.Hub.Nodes()))
			return
		}
		writeJSON(w, http.StatusOK, Nodes{Nodes: h.Hub.Nodes()})
	case len(parts) == 1:
		if !allow(w, r, http.MethodGet) {
			return
		}
		s, found := h.Hub.Node(parts[0])
		if found && s.State != hub.StateDisconnected {
			if h.Peers != nil {
				s.Replica = h.Peers.Self()
			}
			writeJSON(w, http.StatusOK, s)
			return
		}
		if found && forward && h.forwardNode(w, r, parts[0]) {
			return
		}
		if !found {
			writeError(w, http.StatusNotFound, "not_found", "no such node")
			return
		}
		if h.Peers != nil {
			s.Replica = h.Peers.Self()
			if forwarded {
				w.Header().Set(NotHeldHeader, h.Peers.Self())
			}
		}
		writeJSON(w, http.StatusOK, s)
	case len(parts) == 2 && parts[1] == "operations":
		if !allow(w, r, http.MethodPost) {
			return
		}
		h.operation(w, r, parts[0], forwarded, forward)
	case len(parts) == 2 && parts[1] == "placements":
		if !allow(w, r, http.MethodGet) {
			return
		}
		if _, found := h.Hub.Node(parts[0]); !found {
			writeError(w, http.StatusNotFound, "not_found", "no such node")
			return
		}
		list := Placements{Placements: []PlacementEntry{}}
		for _, p := range h.Hub.Placements(parts[0]) {
			list.Placements = append(list.Placements, PlacementEntry{DeploymentGeneration: p.Generation, Reference: p.Reference})
		}
		writeJSON(w, http.StatusOK, list)
	case len(parts) == 3 && parts[1] == "placements" && parts[2] == "release":
		if !allow(w, r, http.MethodPost) {
			return
		}
		h.release(w, r, parts[0])
	default:
		writeError(w, http.StatusNotFound, "not_found", "no such API path")
	}
}

// maxPathParts is one more than the most segments an API path below
// Prefix has (<node_id>/placements/release), so that a longer path is
// seen as longer.
const maxPathParts = 4

// splitPath appends to dst the segments of rest with its leading and
// trailing slashes trimmed, as strings.Split(strings.Trim(rest, "/"), "/")
// would return them, but at most maxPathParts of them (the last one then
// holds the remainder), without allocating when dst has room.
func splitPath(dst []string, rest string) []string {
	rest = strings.Trim(rest, "/")
	for len(dst) < maxPathParts-1 {
		seg, more, found := strings.Cut(rest, "/")
		dst = append(dst, seg)
		if !found {
			return dst
		}
		rest = more
	}
	return append(dst, rest)
}

func (h *Handler) authorized(r *http.Request) bool { return bearer.MatchesDigest(r, h.Tokens) }

func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use "+method)
	return false
}

// operation serves POST <node>/operations. forwarded: the request came
// from another replica; forward: a node not online here may be forwarded
// to the replica holding it. A body over proto.MaxRequestFrame is refused
// 413, from its Content-Length before anything is read when declared.
func (h *Handler) operation(w http.ResponseWriter, r *http.Request, nodeID string, forwarded, forward bool) {
	// A declared length past the limit is refused before anything is
	// read; an undeclared one (chunked) is cut off at the limit.
	if r.ContentLength > proto.MaxRequestFrame {
		tooLarge(w, "the body is over 72 MiB")
		return
	}
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	pooled := true // false once body may outlive this call
	defer func() {
		if pooled && buf.Cap() <= maxPooledBody {
			bodyBuffers.Put(buf)
		}
	}()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, proto.MaxRequestFrame))
	body := buf.Bytes()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge(w, "the body is over 72 MiB")
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request", "the body could not be read")
		return
	}
	var in OperationRequest
	if err := jsonv2.Unmarshal(body, &in, decodeOptions); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", bodyProblem(err))
		return
	}
	req := proto.Request{
		DeploymentGeneration: in.DeploymentGeneration, Operation: in.Operation, TimeoutMS: in.TimeoutMS,
		Reference: in.Reference, Bootstrap: in.Bootstrap, Command: in.Command, Observation: in.Observation,
		Generation: in.Generation, Snapshot: in.Snapshot, Compute: in.Compute, Suspend: in.Suspend, Resume: in.Resume,
	}
	res, err := h.Hub.Dispatch(r.Context(), nodeID, req)
	if err != nil && errors.Is(err, hub.ErrOffline) {
		// A forwarded body goes to another replica's client, which may
		// still read it after the answer: it is not pooled again.
		pooled = pooled && !forward
		if forward && h.forwardOperation(w, r, nodeID, body) {
			return
		}
		if forwarded && h.Peers != nil {
			w.Header().Set(NotHeldHeader, h.Peers.Self())
		}
	}
	if err != nil {
		status, code, msg := refusal(err)
		if h.Logger != nil {
			h.Logger.Info("node operation refused", zap.String("node_id", nodeID),
				zap.String("operation", string(in.Operation)), zap.String("code", code))
		}
		writeError(w, status, code, msg)
		return
	}
	out := operationResult(res)
	// An unknown outcome is observed, never replayed (spec "Provider
	// requests"), unless the caller already went away.
	if res.Outcome == proto.OutcomeUnknown && !res.NotSent && res.Reason != hub.ReasonCancelled && r.Context().Err() == nil {
		o := h.Hub.ObserveOutcome(r.Context(), nodeID, res.Request)
		out.Observation = &ObservationResult{Kind: o.Kind, Refusal: o.Refusal}
		if o.Result != nil {
			or := operationResult(o.Result)
			out.Observation.Result = &or
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// release forgets one placement (POST …/<node_id>/placements/release,
// body PlacementEntry): the operator has established that the allocation
// is gone. 200 Released, 404 not_found when no such placement is
// recorded, 400 for a malformed body, 413 for a body over 64 KiB (from
// its Content-Length before anything is read when declared), 503 without
// a placement store.
func (h *Handler) release(w http.ResponseWriter, r *http.Request, nodeID string) {
	if r.ContentLength > maxReleaseBody {
		tooLarge(w, "the body is over 64 KiB")
		return
	}
	body := http.MaxBytesReader(w, r.Body, maxReleaseBody)
	var in PlacementEntry
	if err := jsonv2.UnmarshalRead(body, &in, decodeOptions); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge(w, "the body is over 64 KiB")
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request", bodyProblem(err))
		return
	}
	ref := in.Reference
	if !proto.IsUUID(nodeID) || in.DeploymentGeneration <= 0 || !proto.IsIdentifier(ref.TenantID) ||
		!proto.IsIdentifier(ref.EnvironmentID) || !proto.IsIdentifier(ref.AllocationID) {
		writeError(w, http.StatusBadRequest, "invalid_request", "a positive deployment_generation and a complete reference are required")
		return
	}
	ok, err := h.Hub.ReleasePlacement(placement.Placement{NodeID: nodeID, Generation: in.DeploymentGeneration, Reference: ref})
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "unavailable", "placements are not recorded, or the release could not be written")
	case !ok:
		writeError(w, http.StatusNotFound, "not_found", "no such placement")
	default:
		if h.Logger != nil {
			h.Logger.Info("placement released by the operator", zap.String("node_id", nodeID),
				zap.Int64("deployment_generation", in.DeploymentGeneration))
		}
		writeJSON(w, http.StatusOK, Released{Released: true})
	}
}

// maxReleaseBody bounds the body of a release, in bytes.
const maxReleaseBody = 64 << 10

// tooLarge answers 413 request_too_large with "Connection: close": the
// body is left unread, and net/http would otherwise read up to 256 KiB of
// it before answering, to keep the connection.
func tooLarge(w http.ResponseWriter, msg string) {
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", msg)
}

// bodyProblem describes a body decoding error by its JSON pointer, never
// by value.
func bodyProblem(err error) string {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			return "unknown member at " + string(se.JSONPointer)
		}
		return "wrong JSON kind or value at " + string(se.JSONPointer)
	}
	var te *jsontext.SyntacticError
	if errors.As(err, &te) {
		if errors.Is(te.Err, jsontext.ErrDuplicateName) {
			return "duplicate member at " + string(te.JSONPointer)
		}
		return "malformed JSON"
	}
	return "malformed JSON body"
}

// refusal maps a Dispatch error to status, code (hub.RefusalCode) and
// message.
func refusal(err error) (int, string, string) {
	code := hub.RefusalCode(err)
	switch code {
	case hub.RefusalInvalidRequest:
		var pe *proto.Error
		if errors.As(err, &pe) {
			return http.StatusBadRequest, code, pe.Error()
		}
		return http.StatusBadRequest, code, "the request does not form a valid request frame"
	case hub.RefusalNotFound:
		return http.StatusNotFound, code, "no such node"
	case hub.RefusalNodeOffline:
		return http.StatusServiceUnavailable, code, "the node is not online"
	case hub.RefusalNotReady:
		return http.StatusConflict, code, "the node does not report the deployment generation ready"
	case hub.RefusalTooManyPending:
		return http.StatusTooManyRequests, code, "32 requests are already pending on the node connection"
	}
	return http.StatusServiceUnavailable, hub.RefusalUnavailable, "the node connection service is unavailable"
}

// NotFound answers 404 not_found "no such API path" in the API's error
// shape, for a server that serves the API alone and gets a path Owns
// refuses.
func NotFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "not_found", "no such API path")
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, Error{Error: ErrorBody{Code: code, Message: msg}})
}

// bodyBuffers hold operation bodies while they are decoded and
// dispatched (the decoded request copies what it keeps); a buffer that
// grew past maxPooledBody is dropped.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer bodyBuffers keeps, in bytes.
const maxPooledBody = 64 << 10

// answerBuffers hold answers between their encoding and their write;
// a buffer that grew past maxPooledAnswer (a long node list) is dropped.
var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer is the largest buffer answerBuffers keeps, in bytes.
const maxPooledAnswer = 64 << 10

// writeJSON answers status with v encoded by encoding/json and a newline
// (the bytes of json.Marshal(v) plus "\n"), or 500 with an "internal"
// error body when v cannot be encoded. The answer is encoded into a
// pooled buffer instead of json.Marshal's result copied again to append
// the newline: about 450 fewer bytes allocated per operation answer
// (BenchmarkWriteJSON; docs/node-connect.md "Fewer bytes per operation").
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := answerBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			answerBuffers.Put(buf)
		}
	}()
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"encoding the answer failed"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
