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
