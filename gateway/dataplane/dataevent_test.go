package dataplane

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// TestDataEventJSONMatchesMarshal: a large data event's own encoding is
// json.Marshal's, byte for byte, for both streams and every length modulo
// 3 (base64's padding), and takes one allocation of its exact size.
func TestDataEventJSONMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 4, 5, largeData, largeData + 1, largeData + 2, 1 << 20} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		for _, stream := range []string{execd.EventStdout, execd.EventStderr} {
			d := &envd.DataEvent{}
			if stream == execd.EventStdout {
				d.Stdout = b
			} else {
				d.Stderr = b
			}
			want, err := json.Marshal(envd.StartResponse{Event: envd.ProcessEvent{Data: d}})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 { // omitempty: an empty payload is never sent
				continue
			}
			got := dataEventJSON(stream, b, false)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, %d bytes: %.100q, want %.100q", stream, n, got, want)
			}
			if len(got) != cap(got) {
				t.Fatalf("%s, %d bytes: encoding of %d bytes in a buffer of %d", stream, n, len(got), cap(got))
			}
			// With the newline: as the bytes and "\n" marshalled together.
			withNL := append(append([]byte(nil), b...), '\n')
			if stream == execd.EventStdout {
				d.Stdout = withNL
			} else {
				d.Stderr = withNL
			}
			want, _ = json.Marshal(envd.StartResponse{Event: envd.ProcessEvent{Data: d}})
			if got := dataEventJSON(stream, b, true); !bytes.Equal(got, want) || len(got) != cap(got) {
				t.Fatalf("%s, %d bytes and a newline: %.100q, want %.100q", stream, n, got, want)
			}
		}
	}
	b := bytes.Repeat([]byte{'x'}, largeData+1)
	if a := testing.AllocsPerRun(10, func() { _ = dataEventJSON(execd.EventStdout, b, true) }); a != 1 {
		t.Fatalf("%v allocations, want 1", a)
	}
}

// TestSendLineLarge: a large output line is relayed as outputStream.line
// would have it (the text and a newline; before the marker, the text
// alone and the stream's end), and nothing after the marker.
func TestSendLineLarge(t *testing.T) {
	text := strings.Repeat("y", largeData+7)
	for _, tc := range []struct {
		in, want string
		done     bool
	}{
		{text, text + "\n", false},
		{text + "MARK", text, true},
	} {
		rec := httptest.NewRecorder()
		sw := connect.NewStreamWriter(rec)
		o := &outputStream{marker: "MARK"}
		if !(&Handler{}).sendLine(sw, execd.EventStdout, o, tc.in) || o.done != tc.done {
			t.Fatalf("nothing sent, or done %v", o.done)
		}
		if (&Handler{}).sendLine(sw, execd.EventStdout, o, tc.in) != !tc.done {
			t.Fatalf("the second line: sent %v, want %v", tc.done, !tc.done)
		}
		_, p, err := connect.ReadEnvelope(bytes.NewReader(rec.Body.Bytes()), 1<<20)
		var m envd.StartResponse
		if err != nil || json.Unmarshal(p, &m) != nil || m.Event.Data == nil || string(m.Event.Data.Stdout) != tc.want {
			t.Fatalf("%v: the relayed line is not the expected %d bytes", err, len(tc.want))
		}
	}
}
