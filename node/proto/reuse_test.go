package proto

import (
	"bytes"
	"reflect"
	"testing"
)

// TestDecodeKeepsNoReferenceToItsInput: for a valid example of every
// frame, and for a frame Decode refuses, overwriting the input after
// Decode changes nothing in what Decode returned; the node hub relies on
// it to decode from a pooled read buffer.
func TestDecodeKeepsNoReferenceToItsInput(t *testing.T) {
	inputs := map[string][]byte{}
	for _, ex := range validExamples() {
		data, err := Encode(ex.f)
		if err != nil {
			t.Fatalf("%s: %v", ex.name, err)
		}
		inputs[ex.name] = data
	}
	bad, err := Encode(exHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	inputs["refused/unknown-member"] = append(bytes.TrimSuffix(bad, []byte("}")), []byte(`,"extra_member_name":1}`)...)
	for name, data := range inputs {
		buf := bytes.Clone(data)
		f, err := Decode(buf)
		wantF, wantErr := Decode(bytes.Clone(data))
		for i := range buf {
			buf[i] = 'x'
		}
		if !reflect.DeepEqual(f, wantF) {
			t.Errorf("%s: the frame changed with its input:\n%#v\nwant\n%#v", name, f, wantF)
		}
		if !reflect.DeepEqual(err, wantErr) {
			t.Errorf("%s: the error changed with its input: %v, want %v", name, err, wantErr)
		}
		if name == "refused/unknown-member" && err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// TestAppendEncodeIsEncode: AppendEncode appends exactly Encode's bytes
// after what dst held, and fails as Encode does, leaving dst's length.
func TestAppendEncodeIsEncode(t *testing.T) {
	prefix := []byte("kept")
	for _, ex := range validExamples() {
		want, err := Encode(ex.f)
		if err != nil {
			t.Fatalf("%s: %v", ex.name, err)
		}
		got, err := AppendEncode(bytes.Clone(prefix), ex.f)
		if err != nil || !bytes.Equal(got, append(bytes.Clone(prefix), want...)) {
			t.Fatalf("%s: AppendEncode = %q, %v; want prefix + %q", ex.name, got, err, want)
		}
	}
	big := exResponse(OpCommand)
	big.Command.Stdout = bytes.Repeat([]byte{'x'}, MaxRequestFrame)
	invalid := exHeartbeat()
	invalid.ConnectionID = "not-a-uuid"
	for name, f := range map[string]Frame{"nil": (*Heartbeat)(nil), "invalid": invalid, "too large": big} {
		_, wantErr := Encode(f)
		got, err := AppendEncode(prefix, f)
		if wantErr == nil || !reflect.DeepEqual(err, wantErr) || len(got) != len(prefix) {
			t.Fatalf("%s: AppendEncode = %d bytes, %v; Encode's error %v", name, len(got), err, wantErr)
		}
	}
}
