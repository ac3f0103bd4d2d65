package proto

import (
	"bytes"
	stdjson "encoding/json"
	"strconv"
	"strings"
	"testing"
)

// secret appears in the offending values of several cases; no error text
// may contain it.
const secret = "s3cr3t"

// edit sets (raw != "") or deletes (raw == "") the member at pointer.
type edit struct {
	pointer string
	raw     string
}

func set(pointer, raw string) edit { return edit{pointer, raw} }
func del(pointer string) edit      { return edit{pointer, ""} }

// mutate encodes f, applies the edits to its generic form and re-marshals
// it with encoding/json (which keeps numbers as written).
func mutate(t testing.TB, f Frame, edits ...edit) []byte {
	t.Helper()
	dec := stdjson.NewDecoder(bytes.NewReader(mustEncode(t, f)))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		tokens := strings.Split(e.pointer, "/")[1:]
		parent := root
		for _, tok := range tokens[:len(tokens)-1] {
			switch p := parent.(type) {
			case map[string]any:
				parent = p[tok]
			case []any:
				i, _ := strconv.Atoi(tok)
				parent = p[i]
			default:
				t.Fatalf("edit %q: no container at %q", e.pointer, tok)
			}
		}
		last := tokens[len(tokens)-1]
		switch p := parent.(type) {
		case map[string]any:
			if e.raw == "" {
				if _, ok := p[last]; !ok {
					t.Fatalf("edit %q deletes nothing", e.pointer)
				}
				delete(p, last)
			} else {
				p[last] = stdjson.RawMessage(e.raw)
			}
		case []any:
			i, _ := strconv.Atoi(last)
			p[i] = stdjson.RawMessage(e.raw)
		default:
			t.Fatalf("edit %q: no container", e.pointer)
		}
	}
	b, err := stdjson.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replace applies a textual replacement to f's encoding, failing when old
// does not occur.
func replace(t testing.TB, f Frame, old, new string) []byte {
	t.Helper()
	s := string(mustEncode(t, f))
	if !strings.Contains(s, old) {
		t.Fatalf("%q not in %s", old, s)
	}
	return []byte(strings.Replace(s, old, new, 1))
}

func observations(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, `{"generation":`+strconv.Itoa(i+1)+`,"specification_digest":"`+exDigest+`","state":"ready"}`)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func retentionEntries(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, `{"generation":`+strconv.Itoa(i+1)+`,"specification_digest":"`+exDigest+`"}`)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

type malformed struct {
	name    string
	data    []byte
	rule    error
	pointer string
}

func malformedCases(t testing.TB) []malformed {
	hb := exHeartbeat()
	pad := func(b []byte, n int) []byte { // pad with whitespace inside the object to n bytes
		return append(append(b[:len(b)-1:len(b)-1], bytes.Repeat([]byte(" "), n-len(b))...), '}')
	}
	return []malformed{
		// Size, syntax, header.
		{"oversize control frame", pad(mustEncode(t, hb), MaxControlFrame+1), ErrTooLarge, ""},
		{"oversize request", pad(mustEncode(t, exRequest(OpInfo)), MaxRequestFrame+1), ErrTooLarge, ""},
		{"empty data", nil, ErrSyntax, ""},
		{"non-object top-level", []byte(`[{"version":1,"type":"heartbeat"}]`), ErrNotObject, ""},
		{"null top-level", []byte(`null`), ErrNotObject, ""},
		{"truncated object", mustEncode(t, hb)[:40], ErrSyntax, ""},
		{"truncated value", mustEncode(t, hb)[:60], ErrSyntax, "/connection_id"},
		{"trailing garbage", append(mustEncode(t, hb), " x"...), ErrSyntax, ""},
		{"second object", append(mustEncode(t, hb), "{}"...), ErrSyntax, ""},
		{"invalid UTF-8", replace(t, hb, `"connection_id":"`, "\"connection_id\":\"\xff"), ErrSyntax, "/connection_id"},
		{"bad version", mutate(t, hb, set("/version", "2")), ErrVersion, "/version"},
		{"version as string", mutate(t, hb, set("/version", `"1"`)), ErrVersion, "/version"},
		{"version 1.0", mutate(t, hb, set("/version", `1.0`)), ErrVersion, "/version"},
		{"version null", mutate(t, hb, set("/version", `null`)), ErrVersion, "/version"},
		{"missing version", mutate(t, hb, del("/version")), ErrVersion, "/version"},
		{"unknown type", mutate(t, hb, set("/type", `"goodbye"`)), ErrType, "/type"},
		{"type not a string", mutate(t, hb, set("/type", `7`)), ErrType, "/type"},
		{"missing type", mutate(t, hb, del("/type")), ErrType, "/type"},
		// Members.
		{"unknown member", mutate(t, hb, set("/extra", `"`+secret+`"`)), ErrUnknownMember, "/extra"},
		{"nested unknown member", mutate(t, hb, set("/health/host/gpu_count", `1`)), ErrUnknownMember, "/health/host/gpu_count"},
		{"case-variant alias", mutate(t, exHello(), del("/node_id"), set("/Node_ID", `"`+exNodeID+`"`)), ErrUnknownMember, "/Node_ID"},
		{"pointer escaping", replace(t, hb, `"owner_epoch":7`, `"owner_epoch":7,"a~b/c":1`), ErrUnknownMember, "/a~0b~1c"},
		{"duplicate member", replace(t, hb, `"owner_epoch":7`, `"owner_epoch":7,"owner_epoch":7`), ErrDuplicateMember, "/owner_epoch"},
		{"duplicate member by escape", replace(t, hb, `"owner_epoch":7`, `"owner_epoch":7,"owner\u005fepoch":7`), ErrDuplicateMember, "/owner_epoch"},
		{"duplicate type", replace(t, hb, `"type":"heartbeat"`, `"type":"heartbeat","type":"heartbeat"`), ErrDuplicateMember, "/type"},
		{"null member", mutate(t, hb, set("/owner_epoch", `null`)), ErrNull, "/owner_epoch"},
		{"null optional member", mutate(t, hb, set("/health/diagnostic", `null`)), ErrNull, "/health/diagnostic"},
		{"null array element", mutate(t, hb, set("/generations/1", `null`)), ErrNull, "/generations/1"},
		{"null map value", mutate(t, exRequest(OpCommand), set("/command/env/A", `null`)), ErrNull, "/command/env/A"},
		{"missing required member", mutate(t, hb, del("/owner_epoch")), ErrMissingMember, "/owner_epoch"},
		{"missing nested member", mutate(t, hb, del("/health/host/cpu_count")), ErrMissingMember, "/health/host/cpu_count"},
		{"missing serving_generation", mutate(t, exWelcome(), del("/deployment/serving_generation")), ErrMissingMember, "/deployment/serving_generation"},
		{"missing keep", mutate(t, exRetentionAck(), del("/entries/0/keep")), ErrMissingMember, "/entries/0/keep"},
		{"empty optional string", mutate(t, hb, set("/generations/0/diagnostic", `""`)), ErrEmpty, "/generations/0/diagnostic"},
		{"empty optional array", mutate(t, hb, set("/generations", `[]`)), ErrEmpty, "/generations"},
		{"empty optional map", mutate(t, exRequest(OpCommand), set("/command/env", `{}`)), ErrEmpty, "/command/env"},
		{"zero omitzero member", mutate(t, exHello(), set("/generation_management", `false`)), ErrEmpty, "/generation_management"},
		{"wrong kind", mutate(t, hb, set("/owner_epoch", `"`+secret+`"`)), ErrKind, "/owner_epoch"},
		{"fraction in integer", mutate(t, hb, set("/owner_epoch", `7.5`)), ErrKind, "/owner_epoch"},
		{"negative sequence", mutate(t, exRequest(OpInfo), set("/sequence", `-1`)), ErrKind, "/sequence"},
		{"bad time", mutate(t, hb, set("/health/observed_at", `"`+secret+`"`)), ErrKind, "/health/observed_at"},
		{"bad base64", mutate(t, exResponse(OpCommand), set("/command/stdout", `"`+secret+`!"`)), ErrKind, "/command/stdout"},
		// Field rules.
		{"bad UUID", mutate(t, hb, set("/connection_id", `"`+strings.ToUpper(exConnection)+`"`)), ErrField, "/connection_id"},
		{"UUID without dashes", mutate(t, exHello(), set("/node_id", `"`+strings.ReplaceAll(exNodeID, "-", "")+`"`)), ErrField, "/node_id"},
		{"upper-case digest", mutate(t, exHello(), set("/specification_digest", `"`+strings.ToUpper(exDigest)+`"`)), ErrField, "/specification_digest"},
		{"short fingerprint", mutate(t, exHello(), set("/backend_fingerprint", `"abc"`)), ErrField, "/backend_fingerprint"},
		{"bad provider", mutate(t, exHello(), set("/provider", `"Docker"`)), ErrField, "/provider"},
		{"zero generation", mutate(t, exHello(), set("/deployment_generation", `0`)), ErrField, "/deployment_generation"},
		{"negative generation", mutate(t, hb, set("/generations/1/generation", `-4`)), ErrField, "/generations/1/generation"},
		{"zero owner epoch", mutate(t, exWelcome(), set("/owner_epoch", `0`)), ErrField, "/owner_epoch"},
		{"zero serving generation", mutate(t, exWelcome(), set("/deployment/serving_generation", `0`)), ErrField, "/deployment/serving_generation"},
		{"max_active 0", mutate(t, exHello(), set("/max_active", `0`)), ErrField, "/max_active"},
		{"max_active 33", mutate(t, exHello(), set("/max_active", `33`)), ErrField, "/max_active"},
		{"max_retained 1025", mutate(t, exHello(), set("/max_retained", `1025`)), ErrField, "/max_retained"},
		{"active_operations 33", mutate(t, hb, set("/health/active_operations", `33`)), ErrField, "/health/active_operations"},
		{"zero observed_at", mutate(t, hb, set("/health/observed_at", `"0001-01-01T00:00:00Z"`)), ErrField, "/health/observed_at"},
		{"cpu_percent 101", mutate(t, hb, set("/health/host/cpu_percent", `101`)), ErrField, "/health/host/cpu_percent"},
		{"cpu_count 0", mutate(t, hb, set("/health/host/cpu_count", `0`)), ErrField, "/health/host/cpu_count"},
		{"memory used over total", mutate(t, hb, set("/health/host/memory_used_bytes", `17179869185`)), ErrField, "/health/host/memory_used_bytes"},
		{"disk used over total", mutate(t, hb, set("/health/host/disk_used_bytes", `536870912001`)), ErrField, "/health/host/disk_used_bytes"},
		{"bad diagnostic code", mutate(t, hb, set("/health/diagnostic", `"Docker-`+secret+`"`)), ErrField, "/health/diagnostic"},
		{"diagnostic on ready provider", mutate(t, hb, set("/health/provider_ready", `true`)), ErrField, "/health/diagnostic"},
		{"diagnostic on ready generation", mutate(t, hb, set("/generations/1/state", `"ready"`)), ErrField, "/generations/1/diagnostic"},
		{"bad generation state", mutate(t, hb, set("/generations/0/state", `"gone"`)), ErrField, "/generations/0/state"},
		{"9 generation observations", mutate(t, hb, set("/generations", observations(9))), ErrField, "/generations"},
		{"repeated generation observation", mutate(t, hb, set("/generations/1/generation", `3`)), ErrField, "/generations/1/generation"},
		{"observations without generation_management", mutate(t, exHello(), del("/generation_management")), ErrField, "/generations"},
		{"sequence 0", mutate(t, exRequest(OpInfo), set("/sequence", `0`)), ErrField, "/sequence"},
		{"timeout 0", mutate(t, exRequest(OpInfo), set("/timeout_ms", `0`)), ErrField, "/timeout_ms"},
		{"timeout 120001", mutate(t, exRequest(OpInfo), set("/timeout_ms", `120001`)), ErrField, "/timeout_ms"},
		{"unknown operation", mutate(t, exRequest(OpInfo), set("/operation", `"destroy"`)), ErrField, "/operation"},
		{"bad reference identifier", mutate(t, exRequest(OpInfo), set("/reference/tenant_id", `"-`+secret+`"`)), ErrField, "/reference/tenant_id"},
		{"long reference identifier", mutate(t, exRequest(OpInfo), set("/reference/allocation_id", `"`+strings.Repeat("a", 129)+`"`)), ErrField, "/reference/allocation_id"},
		{"bad snapshot identifier", mutate(t, exRequest(OpDeleteSnapshot), set("/snapshot/id", `"a/b"`)), ErrField, "/snapshot/id"},
		{"create without bootstrap", mutate(t, exRequest(OpCreate), del("/bootstrap")), ErrParameters, "/bootstrap"},
		{"info with an extra bootstrap", mutate(t, exRequest(OpInfo), set("/bootstrap", `{"image":"x"}`)), ErrParameters, "/bootstrap"},
		{"new_compute without generation", mutate(t, exRequest(OpNewCompute), del("/generation")), ErrParameters, "/generation"},
		{"command_compute without compute", mutate(t, exRequest(OpCommandCompute), del("/compute")), ErrParameters, "/compute"},
		{"zero compute generation", mutate(t, exRequest(OpCompute), set("/compute/generation", `0`)), ErrField, "/compute/generation"},
		{"bad observation kind", mutate(t, exRequest(OpObserve), set("/observation/kind", `"disk"`)), ErrField, "/observation/kind"},
		{"empty image", mutate(t, exRequest(OpCreate), set("/bootstrap/image", `" "`)), ErrField, "/bootstrap/image"},
		{"negative memory limit", mutate(t, exRequest(OpCreate), set("/bootstrap/memory_bytes", `-1`)), ErrField, "/bootstrap/memory_bytes"},
		{"empty argv", mutate(t, exRequest(OpCommand), set("/command/argv", `[]`)), ErrField, "/command/argv"},
		{"empty program", mutate(t, exRequest(OpCommand), set("/command/argv/0", `""`)), ErrField, "/command/argv/0"},
		{"NUL in env value", mutate(t, exRequest(OpCommand), set("/command/env/A", `"`+secret+`\u0000"`)), ErrField, "/command/env/A"},
		{"env name with =", mutate(t, exRequest(OpCommand), set("/command/env/A=B", `"1"`)), ErrField, "/command/env/A=B"},
		{"relative cwd", mutate(t, exRequest(OpCommand), set("/command/cwd", `"tmp"`)), ErrField, "/command/cwd"},
		{"command timeout 0", mutate(t, exRequest(OpCommand), set("/command/timeout_ms", `0`)), ErrField, "/command/timeout_ms"},
		{"command timeout 120001", mutate(t, exRequest(OpCommand), set("/command/timeout_ms", `120001`)), ErrField, "/command/timeout_ms"},
		{"max_output_bytes 0", mutate(t, exRequest(OpCommand), set("/command/max_output_bytes", `0`)), ErrField, "/command/max_output_bytes"},
		{"max_output_bytes over 32 MiB", mutate(t, exRequest(OpCommand), set("/command/max_output_bytes", `33554433`)), ErrField, "/command/max_output_bytes"},
		// Responses.
		{"bad error_code", mutate(t, exFailure(ErrNotFound), set("/error_code", `"Not-`+secret+`"`)), ErrField, "/error_code"},
		{"response with two results", mutate(t, exResponse(OpInfo), set("/command", `{"exit_code":0,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"duration_ms":1}`)), ErrResult, "/command"},
		{"unsupported without the object", mutate(t, exUnsupported(OpSuspend), del("/unsupported")), ErrResult, "/unsupported"},
		{"unsupported object on a non-unsupported error", mutate(t, exUnsupported(OpSuspend), set("/error_code", `"not_found"`)), ErrResult, "/unsupported"},
		{"unsupported object on a success", mutate(t, exUnsupported(OpSuspend), del("/error_code")), ErrResult, "/unsupported"},
		{"unsupported with a receipt", mutate(t, exUnsupported(OpCreate), set("/info", string(mustEncodeValue(t, exInfo())))), ErrResult, "/info"},
		{"failure with a command result", mutate(t, exFailure(ErrInvalid), set("/command", `{"exit_code":0,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false,"duration_ms":1}`)), ErrResult, "/command"},
		{"unsupported reason not printable", mutate(t, exUnsupported(OpSuspend), set("/unsupported/reason", `"`+secret+`\n"`)), ErrField, "/unsupported/reason"},
		{"unsupported reason too long", mutate(t, exUnsupported(OpSuspend), set("/unsupported/reason", `"`+strings.Repeat("r", 257)+`"`)), ErrField, "/unsupported/reason"},
		{"unsupported unknown operation", mutate(t, exUnsupported(OpSuspend), set("/unsupported/operation", `"fly"`)), ErrField, "/unsupported/operation"},
		{"receipt renewed before created", mutate(t, exReceipt(), set("/info/renewed_at", `"2026-11-07T11:00:00Z"`)), ErrField, "/info/renewed_at"},
		{"bad instance state", mutate(t, exResponse(OpCompute), set("/state/state", `"paused"`)), ErrField, "/state/state"},
		{"negative sample cpu", mutate(t, exResponse(OpObserve), set("/sample/cpu_percent", `-1`)), ErrField, "/sample/cpu_percent"},
		// Retention.
		{"retention without entries", mutate(t, exRetention(), set("/entries", `[]`)), ErrField, "/entries"},
		{"retention with 9 entries", mutate(t, exRetention(), set("/entries", retentionEntries(9))), ErrField, "/entries"},
		{"retention entry digest", mutate(t, exRetention(), set("/entries/1/specification_digest", `"`+strings.ToUpper(exDigest2)+`"`)), ErrField, "/entries/1/specification_digest"},
		{"retention repeated generation", mutate(t, exRetention(), set("/entries/1/generation", `1`)), ErrField, "/entries/1/generation"},
		{"retention_ack zero generation", mutate(t, exRetentionAck(), set("/entries/0/generation", `0`)), ErrField, "/entries/0/generation"},
	}
}

func mustEncodeValue(t testing.TB, v any) []byte {
	t.Helper()
	b, err := stdjson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeMalformed(t *testing.T) {
	rules := map[error]bool{}
	for _, c := range malformedCases(t) {
		t.Run(c.name, func(t *testing.T) {
			f, err := Decode(c.data)
			checkErr(t, err, c.rule, c.pointer)
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error text reveals a member value: %v", err)
			}
			if r, ok := f.(*Request); f != nil && !(ok && (c.rule == ErrField || c.rule == ErrParameters) && r.envelopeValid()) {
				t.Fatalf("Decode returned a %T with the error", f)
			}
		})
		rules[c.rule] = true
	}
	for _, rule := range []error{ErrTooLarge, ErrSyntax, ErrNotObject, ErrVersion, ErrType, ErrUnknownMember,
		ErrDuplicateMember, ErrNull, ErrMissingMember, ErrEmpty, ErrKind, ErrField, ErrParameters, ErrResult} {
		if !rules[rule] {
			t.Errorf("no malformed case for %v", rule)
		}
	}
}

// TestDecodeMalformedRequestIsAnswerable checks the exception to "nil on
// error": a request with a valid envelope that breaks a field or parameter
// rule is returned so that the node can answer it invalid.
func TestDecodeMalformedRequestIsAnswerable(t *testing.T) {
	f, err := Decode(mutate(t, exRequest(OpCreate), del("/bootstrap")))
	checkErr(t, err, ErrParameters, "/bootstrap")
	r, ok := f.(*Request)
	if !ok || r.ID != exRequestID || r.Sequence != 5 || r.ConnectionID != exConnection || r.OwnerEpoch != 7 {
		t.Fatalf("got %#v, want the request", f)
	}
	f, err = Decode(mutate(t, exRequest(OpCreate), del("/bootstrap"), set("/sequence", "0")))
	checkErr(t, err, ErrField, "/sequence")
	if f != nil {
		t.Fatalf("a request with an invalid envelope was returned: %#v", f)
	}
	f, err = Decode(mutate(t, exRequest(OpCreate), set("/bootstrap/extra", "1")))
	checkErr(t, err, ErrUnknownMember, "/bootstrap/extra")
	if f != nil {
		t.Fatalf("a structurally invalid request was returned: %#v", f)
	}
}

func TestDecodeNullServingGeneration(t *testing.T) {
	data := mutate(t, exWelcome(), set("/deployment/serving_generation", "null"))
	if !bytes.Contains(data, []byte(`"serving_generation":null`)) {
		t.Fatalf("fixture lacks the null: %s", data)
	}
	f, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if w := f.(*Welcome); w.Deployment == nil || w.Deployment.ServingGeneration != nil {
		t.Fatalf("deployment %#v, want a nil serving generation", w.Deployment)
	}
	// And Encode writes the null rather than omitting the member.
	if b := mustEncode(t, f); !bytes.Contains(b, []byte(`"serving_generation":null`)) {
		t.Fatalf("Encode dropped the null: %s", b)
	}
}

// TestOnlyServingGenerationIsNullable checks the schema derived from the
// struct tags: exactly one nullable member in the whole protocol.
func TestOnlyServingGenerationIsNullable(t *testing.T) {
	var nullable []string
	seen := map[*schema]bool{}
	var walk func(path string, s *schema)
	walk = func(path string, s *schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		for _, f := range s.fields {
			if f.nullable {
				nullable = append(nullable, path+"/"+f.name)
			}
			walk(path+"/"+f.name, f.s)
		}
		walk(path+"/*", s.elem)
	}
	for typ, s := range frameSchemas {
		walk(typ, s)
	}
	if len(nullable) != 2 || !strings.HasSuffix(nullable[0], "/deployment/serving_generation") ||
		!strings.HasSuffix(nullable[1], "/deployment/serving_generation") {
		t.Fatalf("nullable members %v, want welcome and heartbeat_ack deployment/serving_generation", nullable)
	}
}

// TestHeaderScanOrder checks that the size and header checks come before
// the rest of the frame is looked at.
func TestHeaderScanOrder(t *testing.T) {
	// An oversize control frame with a syntax error after the header is
	// refused for size: the tokenizer stops at type and version.
	data := []byte(`{"type":"heartbeat","version":1,` + strings.Repeat(" ", MaxControlFrame) + `!}`)
	_, err := Decode(data)
	checkErr(t, err, ErrTooLarge, "")
	// The same frame of request type is a syntax error, not too large.
	data = []byte(`{"type":"request","version":1,` + strings.Repeat(" ", MaxControlFrame) + `!}`)
	_, err = Decode(data)
	checkErr(t, err, ErrSyntax, "")
	// A bad version is reported even when type comes after it.
	_, err = Decode([]byte(`{"version":2,"type":"heartbeat"}`))
	checkErr(t, err, ErrVersion, "/version")
	// An unknown type wins over a bad version.
	_, err = Decode([]byte(`{"version":2,"type":"bye"}`))
	checkErr(t, err, ErrType, "/type")
	// A version check happens before the strict walk: unknown members
	// after a bad version are not what is reported.
	_, err = Decode([]byte(`{"version":"1","type":"heartbeat","zzz":1}`))
	checkErr(t, err, ErrVersion, "/version")
}

func TestErrorText(t *testing.T) {
	e := &Error{Rule: ErrField, Pointer: "/a", Detail: "must be 1..2"}
	if got, want := e.Error(), `proto: field rule violated at "/a": must be 1..2`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	long := &Error{Rule: ErrUnknownMember, Pointer: "/" + strings.Repeat("n", 1000)}
	if len(long.Error()) > 400 {
		t.Fatalf("Error() is %d bytes long", len(long.Error()))
	}
}
