package realpeers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// oddNamesScript makes the directories TestListDirOddNamesAgainstTheRealExecd
// lists: plain holds names whose bytes execd writes as they are and the
// gateway copies as they are (spaces, quotes other than '"', punctuation, a
// long name), odd the same and names that are not (non-ASCII, invalid
// UTF-8, '<', '&', '>', '"', '\\', a tab, a newline); each has a
// directory, a FIFO, a setuid file and a sticky directory (no symlink: a
// listing with one is decoded and its symlinks resolved,
// TestListDirSymlinksAgainstTheRealExecd).
const oddNamesScript = `set -e
for d in /home/user/listdir/plain /home/user/listdir/odd; do
  mkdir -p "$d/sub dir" "$d/sticky"; chmod 1777 "$d/sticky"
  printf 'hello' > "$d/a b.txt"; : > "$d/x'y"; : > "$d/=+~;,"; : > "$d/-dash"; : > "$d/.hidden"; : > "$d"/'back` + "`" + `tick'
  : > "$d/$(printf 'l%.0s' $(seq 1 200))"
  : > "$d/suid"; chmod 4755 "$d/suid"; mkfifo "$d/fifo"
done
d=/home/user/listdir/odd
: > "$d/é"; : > "$d/日本"; : > "$d/<&>"; : > "$d/\"quoted\""; : > "$d/back\\slash"
: > "$d/$(printf 'tab\tname')"; : > "$d/$(printf 'new\nline')"; : > "$d/$(printf 'bad\377utf8')"
`

// TestListDirOddNamesAgainstTheRealExecd: execd HEAD's listing of a
// directory of names its answer writes as they are goes through the
// gateway's plain path (the listing copied, not decoded), a directory with
// names that need escapes in JSON through the decoded path, and both
// answers are byte for byte what encoding/json's decoding of execd's own
// answer, turned into envd's entries, encodes to (the answer before the
// plain path).
func TestListDirOddNamesAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	w.startExecd(t, "head")
	id, tok := w.createSandboxAs(t, apiKey)
	execdURL := "http://" + probeIP + ":44772"
	resp, err := testClient.Post(execdURL+"/command", "application/json", strings.NewReader(`{"command":`+jsonString(oddNamesScript)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body) // the command's events, to its end
	resp.Body.Close()
	// execution_complete ends a command that exited 0, error any other
	// (docs/wire-facts.md §X1.4).
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"execution_complete"`)) {
		t.Fatalf("making the directories: %d %s", resp.StatusCode, out)
	}
	for dir, wantPlain := range map[string]bool{"/home/user/listdir/plain": true, "/home/user/listdir/odd": false} {
		q := "?depth=1&path=" + url.QueryEscape(dir)
		raw := get(t, execdURL+"/directories/list"+q)
		var list []execd.FileInfo
		if err := json.Unmarshal(raw, &list); err != nil || len(list) < 11 {
			t.Fatalf("%s: execd's listing (%v): %s", dir, err, raw)
		}
		// Which path the gateway takes for this answer: the execd
		// client's own test, on execd's answer.
		direct := &execd.Client{Transport: toRealExecd{}}
		_, viewed, err := direct.ListDirectoryView(context.Background(), execd.Target{FixedEntry: &url.URL{Scheme: "http", Host: "fixed-entry"}, SandboxID: id},
			dir, 1, func([]execd.FileInfoView) {})
		if err != nil || viewed != wantPlain {
			t.Fatalf("%s: execd HEAD's listing taken by the plain path: %v (want %v), error %v; the listing: %s", dir, viewed, wantPlain, err, raw)
		}
		status, got := listDirOf(t, id, tok, dir)
		want := referenceListDir(t, list)
		t.Logf("%s: %d entries, %d bytes from execd, plain path %v, %d bytes answered", dir, len(list), len(raw), viewed, len(got))
		if status != http.StatusOK || !bytes.Equal(got, want) {
			t.Errorf("%s (plain path %v): the gateway answered %d\n%s\nencoding/json's decoding of execd's listing gives\n%s", dir, viewed, status, got, want)
		}
	}
}

// referenceListDir is ListDir's answer for list as the gateway wrote it
// before the plain path: each FileInfo as envd's EntryInfo (docs/wire-facts.md
// §4.2: the base name, FILE_TYPE_FILE or _DIRECTORY or unspecified, the
// permission bits and Go's FileMode string, the time when execd gave one).
func referenceListDir(t *testing.T, list []execd.FileInfo) []byte {
	t.Helper()
	resp := envd.ListDirResponse{Entries: []envd.EntryInfo{}}
	for _, fi := range list {
		perm, err := fi.Perm()
		if err != nil {
			t.Fatalf("%s: mode %d: %v", fi.Path, fi.Mode, err)
		}
		typ := envd.FileTypeUnspecified
		switch fi.Type {
		case execd.TypeFile:
			typ = envd.FileTypeFile
		case execd.TypeDirectory:
			typ = envd.FileTypeDirectory
		}
		e := envd.EntryInfo{Name: path.Base(fi.Path), Type: typ, Path: fi.Path, Size: envd.Int64(fi.Size), Mode: perm,
			Permissions: envd.Permissions(perm, typ == envd.FileTypeDirectory), Owner: fi.Owner, Group: fi.Group}
		if !fi.ModifiedAt.IsZero() {
			ts := envd.Timestamp(fi.ModifiedAt)
			e.ModifiedTime = &ts
		}
		resp.Entries = append(resp.Entries, e)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// toRealExecd sends an execd.Client's request, addressed through a fixed
// entry (/<sandboxID>/44772/<execd path>), straight to the real execd.
type toRealExecd struct{}

func (toRealExecd) RoundTrip(r *http.Request) (*http.Response, error) {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
	if len(parts) < 3 {
		return nil, io.ErrUnexpectedEOF
	}
	u := *r.URL
	u.Scheme, u.Host, u.Path, u.RawPath = "http", probeIP+":44772", "/"+parts[2], ""
	r2 := r.Clone(r.Context())
	r2.URL, r2.Host = &u, ""
	return http.DefaultTransport.RoundTrip(r2)
}

// listDirOf sends envd's ListDir of dir for sandbox id through the
// gateway and returns the status and the answer.
func listDirOf(t *testing.T, id, token, dir string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", w.gateway.Gateway+"/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":`+jsonString(dir)+`,"depth":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	c := http.Client{Timeout: time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("ListDir %s: %v", dir, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}

// get returns the body of a GET of u, failing t unless it is 200.
func get(t *testing.T, u string) []byte {
	t.Helper()
	c := http.Client{Timeout: time.Minute}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return b
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
