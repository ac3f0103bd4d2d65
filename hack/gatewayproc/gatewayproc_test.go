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
