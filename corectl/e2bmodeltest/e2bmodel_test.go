package e2bmodeltest

import (
	"strings"
	"testing"
)

const detail = `{"templateID":"base","sandboxID":"sb1","clientID":"c","startedAt":"2026-01-01T00:00:00Z",
 "endAt":"2026-01-01T00:05:00.000Z","envdVersion":"0.5.7","cpuCount":2,"memoryMB":2048,"diskSizeMB":0,
 "metadata":{"a":"b"},"state":"running","lifecycle":{"autoResume":false,"onTimeout":"kill"},"domain":null,"extra":1}`

// TestCheck: a conforming body passes; each kind of violation is named by
// its path.
func TestCheck(t *testing.T) {
	if err := Check("SandboxDetail", []byte(detail)); err != nil {
		t.Fatalf("a conforming SandboxDetail: %v", err)
	}
	if err := Check("[]ListedSandbox", []byte(`[]`)); err != nil {
		t.Fatalf("an empty list: %v", err)
	}
	if err := Check("SandboxesWithMetrics", []byte(`{"sandboxes":{}}`)); err != nil {
		t.Fatalf("no metrics: %v", err)
	}
	for _, tc := range []struct{ name, model, body, want string }{
		{"missing required", "SandboxDetail", strings.Replace(detail, `"cpuCount":2,`, "", 1), `requires "cpuCount"`},
		{"string for integer", "SandboxDetail", strings.Replace(detail, `"cpuCount":2`, `"cpuCount":"2"`, 1), "$.cpuCount: must be a number"},
		{"fraction for integer", "SandboxDetail", strings.Replace(detail, `"cpuCount":2`, `"cpuCount":2.5`, 1), "not an integer"},
		{"below minimum", "SandboxDetail", strings.Replace(detail, `"memoryMB":2048`, `"memoryMB":64`, 1), "below the minimum 128"},
		{"int32 range", "SandboxDetail", strings.Replace(detail, `"memoryMB":2048`, `"memoryMB":4294967296`, 1), "out of int32 range"},
		{"bad date-time", "SandboxDetail", strings.Replace(detail, `"2026-01-01T00:00:00Z"`, `"yesterday"`, 1), "not an RFC 3339 date-time"},
		{"enum", "SandboxDetail", strings.Replace(detail, `"running"`, `"ready"`, 1), `"ready" is not one of`},
		{"lifecycle as a string", "SandboxDetail", strings.Replace(detail, `{"autoResume":false,"onTimeout":"kill"}`, `"Ready"`, 1), "$.lifecycle: SandboxLifecycle must be an object"},
		{"nested enum", "SandboxDetail", strings.Replace(detail, `"kill"`, `"stop"`, 1), "$.lifecycle.onTimeout"},
		{"metadata value", "SandboxDetail", strings.Replace(detail, `{"a":"b"}`, `{"a":1}`, 1), "$.metadata.a: must be a string"},
		{"null where not nullable", "SandboxDetail", strings.Replace(detail, `"clientID":"c"`, `"clientID":null`, 1), "$.clientID: must not be null"},
		{"array element", "[]ListedSandbox", `[{}]`, `$[0]: ListedSandbox requires`},
		{"not an array", "[]SandboxMetric", `{}`, "must be an array"},
		{"error code as string", "Error", `{"code":"404","message":"x"}`, "$.code: must be a number"},
		{"trailing data", "Error", `{"code":404,"message":"x"} {}`, "trailing data"},
		{"metrics map value", "SandboxesWithMetrics", `{"sandboxes":{"sb1":{}}}`, `$.sandboxes.sb1: SandboxMetric requires`},
		{"metrics map missing", "SandboxesWithMetrics", `{}`, `requires "sandboxes"`},
		{"metrics map not an object", "SandboxesWithMetrics", `{"sandboxes":[]}`, "$.sandboxes: must be an object"},
	} {
		err := Check(tc.model, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check = %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
}
