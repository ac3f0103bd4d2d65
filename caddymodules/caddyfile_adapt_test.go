package caddymodules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aryann/difflib"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// exampleEnv are the {$VAR:default} placeholders of Caddyfile.example.
var exampleEnv = []string{
	"SANDGATE_TOKEN_KEY",
	"SANDGATE_TOKEN_SLOT_KID",
	"SANDGATE_TOKEN_SLOT_KEY",
	"SANDGATE_CREDENTIALS",
	"SANDGATE_DEMO_FIXED_ENTRY",
	"SANDGATE_BIND",
	"SANDGATE_NODE_CREDENTIALS",
	"SANDGATE_NODE_OWNER_EPOCH",
	"SANDGATE_NODE_DEPLOYMENT_DIGEST",
	"SANDGATE_NODE_API_BIND",
	"SANDGATE_NODE_API_TOKEN_SHA256",
	"SANDGATE_NODE_API_TOKEN_SLOT_SHA256",
}

// unsetExampleEnv removes the Caddyfile.example variables from the
// environment for the test, so each {$VAR:default} takes its default.
func unsetExampleEnv(t *testing.T) {
	t.Helper()
	for _, k := range exampleEnv {
		t.Setenv(k, "") // restores the original value after the test
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}

var crlf = regexp.MustCompile(`\r?\n`)

// TestCaddyfileAdaptToJSON adapts every testdata/caddyfile_adapt/*.caddyfiletest
// (a Caddyfile, a line of dashes, the expected JSON) and compares the result,
// as Caddy's own caddytest/integration/caddyfile_adapt_test.go does.
func TestCaddyfileAdaptToJSON(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile_adapt", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/caddyfile_adapt/*.caddyfiletest files")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(crlf.ReplaceAllString(string(data), "\n"), "----------")
			if len(parts) != 2 {
				t.Fatalf("%s: want a Caddyfile and a JSON part separated by a line of dashes, got %d parts", file, len(parts))
			}
			caddyfile, expected := strings.TrimSpace(parts[0])+"\n", strings.TrimSpace(parts[1])
			if !compareAdapt(t, filepath.Base(file), caddyfile, "caddyfile", expected) {
				t.Errorf("adapting %s did not give the expected JSON (diff logged above)", file)
			}
		})
	}
}

// TestCaddyfileExampleAdapts adapts the repository's Caddyfile.example with
// every {$VAR:default} at its default and compares it with
// testdata/Caddyfile.example.json.
func TestCaddyfileExampleAdapts(t *testing.T) {
	unsetExampleEnv(t)
	example, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	expected, err := os.ReadFile(filepath.Join("testdata", "Caddyfile.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !compareAdapt(t, "Caddyfile.example", string(example), "caddyfile",
		strings.TrimSpace(crlf.ReplaceAllString(string(expected), "\n"))) {
		t.Error("adapting Caddyfile.example did not give testdata/Caddyfile.example.json (diff logged above)")
	}
}

// TestCaddyfileExampleEnvOverrides checks that the operator's environment
// variables replace the defaults of Caddyfile.example.
func TestCaddyfileExampleEnvOverrides(t *testing.T) {
	unsetExampleEnv(t)
	t.Setenv("SANDGATE_TOKEN_KEY", "/etc/sandgate/prod.key")
	t.Setenv("SANDGATE_TOKEN_SLOT_KID", "next")
	t.Setenv("SANDGATE_TOKEN_SLOT_KEY", "/etc/sandgate/next.key")
	t.Setenv("SANDGATE_CREDENTIALS", "/etc/sandgate/credentials.json")
	t.Setenv("SANDGATE_DEMO_FIXED_ENTRY", "https://entry.cluster.example:8443")
	t.Setenv("SANDGATE_BIND", "10.0.0.8")
	t.Setenv("SANDGATE_NODE_CREDENTIALS", "/etc/sandgate/nodes.yaml")
	t.Setenv("SANDGATE_NODE_OWNER_EPOCH", "42")
	t.Setenv("SANDGATE_NODE_DEPLOYMENT_DIGEST", strings.Repeat("ab", 32))
	t.Setenv("SANDGATE_NODE_API_BIND", "10.0.0.9")
	t.Setenv("SANDGATE_NODE_API_TOKEN_SHA256", strings.Repeat("cd", 32))
	t.Setenv("SANDGATE_NODE_API_TOKEN_SLOT_SHA256", strings.Repeat("ef", 32))
	example, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := adaptCaddyfile(t, example)

	var got struct {
		Apps struct {
			Sandgate struct {
				TokenKeys []struct {
					KID  string `json:"kid"`
					File string `json:"file"`
				} `json:"token_keys"`
				Credentials struct {
					Path string `json:"path"`
				} `json:"credentials"`
				Clusters map[string]struct {
					FixedEntry       string `json:"fixed_entry"`
					ExecdAccessToken string `json:"execd_access_token"`
				} `json:"clusters"`
				Nodes struct {
					Credentials struct {
						Path string `json:"path"`
					} `json:"credentials"`
					OwnerEpoch int64 `json:"owner_epoch"`
					Pools      map[string]struct {
						Generations []struct {
							SpecificationDigest string `json:"specification_digest"`
						} `json:"generations"`
					} `json:"pools"`
					API struct {
						Listen      string   `json:"listen"`
						TokenSHA256 []string `json:"token_sha256"`
					} `json:"api"`
				} `json:"nodes"`
			} `json:"sandgate"`
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
					Routes []struct {
						Handle []struct {
							TokenSHA256 []string `json:"token_sha256"`
						} `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &got); err != nil {
		t.Fatal(err)
	}
	sg := got.Apps.Sandgate
	if len(sg.TokenKeys) != 2 || sg.TokenKeys[0].File != "/etc/sandgate/prod.key" || sg.TokenKeys[1].KID != "next" || sg.TokenKeys[1].File != "/etc/sandgate/next.key" {
		t.Errorf("token_keys = %+v, want the file from SANDGATE_TOKEN_KEY and the slot from SANDGATE_TOKEN_SLOT_KID/_KEY", sg.TokenKeys)
	}
	if sg.Credentials.Path != "/etc/sandgate/credentials.json" {
		t.Errorf("credentials path = %q, want SANDGATE_CREDENTIALS", sg.Credentials.Path)
	}
	c := sg.Clusters["demo-cluster"]
	if c.FixedEntry != "https://entry.cluster.example:8443" || c.ExecdAccessToken != "" {
		t.Errorf("demo-cluster = %+v, want SANDGATE_DEMO_FIXED_ENTRY and no execd token", c)
	}
	// Servers by listen address (their srvN names follow the address order).
	byListen := map[string]int{}
	for _, srv := range got.Apps.HTTP.Servers {
		for _, l := range srv.Listen {
			byListen[l]++
		}
	}
	for _, l := range []string{"10.0.0.8:30083", "10.0.0.8:30085"} {
		if byListen[l] != 1 {
			t.Errorf("listen addresses %v, want %s once (SANDGATE_BIND)", byListen, l)
		}
	}
	// The internal node API is the app's listener (the nodes block's
	// api), not a Caddy site: no server listens on its port.
	for l := range byListen {
		if strings.HasSuffix(l, ":30086") {
			t.Errorf("a Caddy server listens on %s, the node API's port (the app's api serves it)", l)
		}
	}
	n := sg.Nodes
	gens := n.Pools["default"].Generations
	if n.Credentials.Path != "/etc/sandgate/nodes.yaml" || n.OwnerEpoch != 42 || len(gens) != 1 || gens[0].SpecificationDigest != strings.Repeat("ab", 32) {
		t.Errorf("nodes = %+v, want SANDGATE_NODE_CREDENTIALS, _OWNER_EPOCH and _DEPLOYMENT_DIGEST", n)
	}
	if n.API.Listen != "10.0.0.9:30086" {
		t.Errorf("nodes api listen = %q, want 10.0.0.9:30086 (SANDGATE_NODE_API_BIND)", n.API.Listen)
	}
	if d := n.API.TokenSHA256; len(d) != 2 || d[0] != strings.Repeat("cd", 32) || d[1] != strings.Repeat("ef", 32) {
		t.Errorf("node API token digests = %v, want SANDGATE_NODE_API_TOKEN_SHA256 and _SLOT_SHA256", d)
	}
	for _, srv := range got.Apps.HTTP.Servers {
		for _, r := range srv.Routes {
			for _, h := range r.Handle {
				if len(h.TokenSHA256) > 0 {
					t.Errorf("a Caddy handler takes token digests %v: the node API is the app's api, with no site", h.TokenSHA256)
				}
			}
		}
	}
}

// adaptCaddyfile adapts body (named "Caddyfile") and fails the test on an
// error or a warning.
func adaptCaddyfile(t *testing.T, body []byte) []byte {
	t.Helper()
	cfg, warnings, err := adapter().Adapt(body, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("warning: %s", w.String())
	}
	var b bytes.Buffer
	if err := json.Indent(&b, cfg, "", "\t"); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// compareAdapt is caddytest.CompareAdapt: it adapts rawConfig with the named
// adapter, indents the JSON with tabs and compares it line by line with
// expected, printing a diff on a mismatch. It is copied here because package
// caddytest imports modules/standard, whose dependencies (templates, logging,
// …) are not in this module's go.mod.
func compareAdapt(t testing.TB, filename, rawConfig, adapterName, expected string) bool {
	t.Helper()
	cfgAdapter := caddyconfig.GetAdapter(adapterName)
	if cfgAdapter == nil {
		t.Logf("unrecognized config adapter '%s'", adapterName)
		return false
	}
	result, warnings, err := cfgAdapter.Adapt([]byte(rawConfig), map[string]any{})
	if err != nil {
		t.Logf("adapting config using %s adapter: %v", adapterName, err)
		return false
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, result, "", "\t"); err != nil {
		t.Logf("indenting the adapted JSON: %v", err)
		return false
	}
	for _, w := range warnings {
		t.Logf("warning: %s:%d: %s: %s", filename, w.Line, w.Directive, w.Message)
	}
	diff := difflib.Diff(strings.Split(expected, "\n"), strings.Split(pretty.String(), "\n"))
	failed := false
	for _, d := range diff {
		if d.Delta != difflib.Common {
			failed = true
			break
		}
	}
	if !failed {
		return true
	}
	var b strings.Builder
	for _, d := range diff {
		switch d.Delta {
		case difflib.Common:
			fmt.Fprintf(&b, "  %s\n", d.Payload)
		case difflib.LeftOnly:
			fmt.Fprintf(&b, " - %s\n", d.Payload)
		case difflib.RightOnly:
			fmt.Fprintf(&b, " + %s\n", d.Payload)
		}
	}
	t.Logf("%s: adapted JSON differs from the expected JSON (- expected, + adapted):\n%s", filename, b.String())
	return false
}
