package proto

import (
	"testing"
)

func TestValidateFor(t *testing.T) {
	// Every operation's success response fits it, and no other operation
	// with a different result member.
	for _, op := range Operations {
		resp := exResponse(op)
		if err := resp.ValidateFor(op); err != nil {
			t.Errorf("%s: own success response: %v", op, err)
		}
		for _, other := range Operations {
			if operationTable[other].result == operationTable[op].result {
				continue
			}
			err := resp.ValidateFor(other)
			want := "/" + operationTable[op].result
			if operationTable[op].result == resultNone {
				want = "/" + operationTable[other].result
			}
			checkErr(t, err, ErrResult, want)
		}
	}
	cases := []struct {
		name    string
		resp    *Response
		op      Operation
		rule    error
		pointer string
	}{
		{"receipt on a failed create", exReceipt(), OpCreate, nil, ""},
		{"receipt on a failed info", exReceipt(), OpInfo, ErrResult, "/info"},
		{"failure without result", exFailure(ErrNotFound), OpKill, nil, ""},
		{"unsupported", exUnsupported(OpSuspend), OpSuspend, nil, ""},
		{"mismatched unsupported is not malformed", exUnsupported(OpResume), OpSuspend, nil, ""},
		{"unknown operation", exResponse(OpKill), "destroy", ErrResult, ""},
		{"context-free rules first", func() *Response { r := exResponse(OpInfo); r.ID = "x"; return r }(), OpInfo, ErrField, "/id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.resp.ValidateFor(c.op)
			if c.rule == nil {
				if err != nil {
					t.Fatalf("ValidateFor: %v", err)
				}
				return
			}
			checkErr(t, err, c.rule, c.pointer)
		})
	}
}

func TestClassify(t *testing.T) {
	req := func(op Operation) *Request { return exRequest(op) }
	cases := []struct {
		name     string
		req      *Request
		resp     *Response
		outcome  Outcome
		code     ErrorCode
		declared *Unsupported
	}{
		{"success create", req(OpCreate), exResponse(OpCreate), OutcomeSuccess, "", nil},
		{"success kill", req(OpKill), exResponse(OpKill), OutcomeSuccess, "", nil},
		{"success observe", req(OpObserve), exResponse(OpObserve), OutcomeSuccess, "", nil},
		{"success without result", req(OpInfo), exResponse(OpKill), OutcomeUnknown, ErrUnconfirmed, nil},
		{"success with wrong result", req(OpCommand), exResponse(OpObserve), OutcomeUnknown, ErrUnconfirmed, nil},
		{"success info for another allocation", req(OpInfo), func() *Response {
			r := exResponse(OpInfo)
			r.Info.Reference.AllocationID = "other"
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, nil},
		// An info of another deployment generation is not the answer
		// about the allocation in the request's generation.
		{"success info of another deployment generation", req(OpInfo), func() *Response {
			r := exResponse(OpInfo)
			r.Info.DeploymentGeneration++
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, nil},
		{"success create of another deployment generation", req(OpCreate), func() *Response {
			r := exResponse(OpCreate)
			r.Info.DeploymentGeneration--
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, nil},
		{"success renew of another deployment generation", req(OpRenew), func() *Response {
			r := exResponse(OpRenew)
			r.Info.DeploymentGeneration++
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, nil},
		{"invalid", req(OpCreate), exFailure(ErrInvalid), OutcomeFailed, ErrInvalid, nil},
		{"ownership", req(OpKill), exFailure(ErrOwnership), OutcomeFailed, ErrOwnership, nil},
		{"exists", req(OpCreate), exFailure(ErrExists), OutcomeFailed, ErrExists, nil},
		{"not_found", req(OpInfo), exFailure(ErrNotFound), OutcomeFailed, ErrNotFound, nil},
		{"command_unconfirmed", req(OpCommand), exFailure(ErrCommandUnconfirmed), OutcomeFailed, ErrCommandUnconfirmed, nil},
		{"observation_unavailable", req(OpObserve), exFailure(ErrObservationUnavailable), OutcomeFailed, ErrObservationUnavailable, nil},
		{"runtime_not_running", req(OpObserve), exFailure(ErrRuntimeNotRunning), OutcomeFailed, ErrRuntimeNotRunning, nil},
		{"failed create keeps receipt", req(OpCreate), exReceipt(), OutcomeFailed, ErrExists, nil},
		{"receipt on another operation", req(OpRenew), exReceipt(), OutcomeUnknown, ErrUnconfirmed, nil},
		{"unconfirmed", req(OpKill), exFailure(ErrUnconfirmed), OutcomeUnknown, ErrUnconfirmed, nil},
		{"unknown code", req(OpKill), exFailure("disk_on_fire"), OutcomeUnknown, ErrUnconfirmed, nil},
		{"unsupported", req(OpSuspend), exUnsupported(OpSuspend), OutcomeUnsupported, ErrUnsupported, exDeclared(OpSuspend)},
		{"unsupported for another operation", req(OpSuspend), exUnsupported(OpResume), OutcomeUnknown, ErrUnconfirmed, exDeclared(OpSuspend)},
		// The evidence is checked against the registered declaration too.
		{"unsupported, declared supported", req(OpCreate), exUnsupported(OpCreate), OutcomeUnknown, ErrUnconfirmed, nil},
		{"unsupported, no declaration", req(OpSuspend), exUnsupported(OpSuspend), OutcomeUnknown, ErrUnconfirmed, nil},
		{"unsupported, other reason than declared", req(OpSuspend), func() *Response {
			r := exUnsupported(OpSuspend)
			r.Unsupported.Reason = "x"
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, exDeclared(OpSuspend)},
		{"unsupported, declaration of another operation", req(OpSuspend), exUnsupported(OpSuspend), OutcomeUnknown, ErrUnconfirmed,
			func() *Unsupported { d := exDeclared(OpSuspend); d.Operation = OpResume; return d }()},
		{"unsupported without evidence", req(OpSuspend), exFailure(ErrUnsupported), OutcomeUnknown, ErrUnconfirmed, exDeclared(OpSuspend)},
		{"unsupported with invalid reason", req(OpSuspend), func() *Response {
			r := exUnsupported(OpSuspend)
			r.Unsupported.Reason = "line\nbreak"
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, exDeclared(OpSuspend)},
		{"unsupported with empty reason", req(OpSuspend), func() *Response {
			r := exUnsupported(OpSuspend)
			r.Unsupported.Reason = ""
			return r
		}(), OutcomeUnknown, ErrUnconfirmed, exDeclared(OpSuspend)},
		{"other request id", func() *Request { r := req(OpKill); r.ID = exRetentionID; return r }(), exResponse(OpKill), OutcomeUnknown, ErrUnconfirmed, nil},
		{"other connection", func() *Request { r := req(OpKill); r.ConnectionID = exNodeID; return r }(), exResponse(OpKill), OutcomeUnknown, ErrUnconfirmed, nil},
		{"nil response", req(OpKill), nil, OutcomeUnknown, ErrUnconfirmed, nil},
		{"nil request", nil, exResponse(OpKill), OutcomeUnknown, ErrUnconfirmed, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outcome, code := Classify(c.req, c.resp, c.declared)
			if outcome != c.outcome || code != c.code {
				t.Fatalf("Classify = (%v, %q), want (%v, %q)", outcome, code, c.outcome, c.code)
			}
		})
	}
}

func TestCreateReceipt(t *testing.T) {
	if info, ok := CreateReceipt(exRequest(OpCreate), exReceipt()); !ok || info.Reference != exReference {
		t.Fatalf("CreateReceipt = %v, %v; want the receipt", info, ok)
	}
	other := exReceipt()
	other.Info.Reference.TenantID = "someone-else"
	otherGen := exReceipt()
	otherGen.Info.DeploymentGeneration++
	for name, c := range map[string]struct {
		req  *Request
		resp *Response
	}{
		"success":          {exRequest(OpCreate), exResponse(OpCreate)},
		"not a create":     {exRequest(OpInfo), exReceipt()},
		"other reference":  {exRequest(OpCreate), other},
		"other generation": {exRequest(OpCreate), otherGen},
		"no receipt":       {exRequest(OpCreate), exFailure(ErrExists)},
		"nil":              {nil, nil},
	} {
		if info, ok := CreateReceipt(c.req, c.resp); ok || info != nil {
			t.Errorf("%s: CreateReceipt = %v, %v; want none", name, info, ok)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{
		OutcomeUnknown: "unknown", OutcomeSuccess: "success", OutcomeFailed: "failed",
		OutcomeUnsupported: "unsupported", Outcome(42): "unknown",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
	var zero Outcome
	if zero != OutcomeUnknown {
		t.Fatal("the zero Outcome is not OutcomeUnknown")
	}
}

func TestRetentionAckAnswers(t *testing.T) {
	r, a := exRetention(), exRetentionAck()
	if !a.Answers(r) {
		t.Fatal("the matching ack does not answer")
	}
	swapped := exRetentionAck()
	swapped.Entries[0], swapped.Entries[1] = swapped.Entries[1], swapped.Entries[0]
	short := exRetentionAck()
	short.Entries = short.Entries[:1]
	otherID := exRetentionAck()
	otherID.ID = exRequestID
	otherConn := exRetentionAck()
	otherConn.ConnectionID = exNodeID
	otherDigest := exRetentionAck()
	otherDigest.Entries[1].SpecificationDigest = exDigest
	for name, ack := range map[string]*RetentionAck{
		"reordered": swapped, "incomplete": short, "other id": otherID,
		"other connection": otherConn, "other digest": otherDigest, "nil": nil,
	} {
		if ack.Answers(r) {
			t.Errorf("%s ack answers", name)
		}
	}
}

// TestUUIDAndDigestEveryByte checks IsUUID and IsDigest against their
// definition with every byte value at every position of a valid value.
func TestUUIDAndDigestEveryByte(t *testing.T) {
	for _, c := range []struct {
		valid string
		check func(string) bool
		dash  func(i int) bool
	}{
		{exNodeID, IsUUID, func(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }},
		{exDigest, IsDigest, func(int) bool { return false }},
	} {
		for i := range len(c.valid) {
			for b := range 256 {
				s := []byte(c.valid)
				s[i] = byte(b)
				want := byte(b) == '-'
				if !c.dash(i) {
					want = '0' <= b && b <= '9' || 'a' <= b && b <= 'f'
				}
				if got := c.check(string(s)); got != want {
					t.Fatalf("%q: %v, want %v", s, got, want)
				}
			}
		}
	}
}

func TestIdentifierChecks(t *testing.T) {
	for s, want := range map[string]bool{
		exNodeID: true, "6F1C2D3E-4A5B-4C6D-8E7F-0123456789AB": false, "6f1c2d3e4a5b4c6d8e7f0123456789ab": false,
		"{6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab}": false, "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ag": false, "": false,
	} {
		if IsUUID(s) != want {
			t.Errorf("IsUUID(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{
		"a": true, "A.b_c-9": true, "9": true, ".a": false, "-a": false, "_a": false, "a b": false, "a/b": false, "": false,
		string(make([]byte, 129)): false,
	} {
		if IsIdentifier(s) != want {
			t.Errorf("IsIdentifier(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{
		"docker_timeout": true, "a": true, "x9_": true, "Docker": false, "a-b": false, "": false,
	} {
		if IsCode(s) != want {
			t.Errorf("IsCode(%q) = %v", s, !want)
		}
	}
}
