package nodeconnect

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadPeerTokens: the first token is sent, every token is accepted;
// comments and blank lines are skipped; a short token, an empty file, a
// missing or oversized file are refused without showing a token.
func TestReadPeerTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newTok, oldTok := strings.Repeat("n", 40), strings.Repeat("o", 32)
	send, accept, err := readPeerTokens(write("two", "# rotation\n\n"+newTok+"\n  "+oldTok+"  \n"))
	if err != nil || send != newTok || len(accept) != 2 || accept[0] != sha256.Sum256([]byte(newTok)) || accept[1] != sha256.Sum256([]byte(oldTok)) {
		t.Fatalf("two tokens: %q %d %v", send, len(accept), err)
	}
	short := "short-secret-token"
	for name, path := range map[string]string{
		"short":     write("short", short+"\n"),
		"empty":     write("empty", "# nothing\n\n"),
		"missing":   filepath.Join(dir, "absent"),
		"oversized": write("big", strings.Repeat("x", maxPeerTokenFile+1)),
		"unset":     "",
	} {
		if _, _, err := readPeerTokens(path); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), short) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}
