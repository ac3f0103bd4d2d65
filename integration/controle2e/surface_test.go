package controle2e_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
)

// update rewrites docs/corectl.md's generated SDK-surface section from the
// table (go test -run TestSDKSurfaceDoc ./integration/controle2e/ -update).
var update = flag.Bool("update", false, "rewrite docs/corectl.md's SDK-surface section from testdata/sdk-surface.json")

// surfaceTablePath is the checked-in table, relative to this package.
const surfaceTablePath = "testdata/sdk-surface.json"

// The markers around the generated section of docs/corectl.md.
const (
	surfaceBegin = "<!-- sdk-surface: generated from integration/controle2e/testdata/sdk-surface.json; go test -run TestSDKSurfaceDoc ./integration/controle2e/ -update -->"
	surfaceEnd   = "<!-- /sdk-surface -->"
)

// surfaceTable is testdata/sdk-surface.json: one row per public method of
// the JS SDK's Sandbox and of the objects it hands out.
type surfaceTable struct {
	Rows []surfaceRow `json:"rows"`
}

// surfaceRow is one method. Outcomes maps an SDK package (sdkPackages) to
// "works" (the call resolves), "absent" (that version has no such method),
// "unreachable" (a method of an object the SDK hands out only from a call
// that is refused, e.g. a watch handle) or "<ErrorName>: <message
// fragment>" (the call rejects with an error of exactly that class whose
// message contains the fragment). Note says why a refusal is deliberate;
// Gap, when set, marks a known gap (a failure that is not a deliberate
// refusal) and says why it fails. Value, when set, is the JSON value a
// call that works resolves to (the scenario reports booleans, numbers and
// strings), in every SDK version that has it.
type surfaceRow struct {
	Method   string            `json:"method"`
	Outcomes map[string]string `json:"outcomes"`
	Value    json.RawMessage   `json:"value,omitempty"`
	Note     string            `json:"note,omitempty"`
	Gap      string            `json:"gap,omitempty"`
}

// surfaceCall is one call of the "surface" scenario.
type surfaceCall struct {
	Absent      bool            `json:"absent"`
	Unreachable bool            `json:"unreachable"`
	OK          bool            `json:"ok"`
	Value       json.RawMessage `json:"value"`
	Error       *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

type surfaceResult struct {
	Calls   map[string]surfaceCall `json:"calls"`
	Surface []string               `json:"surface"`
}

func readSurfaceTable(t *testing.T) surfaceTable {
	t.Helper()
	b, err := os.ReadFile(surfaceTablePath)
	if err != nil {
		t.Fatal(err)
	}
	var tab surfaceTable
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tab); err != nil {
		t.Fatalf("%s: %v", surfaceTablePath, err)
	}
	seen := map[string]bool{}
	for _, r := range tab.Rows {
		if seen[r.Method] {
			t.Fatalf("%s: method %s twice", surfaceTablePath, r.Method)
		}
		seen[r.Method] = true
		for _, pkg := range sdkPackages {
			o := r.Outcomes[pkg]
			if o != "works" && o != "absent" && o != "unreachable" && !strings.Contains(o, ": ") {
				t.Fatalf("%s: %s %s: outcome %q is not works, absent, unreachable or \"<ErrorName>: <fragment>\"", surfaceTablePath, r.Method, pkg, o)
			}
			if o != "works" && o != "absent" && r.Note == "" && r.Gap == "" {
				t.Fatalf("%s: %s %s refuses without a note or a gap saying why", surfaceTablePath, r.Method, pkg)
			}
		}
	}
	return tab
}

// checkOutcome reports how call differs from the table's outcome want and,
// for a call that works, from its value when wantValue is set ("" when it
// matches).
func checkOutcome(want string, wantValue json.RawMessage, call surfaceCall, called bool) string {
	switch {
	case !called:
		return "not called by the scenario"
	case want == "absent":
		if !call.Absent {
			return fmt.Sprintf("the SDK has the method (ok=%v, error %+v)", call.OK, call.Error)
		}
	case call.Absent:
		return "the SDK has no such method"
	case want == "unreachable":
		if !call.Unreachable {
			return fmt.Sprintf("was reached (ok=%v, error %+v)", call.OK, call.Error)
		}
	case call.Unreachable:
		return "was not reached"
	case want == "works":
		if !call.OK {
			return fmt.Sprintf("failed: %+v", call.Error)
		}
		if wantValue != nil && !jsonEqual(wantValue, call.Value) {
			return fmt.Sprintf("resolved to %s, not %s", call.Value, wantValue)
		}
	default:
		name, fragment, _ := strings.Cut(want, ": ")
		if call.OK {
			return "worked"
		}
		if call.Error == nil || call.Error.Name != name || !strings.Contains(call.Error.Message, fragment) {
			return fmt.Sprintf("raised %+v", call.Error)
		}
	}
	return ""
}

// TestSDKSurface calls every public method of each pinned JS SDK's Sandbox
// (static and instance, and sbx.commands, sbx.files, sbx.pty, a command
// handle, a watch handle: the list is read from the SDK's index.d.ts)
// against corectl on the real apiserver and the gateway with
// extended_operations, and checks each outcome against the checked-in
// table testdata/sdk-surface.json: every public method has a row, and
// every call works or raises exactly the error class and message the table
// states.
func TestSDKSurface(t *testing.T) {
	tab := readSurfaceTable(t)
	st := startStackCaddyfile(t, "", extendedCaddyfile)
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var r surfaceResult
			runSDK(t, st.root, pkg, "surface", 3*time.Minute, &r, "E2B_API_URL="+st.api, "E2B_SANDBOX_URL="+st.h.Gateway,
				"E2B_API_KEY=key-e2e", "SCENARIO_DIR=/home/user/surface-"+pkg)
			rows := map[string]surfaceRow{}
			for _, row := range tab.Rows {
				rows[row.Method] = row
				call, called := r.Calls[row.Method]
				if diff := checkOutcome(row.Outcomes[pkg], row.Value, call, called); diff != "" {
					t.Errorf("%s: the table says %q, but it %s", row.Method, row.Outcomes[pkg], diff)
				}
			}
			for name := range r.Calls {
				if _, ok := rows[name]; !ok {
					t.Errorf("%s: called, but the table has no row", name)
				}
			}
			if len(r.Surface) == 0 {
				t.Fatal("the scenario found no public method in the SDK's index.d.ts")
			}
			for _, name := range r.Surface {
				if row, ok := rows[name]; !ok || row.Outcomes[pkg] == "absent" {
					t.Errorf("%s: public in %s's index.d.ts, but the table has no outcome for it", name, pkg)
				}
			}
		})
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// extendedCaddyfile is the harness's gateway with extended_operations.
var extendedCaddyfile = strings.Replace(harness.DefaultCaddyfile, "e2b_dataplane {", "e2b_dataplane {\n\t\textended_operations", 1)

// renderSurface is the markdown of the table, as docs/corectl.md holds it
// between the markers.
func renderSurface(tab surfaceTable) string {
	var b strings.Builder
	b.WriteString("| method |")
	for _, pkg := range sdkVersionsAscending() {
		b.WriteString(" JS " + strings.TrimPrefix(pkg, "e2b-") + " |")
	}
	b.WriteString(" why |\n|---|")
	for range sdkPackages {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, r := range tab.Rows {
		b.WriteString("| `" + r.Method + "` |")
		for _, pkg := range sdkVersionsAscending() {
			o := r.Outcomes[pkg]
			switch o {
			case "works":
				b.WriteString(" works |")
			case "absent":
				b.WriteString(" — |")
			case "unreachable":
				b.WriteString(" not reached |")
			default:
				name, fragment, _ := strings.Cut(o, ": ")
				b.WriteString(" `" + name + "` “" + strings.ReplaceAll(fragment, "|", `\|`) + "” |")
			}
		}
		why := r.Note
		if r.Gap != "" {
			why = strings.TrimSpace("**known gap:** " + r.Gap + " " + why)
		}
		b.WriteString(" " + strings.ReplaceAll(why, "|", `\|`) + " |\n")
	}
	return b.String()
}

// sdkVersionsAscending is sdkPackages, oldest first (the doc's columns).
func sdkVersionsAscending() []string {
	v := slices.Clone(sdkPackages)
	slices.Sort(v)
	return v
}

// TestSDKSurfaceDoc checks that docs/corectl.md's generated section is the
// table rendered; -update rewrites it.
func TestSDKSurfaceDoc(t *testing.T) {
	tab := readSurfaceTable(t)
	docPath := filepath.Join("..", "..", "docs", "corectl.md")
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), surfaceBegin+"\n")
	_, after, ok2 := strings.Cut(rest, surfaceEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no section between %q and %q", docPath, surfaceBegin, surfaceEnd)
	}
	want := renderSurface(tab)
	if *update {
		if err := os.WriteFile(docPath, []byte(before+surfaceBegin+"\n"+want+surfaceEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got, _, _ := strings.Cut(rest, surfaceEnd); got != want {
		t.Errorf("%s's SDK-surface section is not %s rendered; run go test -run TestSDKSurfaceDoc ./integration/controle2e/ -update", docPath, surfaceTablePath)
	}
}

// TestCheckOutcome pins how a call is held against its row.
func TestCheckOutcome(t *testing.T) {
	refused := surfaceCall{Error: &struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	}{Name: "SandboxError", Message: "501: not_supported: pause is not supported: why"}}
	cases := []struct {
		want   string
		value  string
		call   surfaceCall
		called bool
		ok     bool
	}{
		{"works", "", surfaceCall{OK: true}, true, true},
		{"works", "true", surfaceCall{OK: true, Value: json.RawMessage("true")}, true, true},
		{"works", "true", surfaceCall{OK: true, Value: json.RawMessage("false")}, true, false},
		{"works", "true", surfaceCall{OK: true}, true, false},
		{"works", "", refused, true, false},
		{"works", "", surfaceCall{OK: true}, false, false},
		{"works", "", surfaceCall{Absent: true}, true, false},
		{"absent", "", surfaceCall{Absent: true}, true, true},
		{"absent", "", surfaceCall{OK: true}, true, false},
		{"unreachable", "", surfaceCall{Unreachable: true}, true, true},
		{"unreachable", "", surfaceCall{OK: true}, true, false},
		{"works", "", surfaceCall{Unreachable: true}, true, false},
		{"SandboxError: 501: not_supported: pause", "", refused, true, true},
		{"SandboxError: not_supported: fork", "", refused, true, false},
		{"Error: 501: not_supported: pause", "", refused, true, false},
		{"SandboxError: 501", "", surfaceCall{OK: true}, true, false},
	}
	for _, c := range cases {
		var v json.RawMessage
		if c.value != "" {
			v = json.RawMessage(c.value)
		}
		if diff := checkOutcome(c.want, v, c.call, c.called); (diff == "") != c.ok {
			t.Errorf("%q %s against %+v (called %v): %q", c.want, c.value, c.call, c.called, diff)
		}
	}
}
