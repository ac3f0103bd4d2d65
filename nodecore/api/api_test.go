package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/placement"
)

const (
	nodeA    = "0a000000-0000-4000-8000-00000000000a"
	nodeB    = "0b000000-0000-4000-8000-00000000000b"
	inst     = "11111111-2222-4333-8444-555555555555"
	secretA  = "node-a-secret-5e1f"
	secretB  = "node-b-secret-77aa"
	apiToken = "internal-api-token-DO-NOT-LOG-93ab"
)

var (
	fingerprint = strings.Repeat("f", 64)
	specDigest  = strings.Repeat("5a", 32)
)

func hexSum(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

type apiEnv struct {
	t   testing.TB
	hub *hub.Hub
	srv *httptest.Server
}

func newAPIEnv(t testing.TB) *apiEnv {
	t.Helper()
	creds := testCreds(t)
	h := hub.New()
	if err := h.Configure(hub.Config{Credentials: creds, OwnerEpoch: 3,
		Timers: hub.Timers{ResponseGrace: 50 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(hub.ConnectPath, h)
	mux.Handle(Prefix, &Handler{Hub: h, Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}})
	mux.Handle(Prefix+"/", &Handler{Hub: h, Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))}})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { _ = h.Close(); srv.Close() })
	return &apiEnv{t: t, hub: h, srv: srv}
}

// testCreds is a node credential file enrolling nodes A and B.
func testCreds(t testing.TB) *credential.File {
	t.Helper()
	path := writeNodes(t)
	creds, err := credential.OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = creds.Close() })
	return creds
}

// node connects a simulated node with the given answer function.
func (e *apiEnv) node(id, secret string, ready bool, answer func(*proto.Request) *proto.Response) *sim.Node {
	e.t.Helper()
	h := proto.Health{ProviderReady: ready, Host: proto.HostMeasurements{CPUCount: 4, MemoryTotalBytes: 1 << 30}}
	if !ready {
		h.Diagnostic = "docker_timeout"
	}
	n, err := sim.Dial(e.t.Context(), sim.Config{URL: e.srv.URL, Credential: secret, HeartbeatInterval: -1,
		Answer: answer, Hello: proto.Hello{NodeID: id, InstallationID: inst, Provider: proto.ProviderDocker,
			BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 4, Health: h}})
	if err != nil {
		e.t.Fatalf("node %s: %v", id, err)
	}
	e.t.Cleanup(func() { _ = n.Close() })
	return n
}

// call sends one API request and decodes the JSON answer into out.
func (e *apiEnv) call(method, path, token, body string, out any) int {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if bytes.Contains(data, []byte(apiToken)) {
		e.t.Errorf("answer contains the API token")
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

const infoBody = `{"operation":"info","deployment_generation":1,"timeout_ms":2000,
	"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"}}`

// TestAPIAuthentication: the API refuses requests without its own token
// (none, a wrong one, a node credential, another scheme) with 401.
func TestAPIAuthentication(t *testing.T) {
	e := newAPIEnv(t)
	for _, tok := range []string{"", "wrong", secretA, hexSum(apiToken)} {
		var body Error
		if status := e.call(http.MethodGet, Prefix, tok, "", &body); status != http.StatusUnauthorized || body.Error.Code != "unauthorized" {
			t.Errorf("token %q: status %d, body %+v", tok, status, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+Prefix, nil)
	req.SetBasicAuth("x", apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("basic auth: %d", resp.StatusCode)
	}
	if status := e.call(http.MethodGet, Prefix, apiToken, "", nil); status != http.StatusOK {
		t.Errorf("right token: %d", status)
	}
}

// TestAPIListAndNode: the list shows every enrolled node with presence
// and last health; one node by ID; an unknown node is 404.
func TestAPIListAndNode(t *testing.T) {
	e := newAPIEnv(t)
	e.node(nodeA, secretA, false, nil)
	var list Nodes
	if status := e.call(http.MethodGet, Prefix, apiToken, "", &list); status != http.StatusOK || len(list.Nodes) != 2 {
		t.Fatalf("list: %d %+v", status, list)
	}
	a, b := list.Nodes[0], list.Nodes[1]
	if a.NodeID != nodeA || !a.Online || a.State != hub.StateLive || a.Health == nil || a.Health.Diagnostic != "docker_timeout" || a.OwnerEpoch != 3 {
		t.Errorf("A = %+v", a)
	}
	if b.NodeID != nodeB || b.Online || b.State != hub.StateDisconnected || !b.Enrolled {
		t.Errorf("B = %+v", b)
	}
	var one hub.NodeStatus
	if status := e.call(http.MethodGet, Prefix+"/"+nodeA, apiToken, "", &one); status != http.StatusOK || one.NodeID != nodeA || !one.Online {
		t.Errorf("GET A: %d %+v", status, one)
	}
	var er Error
	if status := e.call(http.MethodGet, Prefix+"/0e000000-0000-4000-8000-00000000000e", apiToken, "", &er); status != http.StatusNotFound || er.Error.Code != "not_found" {
		t.Errorf("unknown node: %d %+v", status, er)
	}
}

// TestAPIOperation: POST …/operations sends the operation and returns its
// outcome with the envelope and the node's response.
func TestAPIOperation(t *testing.T) {
	e := newAPIEnv(t)
	n := e.node(nodeA, secretA, true, nil)
	for seq := uint64(1); seq <= 2; seq++ {
		var res OperationResult
		status := e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, infoBody, &res)
		if status != http.StatusOK || res.Outcome != "success" || !res.Sent || res.Sequence != seq || res.ConnectionID != n.Welcome().ConnectionID ||
			res.OwnerEpoch != 3 || !proto.IsUUID(res.RequestID) || res.Response == nil || res.Response.Info == nil ||
			res.Response.Info.Reference.AllocationID != "a1" {
			t.Fatalf("operation %d: %d %+v", seq, status, res)
		}
	}
	if n.Requests() != 2 {
		t.Fatalf("node received %d requests", n.Requests())
	}
}

// TestAPIOperationOutcomes: failed and unknown outcomes are answered with
// 200 and the classification; a node's unsupported evidence for an
// operation its registered declaration supports is unknown.
func TestAPIOperationOutcomes(t *testing.T) {
	e := newAPIEnv(t)
	var mode sync.Map
	e.node(nodeA, secretA, true, func(r *proto.Request) *proto.Response {
		m, _ := mode.Load("m")
		resp := &proto.Response{ID: r.ID, ConnectionID: r.ConnectionID}
		switch m {
		case "failed":
			resp.ErrorCode = proto.ErrNotFound
		case "unsupported":
			resp.ErrorCode = proto.ErrUnsupported
			resp.Unsupported = &proto.Unsupported{Operation: r.Operation, Reason: "not offered"}
		case "mismatched":
			resp.ErrorCode = proto.ErrUnsupported
			resp.Unsupported = &proto.Unsupported{Operation: proto.OpKill, Reason: "not offered"}
		case "silent":
			return nil
		}
		return resp
	})
	for _, tc := range []struct{ mode, outcome, code, reason string }{
		{"failed", "failed", "not_found", ""},
		// Docker's registered declaration supports info: the node's
		// evidence does not match it and proves nothing.
		{"unsupported", "unknown", "unconfirmed", "unconfirmed"},
		{"mismatched", "unknown", "unconfirmed", "unconfirmed"},
		{"silent", "unknown", "unconfirmed", "timeout"},
	} {
		mode.Store("m", tc.mode)
		body := infoBody
		if tc.mode == "silent" {
			body = strings.Replace(infoBody, `"timeout_ms":2000`, `"timeout_ms":50`, 1)
		}
		var res OperationResult
		status := e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, body, &res)
		if status != http.StatusOK || res.Outcome != tc.outcome || string(res.ErrorCode) != tc.code || res.Reason != tc.reason {
			t.Errorf("%s: %d %+v", tc.mode, status, res)
		}
	}
}

// TestAPIUnknownOutcomeIsObserved: a node that drops the response to a
// create leaves its outcome unknown; Core does not send the create again
// but observes it with an info of the exact reference and gives the
// caller the observation: present (with the info) when the node knows the
// allocation, absent when it answers not_found, unknown when the
// observation is lost too; a command has no read-only observation and
// nothing more is sent.
func TestAPIUnknownOutcomeIsObserved(t *testing.T) {
	e := newAPIEnv(t)
	var mode sync.Map
	seen := make(chan proto.Request, 16)
	e.node(nodeA, secretA, true, func(r *proto.Request) *proto.Response {
		seen <- *r
		m, _ := mode.Load("m")
		if r.Operation != proto.OpInfo || m == "silent" {
			return nil // the response is dropped
		}
		resp := &proto.Response{ID: r.ID, ConnectionID: r.ConnectionID}
		if m == "absent" {
			resp.ErrorCode = proto.ErrNotFound
			return resp
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		resp.Info = &proto.Info{Reference: r.Reference, DeploymentGeneration: r.DeploymentGeneration, State: proto.StateRunning,
			Image: "busybox:latest", CreatedAt: at, RenewedAt: at}
		return resp
	})
	create := `{"operation":"create","deployment_generation":1,"timeout_ms":50,
	"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"},"bootstrap":{"image":"busybox:latest"}}`
	want := proto.Reference{TenantID: "t1", EnvironmentID: "e1", AllocationID: "a1"}
	for _, tc := range []struct{ mode, kind, outcome string }{
		{"present", hub.ObservedPresent, "success"},
		{"absent", hub.ObservedAbsent, "failed"},
		{"silent", hub.ObservedUnknown, "unknown"},
	} {
		mode.Store("m", tc.mode)
		var res OperationResult
		status := e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, create, &res)
		if status != http.StatusOK || res.Outcome != "unknown" || res.Reason != "timeout" || res.Observation == nil ||
			res.Observation.Kind != tc.kind || res.Observation.Result == nil || res.Observation.Result.Outcome != tc.outcome {
			t.Fatalf("%s: %d %+v observation %+v", tc.mode, status, res, res.Observation)
		}
		if tc.kind == hub.ObservedPresent && (res.Observation.Result.Response == nil || res.Observation.Result.Response.Info.Reference != want) {
			t.Fatalf("%s: the observation carries no info of the reference: %+v", tc.mode, res.Observation.Result)
		}
		// On the wire: the create once, then one info of the exact
		// reference and generation.
		first, second := <-seen, <-seen
		if first.Operation != proto.OpCreate || second.Operation != proto.OpInfo || second.Reference != want ||
			second.DeploymentGeneration != 1 || second.ID == first.ID || second.Bootstrap != nil {
			t.Fatalf("%s: sent %s then %s %+v", tc.mode, first.Operation, second.Operation, second)
		}
		if len(seen) != 0 {
			t.Fatalf("%s: %d more requests sent", tc.mode, len(seen))
		}
	}

	mode.Store("m", "silent")
	command := `{"operation":"command","deployment_generation":1,"timeout_ms":50,
	"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"},
	"command":{"argv":["true"],"timeout_ms":10,"max_output_bytes":16}}`
	var res OperationResult
	status := e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, command, &res)
	if status != http.StatusOK || res.Outcome != "unknown" || res.Observation == nil ||
		res.Observation.Kind != hub.ObservedUnobservable || res.Observation.Result != nil {
		t.Fatalf("command: %d %+v observation %+v", status, res, res.Observation)
	}
	if r := <-seen; r.Operation != proto.OpCommand || len(seen) != 0 {
		t.Fatalf("command: sent %s and %d more", r.Operation, len(seen))
	}
}

// TestAPIDeclaredUnsupported: an operation the node's provider declares
// unsupported (Docker: suspend) is answered 200 with outcome unsupported,
// the declaration's evidence and "sent": false; the node receives
// nothing.
func TestAPIDeclaredUnsupported(t *testing.T) {
	e := newAPIEnv(t)
	n := e.node(nodeA, secretA, true, nil)
	body := `{"operation":"suspend","deployment_generation":1,"timeout_ms":2000,
	"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a1"},"suspend":{"snapshot":{"id":"s1"}}}`
	var raw map[string]any
	status := e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, body, &raw)
	var res OperationResult
	e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, body, &res)
	if status != http.StatusOK || res.Outcome != "unsupported" || res.ErrorCode != proto.ErrUnsupported || res.Sent ||
		res.Unsupported == nil || res.Unsupported.Operation != proto.OpSuspend || res.RequestID != "" || res.Response != nil {
		t.Fatalf("%d %+v", status, res)
	}
	for _, member := range []string{"request_id", "sequence", "connection_id", "owner_epoch"} {
		if _, ok := raw[member]; ok {
			t.Errorf("%s present in an operation that was not sent", member)
		}
	}
	if raw["sent"] != false {
		t.Errorf("sent = %v", raw["sent"])
	}
	if n.Requests() != 0 {
		t.Fatalf("the node received %d requests", n.Requests())
	}
}

// TestAPIOperationRefusals: refusals before dispatch have their status
// and code, and touch no connection.
func TestAPIOperationRefusals(t *testing.T) {
	e := newAPIEnv(t)
	e.node(nodeA, secretA, false, nil)
	ops := Prefix + "/" + nodeA + "/operations"
	for _, tc := range []struct {
		name, path, body string
		status           int
		code, message    string
	}{
		{"unknown member", ops, `{"operation":"info","colour":"blue"}`, 400, "invalid_request", "unknown member at /colour"},
		{"case variant", ops, `{"Operation":"info"}`, 400, "invalid_request", "unknown member at /Operation"},
		{"duplicate member", ops, `{"operation":"info","operation":"kill"}`, 400, "invalid_request", "duplicate member"},
		{"not JSON", ops, `{`, 400, "invalid_request", "malformed JSON"},
		{"timeout_ms 0", ops, strings.Replace(infoBody, "2000", "0", 1), 400, "invalid_request", `field rule violated at "/timeout_ms"`},
		{"missing parameter", ops, strings.Replace(infoBody, `"info"`, `"command"`, 1), 400, "invalid_request", `request parameters do not match the operation at "/command"`},
		{"not ready", ops, strings.Replace(infoBody, `"operation":"info"`, `"operation":"create","bootstrap":{"image":"busybox"}`, 1), 409, "generation_not_ready", ""},
		{"offline", Prefix + "/" + nodeB + "/operations", infoBody, 503, "node_offline", ""},
		{"unknown node", Prefix + "/0e000000-0000-4000-8000-00000000000e/operations", infoBody, 404, "not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var er Error
			status := e.call(http.MethodPost, tc.path, apiToken, tc.body, &er)
			if status != tc.status || er.Error.Code != tc.code || !strings.Contains(er.Error.Message, tc.message) {
				t.Fatalf("status %d, %+v; want %d %s %q", status, er, tc.status, tc.code, tc.message)
			}
		})
	}
	if s, _ := e.hub.Node(nodeA); !s.Online || s.Pending != 0 {
		t.Fatalf("A after the refusals: %+v", s)
	}
}

// TestAPITooManyPending: with 32 operations pending on a connection the
// 33rd API call is answered 429.
func TestAPITooManyPending(t *testing.T) {
	e := newAPIEnv(t)
	release := make(chan struct{})
	var held sync.WaitGroup
	e.node(nodeA, secretA, true, func(r *proto.Request) *proto.Response { return nil })
	body := strings.Replace(infoBody, "2000", "120000", 1)
	for range proto.MaxPendingRequests {
		held.Add(1)
		go func() {
			defer held.Done()
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+Prefix+"/"+nodeA+"/operations", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiToken)
			ctx, cancel := contextUntil(release)
			defer cancel()
			if resp, err := http.DefaultClient.Do(req.WithContext(ctx)); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waittest.Until(t, 10*time.Second, "32 pending requests", func() bool { s, _ := e.hub.Node(nodeA); return s.Pending == proto.MaxPendingRequests })
	var er Error
	if status := e.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, body, &er); status != http.StatusTooManyRequests || er.Error.Code != "too_many_pending" {
		t.Fatalf("33rd: %d %+v", status, er)
	}
	close(release)
	held.Wait()
}

// TestAPIPathsAndMethods: wrong methods are 405 with Allow, unknown paths
// below the prefix 404.
func TestAPIPathsAndMethods(t *testing.T) {
	e := newAPIEnv(t)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, Prefix, 405},
		{http.MethodDelete, Prefix + "/" + nodeA, 405},
		{http.MethodGet, Prefix + "/" + nodeA + "/operations", 405},
		{http.MethodGet, Prefix + "/" + nodeA + "/other", 404},
		{http.MethodGet, Prefix + "/a/b/c", 404},
	} {
		var er Error
		if status := e.call(tc.method, tc.path, apiToken, "", &er); status != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, status, tc.status)
		}
	}
	if !Owns(Prefix) || !Owns(Prefix+"/x") || Owns(Prefix+"x") || Owns("/internal/v1") {
		t.Error("Owns is wrong")
	}
}

// contextUntil returns a context cancelled when release is closed.
func contextUntil(release <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-release:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// TestAPIPlacements: the operator lists a node's placements and releases
// one; unknown placements, malformed bodies and hubs without a placement
// store are refused.
func TestAPIPlacements(t *testing.T) {
	e := newAPIEnv(t)
	var none Error
	release := Prefix + "/" + nodeA + "/placements/release"
	body := `{"deployment_generation": 3, "reference": {"tenant_id": "t1", "environment_id": "e1", "allocation_id": "a1"}}`
	if status := e.call(http.MethodPost, release, apiToken, body, &none); status != 503 || none.Error.Code != "unavailable" {
		t.Fatalf("without a store: %d %+v", status, none)
	}
	store := placement.NewMemory()
	creds, err := credential.OpenFile(writeNodes(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = creds.Close() })
	if err := e.hub.Configure(hub.Config{Credentials: creds, OwnerEpoch: 3, Placements: store}); err != nil {
		t.Fatal(err)
	}
	r := proto.Reference{TenantID: "t1", EnvironmentID: "e1", AllocationID: "a1"}
	_ = store.Place(placement.Placement{NodeID: nodeA, Generation: 3, Reference: r})
	var list Placements
	if status := e.call(http.MethodGet, Prefix+"/"+nodeA+"/placements", apiToken, "", &list); status != 200 ||
		len(list.Placements) != 1 || list.Placements[0].DeploymentGeneration != 3 || list.Placements[0].Reference != r {
		t.Fatalf("%d %+v", status, list)
	}
	var released Released
	if status := e.call(http.MethodPost, release, apiToken, body, &released); status != 200 || !released.Released {
		t.Fatalf("%d %+v", status, released)
	}
	if store.InUse(nodeA, 3) {
		t.Fatal("still placed")
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"released twice", release, body, 404, "not_found"},
		{"unknown member", release, `{"deployment_generation": 3, "generation": 3}`, 400, "invalid_request"},
		{"no reference", release, `{"deployment_generation": 3}`, 400, "invalid_request"},
		{"unknown node", Prefix + "/0e000000-0000-4000-8000-00000000000e/placements", "", 404, "not_found"},
	} {
		var er Error
		method := http.MethodPost
		if tc.body == "" {
			method = http.MethodGet
		}
		if status := e.call(method, tc.path, apiToken, tc.body, &er); status != tc.status || er.Error.Code != tc.code {
			t.Errorf("%s: %d %+v", tc.name, status, er)
		}
	}
}

// writeNodes writes the two test nodes' credential file.
func writeNodes(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	var b strings.Builder
	b.WriteString("nodes:\n")
	for id, secret := range map[string]string{nodeA: secretA, nodeB: secretB} {
		fmt.Fprintf(&b, "  - node_id: %s\n    enabled: true\n    credential_sha256: %s\n    installation_id: %s\n    provider: docker\n    backend_fingerprint: %s\n    deployment_generation: 1\n    specification_digest: %s\n",
			id, hexSum(secret), inst, fingerprint, specDigest)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAPIDeclaredBodyTooLarge sends an operation and a release whose
// Content-Length is past their limit (72 MiB, 64 KiB), without the body:
// each is refused 413 request_too_large from its headers alone, without
// waiting for (or reading) the body.
func TestAPIDeclaredBodyTooLarge(t *testing.T) {
	e := newAPIEnv(t)
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	for path, length := range map[string]int64{
		Prefix + "/" + nodeA + "/operations":         proto.MaxRequestFrame + 1,
		Prefix + "/" + nodeA + "/placements/release": 64<<10 + 1,
	} {
		_, br := rawConn(t, addr, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n{",
			path, apiToken, length))
		resp, body := readAnswer(t, br, http.MethodPost)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"request_too_large"`) {
			t.Errorf("POST %s with Content-Length %d: %d %s; want 413 request_too_large", path, length, resp.StatusCode, body)
		}
	}
}
