package proto

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// frameEqual compares two decoded frames: times by instant and offset, nil
// and empty slices and maps as equal, everything else exactly.
func frameEqual(a, b any) bool {
	return valueEqual(reflect.ValueOf(a), reflect.ValueOf(b))
}

func valueEqual(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	if a.Type() == timeType {
		ta, tb := a.Interface().(time.Time), b.Interface().(time.Time)
		_, oa := ta.Zone()
		_, ob := tb.Zone()
		return ta.Equal(tb) && oa == ob
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return valueEqual(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !valueEqual(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !valueEqual(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !valueEqual(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	default:
		return a.Equal(b)
	}
}

func mustEncode(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := Encode(f)
	if err != nil {
		t.Fatalf("Encode(%T): %v", f, err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, ex := range validExamples() {
		t.Run(ex.name, func(t *testing.T) {
			b := mustEncode(t, ex.f)
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode(%s): %v", b, err)
			}
			if got.FrameType() != ex.f.FrameType() {
				t.Fatalf("type %q, want %q", got.FrameType(), ex.f.FrameType())
			}
			if !frameEqual(got, ex.f) {
				t.Fatalf("round trip changed the frame:\n got %#v\nwant %#v", got, ex.f)
			}
			again := mustEncode(t, got)
			if !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs:\n%s\n%s", again, b)
			}
		})
	}
}

// TestRoundTripCoversEverything checks that the examples include every
// frame type, a request and a success response for every operation, and
// every result member.
func TestRoundTripCoversEverything(t *testing.T) {
	types := map[string]bool{}
	ops := map[Operation]bool{}
	results := map[string]bool{}
	for _, ex := range validExamples() {
		types[ex.f.FrameType()] = true
		switch f := ex.f.(type) {
		case *Request:
			ops[f.Operation] = true
		case *Response:
			for _, m := range f.results() {
				if m.present {
					results[m.name] = true
				}
			}
		}
	}
	if len(types) != 8 || len(ops) != len(Operations) || len(Operations) != 15 || len(results) != 5 {
		t.Fatalf("examples cover %d types, %d operations, %d results", len(types), len(ops), len(results))
	}
}

func TestEncodeSetsHeader(t *testing.T) {
	h := exHello()
	h.Version, h.Type = 9, "nonsense"
	b := mustEncode(t, h)
	if h.Version != ProtocolVersion || h.Type != TypeHello {
		t.Fatalf("Encode left version %d type %q", h.Version, h.Type)
	}
	if !bytes.HasPrefix(b, []byte(`{"version":1,"type":"hello",`)) {
		t.Fatalf("encoding starts %.40s", b)
	}
}

func TestEncodeRefusals(t *testing.T) {
	cases := []struct {
		name    string
		f       Frame
		rule    error
		pointer string
	}{
		{"nil interface", nil, ErrType, ""},
		{"nil pointer", (*Hello)(nil), ErrType, ""},
		{"bad field", func() Frame { h := exHello(); h.MaxActive = 0; return h }(), ErrField, "/max_active"},
		{"nil argv", func() Frame { r := exRequest(OpCommand); r.Command.Argv = nil; return r }(), ErrField, "/command/argv"},
		{"missing parameter", func() Frame { r := exRequest(OpSuspend); r.Suspend = nil; return r }(), ErrParameters, "/suspend"},
		{"invalid UTF-8 env value", func() Frame {
			r := exRequest(OpCommand)
			r.Command.Env = map[string]string{"K": "\xff"}
			return r
		}(), ErrField, "/command/env/K"},
		{"foreign frame type", foreignFrame{}, ErrType, ""},
		{"oversize response", func() Frame {
			r := exResponse(OpCommand)
			r.Command.Stdout = make([]byte, MaxCommandOutputBytes)
			r.Command.Stderr = make([]byte, MaxCommandOutputBytes)
			return r
		}(), ErrTooLarge, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Encode(c.f)
			checkErr(t, err, c.rule, c.pointer)
			if b != nil {
				t.Fatalf("Encode returned %d bytes with an error", len(b))
			}
		})
	}
}

// foreignFrame implements Frame but is none of the eight frames.
type foreignFrame struct{}

func (foreignFrame) FrameType() string { return TypeHeartbeat }

func checkErr(t *testing.T, err error, rule error, pointer string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v at %q", rule, pointer)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if !errors.Is(err, rule) || e.Rule != rule {
		t.Fatalf("rule %v, want %v (%v)", e.Rule, rule, err)
	}
	if e.Pointer != pointer {
		t.Fatalf("pointer %q, want %q (%v)", e.Pointer, pointer, err)
	}
}

// TestPeekType: the type is found when its member lies within the prefix,
// whatever precedes it, and not otherwise.
func TestPeekType(t *testing.T) {
	for in, want := range map[string]string{
		`{"version":1,"type":"response","id":"`:                   TypeResponse,
		`{"type":"heartbeat"`:                                     TypeHeartbeat,
		` { "id" : "x", "info": {"a": [1, 2]}, "type": "request"`: TypeRequest,
		`{"version":1,"type":"respo`:                              "",
		`{"version":1,"type":"nonsense"}`:                         "",
		`{"version":1,"type":7}`:                                  "",
		`{"stdout":"` + strings.Repeat("x", 100):                  "",
		`["type","response"]`:                                     "",
		``:                                                        "",
	} {
		got, ok := PeekType([]byte(in))
		if got != want || ok != (want != "") {
			t.Errorf("PeekType(%.40q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
