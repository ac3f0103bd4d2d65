package authorizer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/endpoint"
)

// TestBearerTokenFile: the first token of a rotation file is sent; the
// file and an Authorization header exclude each other; a bad file fails
// provisioning without its content in the error.
func TestBearerTokenFile(t *testing.T) {
	first, second := strings.Repeat("n", 32), strings.Repeat("o", 32)
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		_, _ = w.Write([]byte(`{"allowed":false,"reason":"not_found"}`))
	}))
	defer srv.Close()
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	h := &HTTP{URL: srv.URL, BearerTokenFile: write("\n" + first + "\r\n" + second + "\n")}
	if err := h.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Authorize(context.Background(), "a", "sb1"); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a != "Bearer "+first {
		t.Errorf("Authorization = %q, want the first token", a)
	}

	both := &HTTP{URL: srv.URL, BearerTokenFile: write(first),
		Settings: endpoint.Settings{Headers: http.Header{"Authorization": {"Bearer {file." + write(second) + "}"}}}}
	if err := both.Provision(caddy.Context{}); err == nil {
		t.Error("bearer_token_file with an Authorization header provisioned")
	}
	secret := "short-secret"
	for name, body := range map[string]string{"empty": "\n", "short": secret + "\n" + first, "space": first + " " + secret, "large": strings.Repeat("x", MaxTokenFileSize+1)} {
		err := (&HTTP{URL: srv.URL, BearerTokenFile: write(body)}).Provision(caddy.Context{})
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), first) {
			t.Errorf("%s: %v, want an error without the content", name, err)
		}
	}
	if err := (&HTTP{URL: srv.URL, BearerTokenFile: filepath.Join(t.TempDir(), "missing")}).Provision(caddy.Context{}); err == nil {
		t.Error("a missing file provisioned")
	}
}

// TestBearerTokenFileCaddyfile: the subdirective is read once, with one
// value.
func TestBearerTokenFileCaddyfile(t *testing.T) {
	var h HTTP
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`http http://corectl:8090 {
		bearer_token_file /etc/sandgate/corectl-internal/token
	}`)); err != nil || h.BearerTokenFile != "/etc/sandgate/corectl-internal/token" {
		t.Fatalf("%+v %v", h, err)
	}
	for _, bad := range []string{
		"http http://corectl:8090 {\n bearer_token_file\n}",
		"http http://corectl:8090 {\n bearer_token_file a b\n}",
		"http http://corectl:8090 {\n bearer_token_file a\n bearer_token_file b\n}",
	} {
		var h HTTP
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
