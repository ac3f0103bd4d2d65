package envd

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"
)

func TestDecodeStartRequestPythonAndJS(t *testing.T) {
	python := "{\n  \"process\": {\n    \"cmd\": \"/bin/bash\",\n    \"args\": [\n      \"-l\",\n      \"-c\",\n      \"echo hi\"\n    ],\n    \"envs\": {\n      \"A\": \"1\"\n    },\n    \"cwd\": \"/tmp\"\n  },\n  \"stdin\": false\n}"
	js := `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false,"newField":1}`
	for _, in := range []string{python, js} {
		r, err := DecodeStartRequest([]byte(in))
		if err != nil || r.Process.Cmd != "/bin/bash" || len(r.Process.Args) != 3 || r.Process.Envs["A"] != "1" || *r.Process.Cwd != "/tmp" || *r.Stdin {
			t.Fatalf("%v %+v", err, r)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, in := range []string{``, `   `, `{`, `[]`, `{"process":null}`, `{"process":{"cmd":""}}`, `{"process":{"cmd":1}}`} {
		if _, err := DecodeStartRequest([]byte(in)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("start %q: %v", in, err)
		}
	}
	for _, in := range []string{`{}`, `{"path":""}`, `{"path":"/a","depth":-1}`, `{"path":"/a","depth":1.5}`, `{"path":"/a","depth":"4294967296"}`} {
		if _, err := DecodeListDirRequest([]byte(in)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("listdir %q: %v", in, err)
		}
	}
	r, err := DecodeListDirRequest([]byte(`{"path":"/a","depth":"2"}`))
	if err != nil || r.Depth != 2 {
		t.Fatalf("depth as string: %v %+v", err, r)
	}
	r, _ = DecodeListDirRequest([]byte(`{"path":"/a"}`))
	if r.Depth != 1 {
		t.Fatalf("default depth %d", r.Depth)
	}
	if _, err := DecodeRemoveRequest([]byte(`{}`)); !errors.Is(err, ErrBadRequest) {
		t.Fatal("remove without path")
	}
}

// TestDecodeAsProtojson: names are matched exactly (an envs map keeps keys
// that differ in case, a case variant of a field is an unknown field), and
// a repeated member, invalid UTF-8 and unpaired surrogate escapes are
// refused at any depth, with an error that quotes no value.
func TestDecodeAsProtojson(t *testing.T) {
	r, err := DecodeStartRequest([]byte(`{"process":{"cmd":"a","CMD":"b","envs":{"A":"1","a":"2"}},"Tag":"x"}`))
	if err != nil || r.Process.Cmd != "a" || r.Process.Envs["A"] != "1" || r.Process.Envs["a"] != "2" || r.Tag != nil {
		t.Fatalf("%v %+v", err, r)
	}
	// A surrogate pair is one character (Python's json escapes non-ASCII so).
	if r, err := DecodeRemoveRequest([]byte(`{"path":"/a\ud83d\ude00\u00e9"}`)); err != nil || r.Path != "/a\U0001F600\u00e9" {
		t.Fatalf("a surrogate pair: %q %v", r.Path, err)
	}
	for _, in := range []string{
		`{"process":{"cmd":"a","envs":{"K":"secret1","K":"secret2"}}}`,
		`{"process":{"cmd":"a"},"process":{"cmd":"b"}}`,
		"{\"process\":{\"cmd\":\"a\",\"args\":[\"secret\xff\"]}}",
		`{"process":{"cmd":"a","envs":{"K":"secret\udfff"}}}`,
		`{"process":{"cmd":"a","envs":{"K":"secret\ud800\u0041"}}}`,
	} {
		_, err := DecodeStartRequest([]byte(in))
		if !errors.Is(err, ErrBadRequest) || strings.Contains(err.Error(), "secret") {
			t.Errorf("start %q: %v", in, err)
		}
	}
	if _, err := DecodeStartRequest([]byte(`["secret"]`)); err == nil || err.Error() != "envd: malformed request message: the message is not a JSON object" {
		t.Errorf("an array: %v", err)
	}
	if _, err := DecodeListDirRequest([]byte(`{"path":"/a","depth":"secret"}`)); !errors.Is(err, ErrBadRequest) ||
		strings.Contains(err.Error(), "secret") {
		t.Errorf("depth: %v", err)
	}
}

func TestEncodings(t *testing.T) {
	ts := Timestamp(time.Date(2026, 11, 29, 15, 5, 23, 775000000, time.FixedZone("x", 3600)))
	e := EntryInfo{Name: "a", Type: FileTypeFile, Path: "/a", Size: 11, Mode: 0o644, Permissions: Permissions(0o644, false), ModifiedTime: &ts}
	b, _ := json.Marshal(e)
	want := `{"name":"a","type":"FILE_TYPE_FILE","path":"/a","size":"11","mode":420,"permissions":"-rw-r--r--","modifiedTime":"2026-11-29T14:05:23.775Z"}`
	if string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Unix(0, 0), `"1970-01-01T00:00:00Z"`},
		{time.Unix(0, 1000), `"1970-01-01T00:00:00.000001Z"`},
		{time.Unix(0, 1), `"1970-01-01T00:00:00.000000001Z"`},
	} {
		if b, _ := json.Marshal(Timestamp(c.t)); string(b) != c.want {
			t.Errorf("%v: %s", c.t, b)
		}
	}
	if Permissions(0o755, true) != "drwxr-xr-x" {
		t.Fatal(Permissions(0o755, true))
	}
	b, _ = json.Marshal(StartResponse{Event: ProcessEvent{Data: &DataEvent{Stdout: []byte("hi\n")}}})
	if string(b) != `{"event":{"data":{"stdout":"aGkK"}}}` {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(StartResponse{Event: ProcessEvent{End: &EndEvent{Exited: true, Status: "exit status 0"}}})
	if string(b) != `{"event":{"end":{"exited":true,"status":"exit status 0"}}}` {
		t.Fatal(string(b))
	}
}

// FuzzDecodeRequests: the request decoders never panic; an accepted Start
// has a command, an accepted ListDir a path and a positive depth.
func FuzzDecodeRequests(f *testing.F) {
	for _, s := range []string{`{"process":{"cmd":"ls","args":["-l"]}}`, `{"path":"/","depth":2}`, `{"path":"x"}`, `null`, `{"process":{"cmd":"a","cwd":null}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if r, err := DecodeStartRequest(in); err == nil && (r.Process == nil || r.Process.Cmd == "") {
			t.Fatalf("accepted start without cmd: %q", in)
		}
		if r, err := DecodeListDirRequest(in); err == nil && (r.Path == "" || r.Depth == 0) {
			t.Fatalf("accepted listdir %+v from %q", r, in)
		}
		if r, err := DecodeRemoveRequest(in); err == nil && r.Path == "" {
			t.Fatalf("accepted remove without path: %q", in)
		}
	})
}

// FuzzDecodeExtended: whatever the message, the decoders of the extended
// operations either refuse it with ErrBadRequest or return a request that
// names exactly what the operation needs.
func FuzzDecodeExtended(f *testing.F) {
	for _, s := range []string{`{"process":{"pid":1}}`, `{"process":{"tag":"t"},"signal":"SIGNAL_SIGKILL"}`, `{"process":{"pid":"7"},"signal":9}`,
		`{"source":"/a","destination":"/b"}`, `{"path":"x"}`, `{}`, `[]`, `{"process":{"pid":1,"tag":"x"}}`, `{"signal":"SIGHUP"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if c, err := DecodeConnectRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("connect: %v", err)
			}
		} else if (c.Process.PID == nil) == (c.Process.Tag == nil) {
			t.Fatalf("connect selector %+v", c.Process)
		}
		if s, err := DecodeSendSignalRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("signal: %v", err)
			}
		} else if (s.Process.PID == nil) == (s.Process.Tag == nil) {
			t.Fatalf("signal selector %+v", s.Process)
		}
		if c, err := DecodeCloseStdinRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("close stdin: %v", err)
			}
		} else if (c.Process.PID == nil) == (c.Process.Tag == nil) {
			t.Fatalf("close stdin selector %+v", c.Process)
		}
		if wr, err := DecodeWatchDirRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("watch: %v", err)
			}
		} else if wr.Path == "" {
			t.Fatalf("watch %+v", wr)
		}
		if wr, err := DecodeWatcherRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("watcher: %v", err)
			}
		} else if wr.WatcherID == "" {
			t.Fatalf("watcher %+v", wr)
		}
		if m, err := DecodeMoveRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("move: %v", err)
			}
		} else if m.Source == "" || m.Destination == "" {
			t.Fatalf("move %+v", m)
		}
		if p, err := DecodePathRequest(msg); err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("path: %v", err)
			}
		} else if p.Path == "" {
			t.Fatalf("path %+v", p)
		}
	})
}

// TestPermissionsTable: the table behind Permissions holds fs.FileMode's
// String of every permission value, with and without the directory bit,
// and bits above the permission bits are left out as before.
func TestPermissionsTable(t *testing.T) {
	for perm := uint32(0); perm < 1<<12; perm++ {
		for _, dir := range []bool{false, true} {
			m := fs.FileMode(perm) & fs.ModePerm
			if dir {
				m |= fs.ModeDir
			}
			if got := Permissions(perm, dir); got != m.String() {
				t.Fatalf("Permissions(%o, %v) = %q, want %q", perm, dir, got, m.String())
			}
		}
	}
}
