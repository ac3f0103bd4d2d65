package execd

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
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
