package hub

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/waittest"
	"github.com/sandgate/sandgate/node/proto"
)

// TestInvalidFrameCloseReasonIsUTF8: the JSON pointer in an invalid
// frame's close reason is cut to 48 bytes; when the pointer names a member
// in multi-byte UTF-8, the cut falls on a rune boundary, so the close
// frame's reason stays valid UTF-8 (RFC 6455 section 5.5.1; a gorilla
// client fails a close frame whose reason is not, and never sees the code)
// and the node gets 1002 with the rule.
func TestInvalidFrameCloseReasonIsUTF8(t *testing.T) {
	e := newEnv(t)
	a := e.join(nodeA)
	b, err := proto.Encode(a.heartbeat(health(true, "")))
	if err != nil {
		t.Fatal(err)
	}
	// "/" and 40 two-byte runes: a cut at 48 bytes would split the 24th.
	a.sendRaw(append(b[:len(b)-1], `,"`+strings.Repeat("é", 40)+`":1}`...))
	reason := a.expectClose(CloseProtocolError)
	if !utf8.ValidString(reason) || !strings.HasPrefix(reason, "invalid frame: unknown member at /ééé") {
		t.Fatalf("close reason %q", reason)
	}
	waittest.Until(t, timeout, "the connection to end", func() bool { return e.status(nodeA).State == StateDisconnected })
	if s := e.status(nodeA); !utf8.ValidString(s.CloseReason) {
		t.Fatalf("recorded close reason %q", s.CloseReason)
	}
}
