package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/httpapi"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartEdge checks the chart's Ingresses and HTTPRoutes (every toggle
// on, ci/all-on-values.yaml) with the same checks TestEdgeComponents runs
// on the edge components: one route per public listener to the right
// Service port, TLS from the certificate Secret whose cert-manager
// Certificate covers every host, ingress-nginx's idle timeouts above the
// streams' keepalive and no buffering, no request timeout on the streams'
// routes, nothing routed to the internal ports, and corectl's /internal
// routes refused at the edge while its other routes reach it. The
// HTTPRoutes are checked attached to the Gateway of the
// example-edge-gateway-api overlay (the chart renders routes, not a
// Gateway). With tlsCaddy on instead, Caddy's own TLS is checked as the
// tls-caddy component's (checkCaddyTLS), and the tls.caddyfile, Service
// and NetworkPolicy of corectl's API site are the example-edge-tls-caddy
// overlay's.
func TestChartEdge(t *testing.T) {
	var internal, public []string
	for _, rt := range httpapi.Routes {
		if strings.HasPrefix(rt.Pattern, "/internal/") {
			internal = append(internal, rt.Pattern)
		} else {
			public = append(public, rt.Pattern)
		}
	}
	r := renderChart(t, "-f", chartAllOn)
	var names []string
	for _, o := range r.objs {
		if o.GetKind() == "Certificate" {
			if s, _, _ := unstructured.NestedString(o.Object, "spec", "secretName"); s == edgeSecret {
				n, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
				names = append(names, n...)
			}
		}
	}
	covered := func(host string) {
		if !slices.Contains(names, host) {
			t.Errorf("host %s is not in the dnsNames %v of the Certificates of Secret %s", host, names, edgeSecret)
		}
	}
	t.Run("ingress", func(t *testing.T) { checkIngresses(t, r, covered, internal, public) })
	t.Run("gateway-api", func(t *testing.T) {
		gw := render(t, "overlays/example-edge-gateway-api").find(t, "Gateway", "sandgate")
		withGateway := &rendered{dir: r.dir, objs: append(slices.Clone(r.objs), gw)}
		checkGatewayAPI(t, withGateway, func(string) {}, internal, public)
	})
	t.Run("tls-caddy", func(t *testing.T) {
		chart := renderChart(t, "--set", "tlsCaddy.enabled=true")
		checkCaddyTLS(t, chart)
		overlay := render(t, "overlays/example-edge-tls-caddy")
		got, want := chart.configMap(t, "gateway-config")["tls.caddyfile"], overlay.configMap(t, "gateway-config")["tls.caddyfile"]
		if got != want {
			t.Errorf("the chart's tls.caddyfile\n%s\nthe component's\n%s", got, want)
		}
		for _, k := range [][2]string{{"Service", "gateway-corectl-api"}, {"NetworkPolicy", "gateway-corectl-api"}} {
			c, o := chart.find(t, k[0], k[1]), overlay.find(t, k[0], k[1])
			if d := diffValues("", c.Object["spec"], o.Object["spec"]); len(d) > 0 {
				t.Errorf("%s %s: %s", k[0], k[1], strings.Join(d, "; "))
			}
		}
	})
}
