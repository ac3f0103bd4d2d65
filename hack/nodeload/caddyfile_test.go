package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/logging"

	_ "github.com/sandgate/sandgate/caddymodules"
)

// TestGatewayCaddyfileAdapts: the gateway's Caddyfile the tool writes
// adapts without a warning, with Caddy's HTTP metrics on (the http app's
// metrics, as the shipped Caddyfile's metrics global option gives) for
// -caddy-metrics and off for -caddy-metrics=false; the API token is in it
// only as its SHA-256.
func TestGatewayCaddyfileAdapts(t *testing.T) {
	const token = "nodeload-api-token-0123456789"
	for _, on := range []bool{true, false} {
		body := gatewayCaddyfile(options{heartbeat: 10 * time.Second, caddyMetrics: on}, "127.0.0.1:2019", t.TempDir(), "8080", token)
		out, warnings, err := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}.Adapt([]byte(body), map[string]any{"filename": "Caddyfile"})
		if err != nil || len(warnings) != 0 {
			t.Fatalf("caddy-metrics %v: adapt: %v, warnings %v\n%s", on, err, warnings, body)
		}
		var cfg struct {
			Apps struct {
				HTTP struct {
					Metrics *json.RawMessage `json:"metrics"`
				} `json:"http"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		if got := cfg.Apps.HTTP.Metrics != nil; got != on {
			t.Errorf("caddy-metrics %v: the http app has metrics %v\n%s", on, got, out)
		}
		if strings.Contains(string(out), token) || !strings.Contains(string(out), sum(token)) {
			t.Errorf("caddy-metrics %v: the adapted configuration holds the API token, or not its SHA-256\n%s", on, out)
		}
	}
}

// TestGatewayCaddyfileInternalAPI: with -internal-api app (o.appAPIAddr
// set) the gateway's Caddyfile configures the nodes block's api on that
// address with the API token's SHA-256 only, beside the site's
// sandbox_node_api (the default, as shipped); with -internal-api site it
// has no api.
func TestGatewayCaddyfileInternalAPI(t *testing.T) {
	const token = "nodeload-api-token-0123456789"
	for _, addr := range []string{"127.0.0.1:30187", ""} {
		body := gatewayCaddyfile(options{heartbeat: 10 * time.Second, appAPIAddr: addr}, "127.0.0.1:2019", t.TempDir(), "8080", token)
		out, warnings, err := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}.Adapt([]byte(body), map[string]any{"filename": "Caddyfile"})
		if err != nil || len(warnings) != 0 {
			t.Fatalf("api %q: adapt: %v, warnings %v\n%s", addr, err, warnings, body)
		}
		var cfg struct {
			Apps struct {
				Sandgate struct {
					Nodes struct {
						API *struct {
							Listen      string   `json:"listen"`
							TokenSHA256 []string `json:"token_sha256"`
						} `json:"api"`
					} `json:"nodes"`
				} `json:"sandgate"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		got := cfg.Apps.Sandgate.Nodes.API
		switch {
		case addr == "" && got != nil:
			t.Errorf("-internal-api site: the nodes block has an api: %+v", *got)
		case addr != "" && (got == nil || got.Listen != addr || len(got.TokenSHA256) != 1 || got.TokenSHA256[0] != sum(token)):
			t.Errorf("-internal-api app: the nodes block's api is %+v, want %s with the token's SHA-256\n%s", got, addr, out)
		}
		if strings.Contains(string(out), token) || !strings.Contains(string(out), `"handler":"sandbox_node_api"`) {
			t.Errorf("api %q: the adapted configuration holds the API token, or the site has no sandbox_node_api\n%s", addr, out)
		}
	}
}
