package sim

import (
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

// TestSuccessFitsEveryOperation: Success answers each of the 15
// operations with a response that encodes and carries exactly the result
// the operation table names, classified as success.
func TestSuccessFitsEveryOperation(t *testing.T) {
	gen := int64(2)
	for _, op := range proto.Operations {
		req := &proto.Request{ID: "11111111-2222-4333-8444-555555555555", Sequence: 1,
			ConnectionID: "21111111-2222-4333-8444-555555555555", OwnerEpoch: 1, DeploymentGeneration: 1,
			Operation: op, TimeoutMS: 1000,
			Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: "a"}}
		if op == proto.OpNewCompute {
			req.Generation = &gen
		}
		resp := Success(req)
		if _, err := proto.Encode(resp); err != nil {
			t.Errorf("%s: %v", op, err)
			continue
		}
		if out, code := proto.Classify(req, resp, nil); out != proto.OutcomeSuccess {
			t.Errorf("%s: classified %v %q", op, out, code)
		}
	}
}

// TestConnectURL: http(s) origins become ws(s) and the node ID is
// escaped.
func TestConnectURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:1/":  "ws://127.0.0.1:1/api/v1/sandbox-node/connect?node_id=a+b",
		"https://core.example": "wss://core.example/api/v1/sandbox-node/connect?node_id=a+b",
		"ws://core:8":          "ws://core:8/api/v1/sandbox-node/connect?node_id=a+b",
	} {
		if got := ConnectURL(in, "a b"); got != want {
			t.Errorf("ConnectURL(%q) = %q, want %q", in, got, want)
		}
	}
}
