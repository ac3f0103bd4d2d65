package execd

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// TestParsePTYFrame: the frames execd sends on a PTY WebSocket, and the
// error (KindUnexpected) for each malformed one.
func TestParsePTYFrame(t *testing.T) {
	replay := make([]byte, 9, 12)
	replay[0] = 0x03
	binary.BigEndian.PutUint64(replay[1:], 42)
	replay = append(replay, "abc"...)
	for _, c := range []struct {
		binary bool
		data   string
		want   PTYFrame
		err    string
	}{
		{true, "\x01hi", PTYFrame{Kind: PTYOutput, Data: []byte("hi")}, ""},
		{true, "\x01", PTYFrame{Kind: PTYOutput, Data: []byte{}}, ""},
		{true, string(replay), PTYFrame{Kind: PTYReplay, Data: []byte("abc"), Offset: 42}, ""},
		{false, `{"type":"connected","session_id":"x","mode":"pty"}`, PTYFrame{Kind: PTYConnected}, ""},
		{false, `{"type":"pong"}`, PTYFrame{Kind: PTYPong}, ""},
		{false, `{"type":"exit","exit_code":-1}`, PTYFrame{Kind: PTYExit, ExitCode: -1}, ""},
		{false, `{"type":"error","code":"START_FAILED","error":"no bash"}`, PTYFrame{Kind: PTYFailure, Code: "START_FAILED", Message: "no bash"}, ""},
		{true, "", PTYFrame{}, "an empty binary frame"},
		{true, "\x00x", PTYFrame{}, "channel 0"},
		{true, "\x02x", PTYFrame{}, "channel 2"},
		{true, "\x03\x00", PTYFrame{}, "shorter than its 9-byte header"},
		{true, "\x03\x80\x00\x00\x00\x00\x00\x00\x00", PTYFrame{}, "a negative offset"},
		{false, `[]`, PTYFrame{}, "not a JSON object"},
		{false, `{"type":"exit","exit_code":"1"}`, PTYFrame{}, "integer exit_code"},
		{false, `{"type":"exit","exit_code":99999999999}`, PTYFrame{}, "integer exit_code"},
		{false, `{"type":"other"}`, PTYFrame{}, "unknown type"},
		{false, `{"type":"pong","pad":"` + strings.Repeat("x", 5000) + `"}`, PTYFrame{}, "over 4096 bytes"},
	} {
		got, err := ParsePTYFrame(c.binary, []byte(c.data))
		if c.err != "" {
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, c.err) {
				t.Errorf("%q: %v, want KindUnexpected %q", c.data, err, c.err)
			}
			continue
		}
		if err != nil || got.Kind != c.want.Kind || string(got.Data) != string(c.want.Data) || got.Offset != c.want.Offset ||
			got.ExitCode != c.want.ExitCode || got.Code != c.want.Code || got.Message != c.want.Message {
			t.Errorf("%q: %+v %v, want %+v", c.data, got, err, c.want)
		}
	}
}

// FuzzParsePTYFrame: any message execd (or code in the sandbox on its
// port) sends parses to a frame or to an *Error with KindUnexpected, never
// a panic; a frame's data lies within the message and a replay offset is
// never negative; error texts stay bounded.
func FuzzParsePTYFrame(f *testing.F) {
	f.Add(true, []byte("\x01hello"))
	f.Add(true, []byte("\x03\x00\x00\x00\x00\x00\x00\x00\x05abc"))
	f.Add(false, []byte(`{"type":"exit","exit_code":3}`))
	f.Add(false, []byte(`{"type":"error","code":"X","error":"y"}`))
	f.Add(false, []byte(`{"type":"connected"}`))
	f.Fuzz(func(t *testing.T, bin bool, data []byte) {
		fr, err := ParsePTYFrame(bin, data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindUnexpected {
				t.Fatalf("error %v is not KindUnexpected", err)
			}
			return
		}
		if len(fr.Data) > len(data) || fr.Offset < 0 || len(fr.Code) > 64 || len(fr.Message) > 256 {
			t.Fatalf("frame %+v from %d bytes", fr, len(data))
		}
		if fr.Kind < PTYOutput || fr.Kind > PTYFailure {
			t.Fatalf("kind %d", fr.Kind)
		}
		if !bin && (fr.Kind == PTYOutput || fr.Kind == PTYReplay) || bin && fr.Kind != PTYOutput && fr.Kind != PTYReplay {
			t.Fatalf("kind %d from a binary=%v message", fr.Kind, bin)
		}
	})
}

// TestDialPTYHandshake: the WebSocket handshake carries the execd access
// token and "Connection: upgrade" (not gorilla's "Upgrade", which the
// OpenSandbox Ingress would relay without the token), to the session's
// path with the since asked for; execd's 409 wraps ErrPTYAttached and its
// 404 is KindNotFound.
func TestDialPTYHandshake(t *testing.T) {
	type seen struct{ conn, token, path, since string }
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("Connection"), r.Header.Get(AccessTokenHeader), r.URL.Path, r.URL.Query().Get("since")}
		switch {
		case strings.Contains(r.URL.Path, "busy"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"code":"ALREADY_CONNECTED","message":"another client"}`))
			return
		case strings.Contains(r.URL.Path, "gone"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":"CONTEXT_NOT_FOUND","message":"pty session gone not found"}`))
			return
		}
		up := websocket.Upgrader{}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"connected"}`))
		_ = c.Close()
	}))
	defer srv.Close()
	fe, _ := url.Parse(srv.URL)
	tgt := Target{FixedEntry: fe, SandboxID: "sbx", AccessToken: "s3cret"}
	c, err := (&Client{}).DialPTY(context.Background(), tgt, "id-1", 7)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := c.Next(); err != nil || f.Kind != PTYConnected {
		t.Fatalf("first frame %+v %v", f, err)
	}
	c.Close()
	if s := <-got; s.conn != "upgrade" || s.token != "s3cret" || s.path != "/sbx/44772/pty/id-1/ws" || s.since != "7" {
		t.Fatalf("handshake %+v", s)
	}
	_, err = (&Client{}).DialPTY(context.Background(), tgt, "busy", 0)
	var e *Error
	if !errors.Is(err, ErrPTYAttached) || !errors.As(err, &e) || e.Status != http.StatusConflict {
		t.Fatalf("409: %v", err)
	}
	<-got
	if _, err = (&Client{}).DialPTY(context.Background(), tgt, "gone", 0); !IsNotFound(err) {
		t.Fatalf("404: %v", err)
	}
}
