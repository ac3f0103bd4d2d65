// Package e2bmodeltest checks JSON bodies against the models of E2B's control
// API as its OpenAPI document defines them: the required fields, their
// types and formats, enums and nullability (e2b-dev/infra
// spec/openapi.yml at commit 54693ff35, "components.schemas"; both E2B
// SDKs' API clients are generated from it, and Python's from_dict raises
// on a missing required field or a wrong enum value). The models are
// written out here field by field from that document; only the models
// corectl answers with are included: Sandbox (create, connect),
// SandboxDetail (GET /sandboxes/{id}), ListedSandbox (the lists),
// SandboxMetric (metrics), SandboxesWithMetrics (GET /sandboxes/metrics),
// SandboxLogs and SandboxLogsV2Response (the log routes), Error (every
// error), and the models they
// reference. Unknown properties are allowed, as in E2B's schemas (none sets
// additionalProperties: false; the generated clients keep unknown keys).
//
// corectl's tests run every response body through Check.
package e2bmodeltest

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// kind is a JSON Schema type with its OpenAPI format.
type kind int

const (
	str       kind = iota // type: string
	dateTime              // type: string, format: date-time
	int32k                // type: integer, format: int32
	int64k                // type: integer, format: int64 (or no format)
	number                // type: number
	boolean               // type: boolean
	stringMap             // type: object, additionalProperties: {type: string}
	anyObject             // type: object, additionalProperties: {}
	ref                   // $ref to another model
	array                 // type: array, items: elem
	modelMap              // type: object, additionalProperties: $ref
)

// field is one property of a model.
type field struct {
	kind     kind
	required bool
	nullable bool
	enum     []string
	min      *float64 // minimum (integers and numbers)
	model    string   // for ref, or array of ref
}

func f(k kind) field                    { return field{kind: k} }
func (x field) req() field              { x.required = true; return x }
func (x field) null() field             { x.nullable = true; return x }
func (x field) oneOf(v ...string) field { x.enum = v; return x }
func (x field) atLeast(v float64) field { x.min = &v; return x }
func refTo(m string) field              { return field{kind: ref, model: m} }
func arrayOf(m string) field            { return field{kind: array, model: m} }
func mapOf(m string) field              { return field{kind: modelMap, model: m} }

// models are the E2B models, by their OpenAPI names.
var models = map[string]map[string]field{
	// Sandbox: required templateID, sandboxID, clientID, envdVersion.
	"Sandbox": {
		"templateID":         f(str).req(),
		"sandboxID":          f(str).req(),
		"alias":              f(str),
		"clientID":           f(str).req(),
		"envdVersion":        f(str).req(),
		"envdAccessToken":    f(str),
		"trafficAccessToken": f(str).null(),
		"domain":             f(str).null(),
	},
	// SandboxDetail: required templateID, sandboxID, clientID, startedAt,
	// cpuCount, memoryMB, diskSizeMB, endAt, state, envdVersion.
	"SandboxDetail": {
		"templateID":          f(str).req(),
		"alias":               f(str),
		"sandboxID":           f(str).req(),
		"clientID":            f(str).req(),
		"startedAt":           f(dateTime).req(),
		"endAt":               f(dateTime).req(),
		"envdVersion":         f(str).req(),
		"envdAccessToken":     f(str),
		"allowInternetAccess": f(boolean).null(),
		"domain":              f(str).null(),
		"cpuCount":            f(int32k).req().atLeast(1),
		"memoryMB":            f(int32k).req().atLeast(128),
		"diskSizeMB":          f(int32k).req().atLeast(0),
		"metadata":            f(stringMap),
		"state":               f(str).req().oneOf("running", "paused"),
		"network":             refTo("SandboxNetworkConfig"),
		"lifecycle":           refTo("SandboxLifecycle"),
		"volumeMounts":        arrayOf("SandboxVolumeMount"),
	},
	// ListedSandbox: required templateID, sandboxID, clientID, startedAt,
	// cpuCount, memoryMB, diskSizeMB, endAt, state, envdVersion.
	"ListedSandbox": {
		"templateID":   f(str).req(),
		"alias":        f(str),
		"sandboxID":    f(str).req(),
		"clientID":     f(str).req(),
		"startedAt":    f(dateTime).req(),
		"endAt":        f(dateTime).req(),
		"cpuCount":     f(int32k).req().atLeast(1),
		"memoryMB":     f(int32k).req().atLeast(128),
		"diskSizeMB":   f(int32k).req().atLeast(0),
		"metadata":     f(stringMap),
		"state":        f(str).req().oneOf("running", "paused"),
		"envdVersion":  f(str).req(),
		"volumeMounts": arrayOf("SandboxVolumeMount"),
	},
	// SandboxLifecycle: required autoResume, onTimeout (enum kill, pause).
	"SandboxLifecycle": {
		"autoResume": f(boolean).req(),
		"onTimeout":  f(str).req().oneOf("kill", "pause"),
	},
	// SandboxVolumeMount: required name, path.
	"SandboxVolumeMount": {
		"name": f(str).req(),
		"path": f(str).req(),
	},
	// SandboxNetworkConfig: no required fields; corectl never sends it, so
	// only its presence as an object is checked.
	"SandboxNetworkConfig": {},
	// SandboxMetric: required timestamp, timestampUnix, cpuCount,
	// cpuUsedPct, memUsed, memTotal, memCache, diskUsed, diskTotal.
	"SandboxMetric": {
		"timestamp":     f(dateTime).req(),
		"timestampUnix": f(int64k).req(),
		"cpuCount":      f(int32k).req(),
		"cpuUsedPct":    f(number).req(),
		"memUsed":       f(int64k).req(),
		"memTotal":      f(int64k).req(),
		"memCache":      f(int64k).req(),
		"diskUsed":      f(int64k).req(),
		"diskTotal":     f(int64k).req(),
	},
	// SandboxesWithMetrics: required sandboxes, an object of
	// SandboxMetric by sandbox ID.
	"SandboxesWithMetrics": {
		"sandboxes": mapOf("SandboxMetric").req(),
	},
	// SandboxLog: required timestamp, line.
	"SandboxLog": {
		"timestamp": f(dateTime).req(),
		"line":      f(str).req(),
	},
	// SandboxLogEntry: required timestamp, level (LogLevel), message,
	// fields (an object of strings).
	"SandboxLogEntry": {
		"timestamp": f(dateTime).req(),
		"message":   f(str).req(),
		"level":     f(str).req().oneOf("debug", "info", "warn", "error"),
		"fields":    f(stringMap).req(),
	},
	// SandboxLogs: required logs ([]SandboxLog), logEntries
	// ([]SandboxLogEntry).
	"SandboxLogs": {
		"logs":       arrayOf("SandboxLog").req(),
		"logEntries": arrayOf("SandboxLogEntry").req(),
	},
	// SandboxLogsV2Response: required logs ([]SandboxLogEntry).
	"SandboxLogsV2Response": {
		"logs": arrayOf("SandboxLogEntry").req(),
	},
	// Error: required code (int32), message.
	"Error": {
		"code":       f(int32k).req(),
		"error_code": f(str),
		"message":    f(str).req(),
	},
}

// Check decodes body as one JSON value and checks it against model
// ("Sandbox", "SandboxDetail", "ListedSandbox", "SandboxMetric", "Error",
// or "[]<model>" for an array of it). The error names the first
// violation by its JSON path.
func Check(model string, body []byte) error {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	if m, ok := strings.CutPrefix(model, "[]"); ok {
		return checkValue("$", arrayOf(m), v)
	}
	return checkValue("$", refTo(model), v)
}

// Models lists the model names Check knows.
func Models() []string {
	out := make([]string, 0, len(models))
	for k := range models {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func checkModel(path, name string, v any) error {
	m, ok := models[name]
	if !ok {
		return fmt.Errorf("unknown model %s", name)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %s must be an object, not %s", path, name, typeOf(v))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fd := m[k]
		val, present := obj[k]
		if !present {
			if fd.required {
				return fmt.Errorf("%s: %s requires %q", path, name, k)
			}
			continue
		}
		if err := checkValue(path+"."+k, fd, val); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(path string, fd field, v any) error {
	if v == nil {
		if fd.nullable {
			return nil
		}
		return fmt.Errorf("%s: must not be null", path)
	}
	switch fd.kind {
	case str, dateTime:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: must be a string, not %s", path, typeOf(v))
		}
		if fd.kind == dateTime {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return fmt.Errorf("%s: %q is not an RFC 3339 date-time", path, s)
			}
		}
		if fd.enum != nil && !slices.Contains(fd.enum, s) {
			return fmt.Errorf("%s: %q is not one of %v", path, s, fd.enum)
		}
	case int32k, int64k, number:
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: must be a number, not %s", path, typeOf(v))
		}
		x, err := n.Float64()
		if err != nil {
			return fmt.Errorf("%s: %s is not a number", path, n)
		}
		if fd.kind != number {
			i, err := n.Int64()
			if err != nil {
				return fmt.Errorf("%s: %s is not an integer", path, n)
			}
			if fd.kind == int32k && (i < math.MinInt32 || i > math.MaxInt32) {
				return fmt.Errorf("%s: %d is out of int32 range", path, i)
			}
		}
		if fd.min != nil && x < *fd.min {
			return fmt.Errorf("%s: %s is below the minimum %v", path, n, *fd.min)
		}
	case boolean:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: must be a boolean, not %s", path, typeOf(v))
		}
	case stringMap:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be an object, not %s", path, typeOf(v))
		}
		for k, e := range obj {
			if _, ok := e.(string); !ok {
				return fmt.Errorf("%s.%s: must be a string, not %s", path, k, typeOf(e))
			}
		}
	case ref:
		return checkModel(path, fd.model, v)
	case modelMap:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be an object, not %s", path, typeOf(v))
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := checkModel(path+"."+k, fd.model, obj[k]); err != nil {
				return err
			}
		}
	case array:
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: must be an array, not %s", path, typeOf(v))
		}
		for i, e := range list {
			if err := checkModel(fmt.Sprintf("%s[%d]", path, i), fd.model, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func typeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
