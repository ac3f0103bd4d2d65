package dataplane

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
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

// TestProcessStartLargeOutputBeforeInit: more than 64 KiB of output
// before the command's init event, a line over 64 KiB among it, is all
// relayed after the start event and the stream ends cleanly: the early
// output's large-line slot covers the large line (one slot per sandbox;
// asking for a second one for the line waited for the first, held by the
// same stream, until upstream_wait).
func TestProcessStartLargeOutputBeforeInit(t *testing.T) {
	e := newTestEnv(t, func(c *Config, _ *execdstub.Config) { c.UpstreamWait = 5 * time.Second })
	small, line := strings.Repeat("s", 40<<10), strings.Repeat("L", 200<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/command" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"type":"stdout","text":"` + small + `"}`, `{"type":"stdout","text":"` + small + `"}`,
			`{"type":"stdout","text":"` + line + `"}`, `{"type":"init","text":"0123456789abcdef0123456789abcdef"}`,
			`{"type":"stdout","text":"after"}`, `{"type":"execution_complete","execution_time":1}`,
		} {
			_, _ = io.WriteString(w, ev+"\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{execd.DefaultPort: srv.Listener.Addr().String()}})
	resp, err := testClient.Do(e.startRequest(startMsg("x")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	var end frame
	for f := range slices.Values(readFrames(t, mustReadAll(t, resp.Body))) {
		if f.flags == connect.FlagEndStream {
			end = f
			break
		}
		ev, _ := f.json["event"].(map[string]any)
		if d, _ := ev["data"].(map[string]any); d != nil {
			b, _ := base64.StdEncoding.DecodeString(d["stdout"].(string))
			out.WriteString(string(b))
		}
	}
	if want := small + "\n" + small + "\n" + line + "\nafter\n"; out.String() != want {
		t.Fatalf("%d bytes of stdout relayed, want %d", out.Len(), len(want))
	}
	if end.json["error"] != nil {
		t.Fatalf("the stream ended with %v", end.json["error"])
	}
}

func mustReadAll(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
