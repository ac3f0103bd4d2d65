package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

// answerSamples are answers as the handler writes them, with characters
// encoding/json escapes (HTML, U+2028) and a long one past
// maxPooledAnswer.
func answerSamples() []any {
	long := make([]string, 0, 4000)
	for range 4000 {
		long = append(long, "replica-<&>-\u2028")
	}
	return []any{
		OperationResult{Outcome: "success", Sent: true, RequestID: inst, Sequence: 7, ConnectionID: nodeA, OwnerEpoch: 3,
			Response: &proto.Response{Version: 1, Type: proto.TypeResponse, ID: inst, ConnectionID: nodeA,
				Command: &proto.CommandResult{ExitCode: 1, Stdout: []byte("<b>&\u2028"), Stderr: []byte{0, 255}}}},
		OperationResult{Outcome: "unknown", ErrorCode: proto.ErrUnconfirmed, Reason: "timeout"},
		Error{Error: ErrorBody{Code: "invalid_request", Message: `unknown member at "/a<b>"`}},
		Released{Released: true},
		Nodes{Partial: true, UnreachableReplicas: long},
	}
}

// TestWriteJSONWritesMarshalPlusNewline: the pooled encoding writes
// exactly what json.Marshal gave plus a newline, answer after answer
// (a reused buffer carries nothing over, a short answer after a long one
// included), with the status and headers asked for.
func TestWriteJSONWritesMarshalPlusNewline(t *testing.T) {
	samples := answerSamples()
	for round := range 2 {
		for i, v := range append(samples, samples[0]) {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			writeJSON(rec, http.StatusAccepted, v)
			if got := rec.Body.String(); got != string(want)+"\n" {
				t.Fatalf("round %d answer %d: body\n%.200s\nwant\n%.200s", round, i, got, want)
			}
			if rec.Code != http.StatusAccepted || rec.Header().Get("Content-Type") != "application/json" ||
				rec.Header().Get("Cache-Control") != "no-store" {
				t.Fatalf("round %d answer %d: status %d, headers %v", round, i, rec.Code, rec.Header())
			}
		}
	}
}

// TestWriteJSONUnencodableAnswer: a value encoding/json refuses gives 500
// with the internal error body and nothing of the partial encoding.
func TestWriteJSONUnencodableAnswer(t *testing.T) {
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]any{"a": strings.Repeat("x", 100), "z": func() {}})
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	if got := rec.Body.String(); got != `{"error":{"code":"internal","message":"encoding the answer failed"}}`+"\n" {
		t.Fatalf("body %q", got)
	}
}

// BenchmarkWriteJSON measures one operation answer's encoding and write
// (bytes and allocations per answer, docs/node-connect.md).
func BenchmarkWriteJSON(b *testing.B) {
	v := answerSamples()[0]
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		writeJSON(w, http.StatusOK, v)
	}
}

// discardWriter is an http.ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// TestSplitPath: splitPath finds the segments strings.Split(strings.Trim(
// rest, "/"), "/") finds for every path the API routes, and as many
// (maxPathParts) for a longer one.
func TestSplitPath(t *testing.T) {
	for _, rest := range []string{"", "/", "//", "/a", "/a/", "a", "/a/operations", "/a//operations",
		"/a/placements/release", "/a/placements/release/", "/a/placements/release/x", "/a/b/c/d/e", "///a///"} {
		want := strings.Split(strings.Trim(rest, "/"), "/")
		var buf [maxPathParts]string
		got := splitPath(buf[:0], rest)
		if len(want) > maxPathParts {
			if len(got) != maxPathParts || !slices.Equal(got[:maxPathParts-1], want[:maxPathParts-1]) {
				t.Errorf("%q: %q, want the first %d of %q", rest, got, maxPathParts-1, want)
			}
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", rest, got, want)
		}
	}
}
