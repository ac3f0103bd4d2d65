package gatewayproc

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSave: the answer of a 200 lands in the file; any other status is
// an error naming it, and no file is written.
func TestSave(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/heap" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("profile bytes"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	good := filepath.Join(dir, "heap")
	if err := Save(srv.URL+"/debug/pprof/heap", good, 0); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(good); err != nil || string(b) != "profile bytes" {
		t.Fatalf("file = %q, %v", b, err)
	}
	bad := filepath.Join(dir, "missing")
	err := Save(srv.URL+"/debug/pprof/missing", bad, 0)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Save of a 404 = %v, want an error naming the status", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a file was written for the 404: %v", err)
	}
}

// TestStatCPUTicks: utime and stime are read after the last ')' of the
// command name, and a line without it or with too few fields is an error,
// not a panic.
func TestStatCPUTicks(t *testing.T) {
	line := "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 3 0 12345 0 0\n"
	if got, err := statCPUTicks(line); err != nil || got != 12 {
		t.Fatalf("statCPUTicks = %d, %v; want 12 (utime 7 + stime 5)", got, err)
	}
	for _, bad := range []string{"", "42 no parentheses S 1", "42 (x)", "42 (x) S 1 2 3", "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 seven 5 0"} {
		if got, err := statCPUTicks(bad); err == nil {
			t.Errorf("statCPUTicks(%q) = %d, nil; want an error", bad, got)
		}
	}
	self, _, err := CPUTicks(os.Getpid())
	if err != nil || self < 0 {
		t.Fatalf("CPUTicks(self) = %d, %v", self, err)
	}
}
