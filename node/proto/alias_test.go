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
