package proto

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode. It must never panic, every
// refusal must be an *Error, PeekType must name the type of every accepted
// frame (and of its encoding's first 40 bytes), and every accepted frame
// must re-encode, and decode again to an equal frame with identical bytes.
func FuzzDecode(f *testing.F) {
	for _, ex := range validExamples() {
		b, err := Encode(ex.f)
		if err != nil {
			f.Fatalf("%s: %v", ex.name, err)
		}
		f.Add(b)
	}
	for _, c := range malformedCases(f) {
		if len(c.data) <= MaxControlFrame {
			f.Add(c.data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Rule == nil {
				t.Fatalf("error %T %v is not an *Error with a rule", err, err)
			}
			if got != nil {
				r, ok := got.(*Request)
				if !ok || !(errors.Is(err, ErrField) || errors.Is(err, ErrParameters)) || !r.envelopeValid() {
					t.Fatalf("Decode returned %T with %v", got, err)
				}
			}
			return
		}
		if typ, ok := PeekType(data); !ok || typ != got.FrameType() {
			t.Fatalf("PeekType of an accepted %s frame: %q, %v", got.FrameType(), typ, ok)
		}
		b1, err := Encode(got)
		if err != nil {
			t.Fatalf("Decode accepted what Encode refuses: %v\n%q", err, data)
		}
		if typ, ok := PeekType(b1[:min(len(b1), 40)]); !ok || typ != got.FrameType() {
			t.Fatalf("PeekType of the first 40 bytes Encode wrote: %q, %v", typ, ok)
		}
		again, err := Decode(b1)
		if err != nil {
			t.Fatalf("Decode refuses what Encode wrote: %v\n%s", err, b1)
		}
		if !frameEqual(got, again) {
			t.Fatalf("re-decoded frame differs:\n%#v\n%#v", got, again)
		}
		b2, err := Encode(again)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable (%v):\n%s\n%s", err, b1, b2)
		}
	})
}

// FuzzEncodeDecode mutates numeric and string members of valid frames and
// checks that Encode and Decode agree, and AppendEncode with Encode: what
// Encode writes, Decode accepts as an equal frame, and what Encode refuses
// for a field rule, Decode refuses with the same rule and pointer.
func FuzzEncodeDecode(f *testing.F) {
	f.Add(uint8(0), int64(1), "x", uint8(0))
	f.Add(uint8(3), int64(0), "", uint8(5))
	f.Add(uint8(7), int64(-1), "A", uint8(14))
	f.Add(uint8(11), int64(120001), "snap/1", uint8(2))
	f.Fuzz(func(t *testing.T, which uint8, n int64, s string, opIndex uint8) {
		op := Operations[int(opIndex)%len(Operations)]
		var fr Frame
		switch which % 12 {
		case 0:
			h := exHello()
			h.MaxActive, h.Health.Diagnostic = int(n), s
			fr = h
		case 1:
			h := exHeartbeat()
			h.OwnerEpoch, h.Health.ActiveOperations = n, int(n)
			fr = h
		case 2:
			w := exWelcome()
			w.Deployment.ServingGeneration = &n
			w.ConnectionID = s
			fr = w
		case 3:
			r := exRequest(op)
			r.TimeoutMS, r.Reference.TenantID = int(n), s
			fr = r
		case 4:
			r := exRequest(op)
			r.Sequence = uint64(n)
			if r.Command != nil {
				r.Command.Argv = append(r.Command.Argv, s)
				r.Command.Env = map[string]string{s: s}
			}
			fr = r
		case 5:
			r := exResponse(op)
			r.ErrorCode = ErrorCode(s)
			fr = r
		case 6:
			r := exUnsupported(op)
			r.Unsupported.Reason = s
			fr = r
		case 7:
			r := exResponse(op)
			if r.Command != nil {
				r.Command.Stdout = []byte(s)
				r.Command.DurationMS = n
			}
			if r.Info != nil {
				r.Info.Image = s
			}
			fr = r
		case 8:
			r := exRetention()
			r.Entries[0].Generation = n
			r.Entries[1].SpecificationDigest = s
			fr = r
		case 9:
			a := exRetentionAck()
			a.Entries = a.Entries[:int(uint64(n)%3)]
			fr = a
		case 10:
			h := exHeartbeat()
			h.Generations[0].Diagnostic = s
			h.Health.Host.CPUPercent = float64(n) / 7
			fr = h
		case 11:
			r := exRequest(op)
			r.Generation = &n
			fr = r
		}
		b, err := Encode(fr)
		appended, appendErr := AppendEncode([]byte("prefix"), fr)
		if (err == nil) != (appendErr == nil) || (err == nil && string(appended) != "prefix"+string(b)) ||
			(err != nil && (appendErr.Error() != err.Error() || string(appended) != "prefix")) {
			t.Fatalf("AppendEncode = %q, %v; Encode = %q, %v", appended, appendErr, b, err)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Encode error %T is not an *Error", err)
			}
			return
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode refuses what Encode wrote: %v\n%s", err, b)
		}
		if !frameEqual(got, fr) {
			t.Fatalf("round trip changed the frame:\n%#v\n%#v", got, fr)
		}
	})
}
