package proto

import (
	"bytes"
	stdjson "encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const docsPath = "../../docs/node-protocol.md"

func readDocs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the lines after the heading line equal to heading, up to
// the next heading of any level.
func section(t *testing.T, doc, heading string) []string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if l != heading {
			continue
		}
		var out []string
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "#") {
				break
			}
			out = append(out, l)
		}
		return out
	}
	t.Fatalf("docs have no heading %q", heading)
	return nil
}

// tableRows returns the body rows of the first markdown table in lines,
// each cell trimmed and stripped of backquotes.
func tableRows(lines []string) [][]string {
	var rows [][]string
	inTable := false
	for _, l := range lines {
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		if !inTable {
			inTable = true // header row
			continue
		}
		if strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "`", "")
		}
		rows = append(rows, cells)
	}
	return rows
}

// TestDocsExamples decodes every JSON example of the docs and checks that
// it is exactly what Encode writes for the decoded frame, and that every
// frame type has an example.
func TestDocsExamples(t *testing.T) {
	doc := readDocs(t)
	blocks := regexp.MustCompile("(?s)```json\n(.*?)\n```").FindAllStringSubmatch(doc, -1)
	types := map[string]bool{}
	for _, b := range blocks {
		f, err := Decode([]byte(b[1]))
		if err != nil {
			t.Errorf("docs example does not decode: %v\n%s", err, b[1])
			continue
		}
		types[f.FrameType()] = true
		var compact bytes.Buffer
		if err := stdjson.Compact(&compact, []byte(b[1])); err != nil {
			t.Fatal(err)
		}
		if enc := mustEncode(t, f); !bytes.Equal(enc, compact.Bytes()) {
			t.Errorf("docs example is not canonical:\n got %s\nwant %s", compact.Bytes(), enc)
		}
	}
	for _, typ := range []string{TypeHello, TypeWelcome, TypeHeartbeat, TypeHeartbeatAck, TypeRequest, TypeResponse, TypeRetention, TypeRetentionAck} {
		if !types[typ] {
			t.Errorf("docs have no example of %s", typ)
		}
	}
}

// structTypes collects the struct types reachable from the frames, by Go
// name (time.Time excluded).
func structTypes() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() || out[t.Name()] != nil {
			return
		}
		out[t.Name()] = t
		for i := range t.NumField() {
			visit(t.Field(i).Type)
		}
	}
	for _, f := range []Frame{&Hello{}, &Welcome{}, &Heartbeat{}, &HeartbeatAck{}, &Request{}, &Response{}, &Retention{}, &RetentionAck{}} {
		visit(reflect.TypeOf(f))
	}
	return out
}

func presence(f schemaField) string {
	switch {
	case f.nullable:
		return "nullable"
	case f.required:
		return "required"
	case f.omitZero:
		return "optional, omitted when zero"
	default:
		return "optional"
	}
}

// TestDocsMemberTables checks every frame's and nested object's member
// table (names, order and presence) against the schema Decode uses.
func TestDocsMemberTables(t *testing.T) {
	doc := readDocs(t)
	frameTypes := map[string]reflect.Type{}
	for name, typ := range structTypes() {
		switch name {
		case "Hello", "Welcome", "Heartbeat", "HeartbeatAck", "Request", "Response", "Retention", "RetentionAck":
			frameTypes[name] = typ
		default:
			checkMemberTable(t, section(t, doc, "### Object: "+name), name, schemaOf(typ))
		}
	}
	for _, typ := range []string{TypeHello, TypeWelcome, TypeHeartbeat, TypeHeartbeatAck, TypeRequest, TypeResponse, TypeRetention, TypeRetentionAck} {
		checkMemberTable(t, section(t, doc, "### Frame: "+typ), typ, frameSchemas[typ])
	}
	if len(frameTypes) != 8 {
		t.Fatalf("found %d frame structs", len(frameTypes))
	}
	// No section for a type that does not exist.
	types := structTypes()
	for _, m := range regexp.MustCompile(`(?m)^### Object: (\S+)$`).FindAllStringSubmatch(doc, -1) {
		if types[m[1]] == nil {
			t.Errorf("docs describe an object %s that the code lacks", m[1])
		}
	}
}

func checkMemberTable(t *testing.T, lines []string, name string, s *schema) {
	t.Helper()
	rows := tableRows(lines)
	var got, want []string
	for _, r := range rows {
		if len(r) < 3 {
			t.Fatalf("%s: short row %q", name, r)
		}
		got = append(got, r[0]+" ("+r[2]+")")
	}
	for _, f := range s.fields {
		want = append(want, f.name+" ("+presence(f)+")")
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s member table:\n got %q\nwant %q", name, got, want)
	}
}

// TestDocsOperationTable checks the docs' operation table against the
// table Decode and ValidateFor use.
func TestDocsOperationTable(t *testing.T) {
	rows := tableRows(section(t, readDocs(t), "## Operations"))
	var ops []Operation
	for _, r := range rows {
		op := Operation(r[0])
		ops = append(ops, op)
		spec, ok := operationTable[op]
		if !ok {
			t.Errorf("docs list unknown operation %q", op)
			continue
		}
		var params []string
		for _, p := range paramOrder {
			switch {
			case spec.required&p.bit != 0:
				params = append(params, p.name)
			case spec.optional&p.bit != 0:
				params = append(params, "optional "+p.name)
			}
		}
		// The docs follow the spec's wording order; compare as sets.
		slices.Sort(params)
		docParams := strings.Split(r[2], ", ")
		slices.Sort(docParams)
		wantParams := strings.Join(params, ", ")
		if wantParams == "" {
			wantParams = "none"
		}
		gotParams := strings.Join(docParams, ", ")
		wantResult := spec.result
		if wantResult == resultNone {
			wantResult = "none"
		}
		if gotParams != wantParams || r[3] != wantResult {
			t.Errorf("%s: docs say parameters %q result %q; code has %q, %q", op, r[2], r[3], wantParams, wantResult)
		}
	}
	if !slices.Equal(ops, Operations) {
		t.Errorf("docs list operations %v, want %v", ops, Operations)
	}
}

// TestDocsOutcomeTable checks the docs' outcome table against Classify.
func TestDocsOutcomeTable(t *testing.T) {
	rows := tableRows(section(t, readDocs(t), "## Error codes and outcomes"))
	listed := map[ErrorCode]bool{}
	for _, r := range rows {
		var resp *Response
		op := OpSuspend
		switch r[0] {
		case "(absent)":
			resp = exResponse(op)
		case "any other code":
			resp = exFailure("some_new_code")
		case string(ErrUnsupported):
			resp = exUnsupported(op)
		default:
			resp = exFailure(ErrorCode(r[0]))
			listed[ErrorCode(r[0])] = true
		}
		outcome, _ := Classify(exRequest(op), resp, exDeclared(op))
		if outcome.String() != r[1] {
			t.Errorf("docs: %s is %s; Classify says %s", r[0], r[1], outcome)
		}
	}
	for code := range definiteCodes {
		if !listed[code] {
			t.Errorf("docs do not list %s", code)
		}
	}
}

// TestDiagnosticsAgree checks that the Go map, the fixture and the docs
// table list exactly the same codes with the same causes.
func TestDiagnosticsAgree(t *testing.T) {
	var fixture struct {
		Fallback string `json:"fallback"`
		Codes    []struct {
			Code  string `json:"code"`
			Cause string `json:"cause"`
		} `json:"codes"`
	}
	b, err := os.ReadFile("testdata/node-diagnostics.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := stdjson.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fixture); err != nil {
		t.Fatal(err)
	}
	if fixture.Fallback != DiagProviderUnavailable {
		t.Errorf("fixture fallback %q, want %q", fixture.Fallback, DiagProviderUnavailable)
	}
	fromFixture := map[string]string{}
	for _, c := range fixture.Codes {
		if _, dup := fromFixture[c.Code]; dup {
			t.Errorf("fixture lists %s twice", c.Code)
		}
		fromFixture[c.Code] = c.Cause
	}
	fromDocs := map[string]string{}
	for _, r := range tableRows(section(t, readDocs(t), "## Diagnostic codes")) {
		if _, dup := fromDocs[r[0]]; dup {
			t.Errorf("docs list %s twice", r[0])
		}
		fromDocs[r[0]] = r[1]
	}
	if !reflect.DeepEqual(fromFixture, diagnostics) {
		t.Errorf("fixture and Go map differ:\n%v\n%v", fromFixture, diagnostics)
	}
	if !reflect.DeepEqual(fromDocs, diagnostics) {
		t.Errorf("docs table and Go map differ:\n%v\n%v", fromDocs, diagnostics)
	}
	for code, cause := range diagnostics {
		if !IsCode(code) || cause == "" {
			t.Errorf("diagnostic %q is not a valid code with a cause", code)
		}
	}
	if _, ok := diagnostics[DiagProviderUnavailable]; !ok {
		t.Error("the fallback code has no cause")
	}
}

func TestNormalizeDiagnostic(t *testing.T) {
	for _, code := range DiagnosticCodes() {
		if got := NormalizeDiagnostic(code); got != code {
			t.Errorf("NormalizeDiagnostic(%q) = %q", code, got)
		}
		if cause, ok := DiagnosticCause(code); !ok || cause != diagnostics[code] {
			t.Errorf("DiagnosticCause(%q) = %q, %v", code, cause, ok)
		}
	}
	for _, code := range []string{"", "disk_on_fire", "Docker_Unreachable", "docker unreachable"} {
		if got := NormalizeDiagnostic(code); got != DiagProviderUnavailable {
			t.Errorf("NormalizeDiagnostic(%q) = %q, want %q", code, got, DiagProviderUnavailable)
		}
		if _, ok := DiagnosticCause(code); ok {
			t.Errorf("DiagnosticCause(%q) knows an unknown code", code)
		}
	}
	codes := DiagnosticCodes()
	if !slices.IsSorted(codes) || len(codes) != len(diagnostics) {
		t.Errorf("DiagnosticCodes() = %v", codes)
	}
}
