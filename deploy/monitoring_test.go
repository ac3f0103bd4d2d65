package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var updateMonitoring = flag.Bool("update-monitoring", false, "write monitoring/prometheusrule.yaml from monitoring/rules.yaml")

// ruleFile is the part of a Prometheus rules file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// renderPrometheusRule returns monitoring/prometheusrule.yaml as it must
// be: rules.yaml's groups, comments and order kept, under the spec of a
// PrometheusRule named sandgate.
func renderPrometheusRule(rules []byte) ([]byte, error) {
	i := bytes.Index(rules, []byte("\ngroups:\n"))
	if i < 0 {
		return nil, fmt.Errorf("rules.yaml has no top-level groups:")
	}
	var b bytes.Buffer
	b.WriteString(`# GENERATED from rules.yaml by
#   go test ./deploy -run TestPrometheusRuleMatchesRules -update-monitoring
# Do not edit: edit rules.yaml (the alerts, their tests in rules_test.yaml).
# The same groups as a Prometheus Operator PrometheusRule; your Prometheus
# selects PrometheusRules by label (ruleSelector): add that label in your
# overlay.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: sandgate
spec:
`)
	for _, line := range strings.SplitAfter(string(rules[i+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), nil
}

// TestPrometheusRuleMatchesRules checks that the PrometheusRule holds
// exactly the groups of the plain rules file, which promtool checks and
// tests: the committed file is the rendering of rules.yaml, and both
// decode to the same groups.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	rules, err := os.ReadFile("monitoring/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderPrometheusRule(rules)
	if err != nil {
		t.Fatal(err)
	}
	if *updateMonitoring {
		if err := os.WriteFile("monitoring/prometheusrule.yaml", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("monitoring/prometheusrule.yaml is not rules.yaml's groups: run go test ./deploy -run TestPrometheusRuleMatchesRules -update-monitoring")
	}
	var plain, cr map[string]any
	if err := yaml.UnmarshalStrict(rules, &plain); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(got, &cr); err != nil {
		t.Fatal(err)
	}
	if spec, _ := cr["spec"].(map[string]any); !reflect.DeepEqual(spec["groups"], plain["groups"]) || len(plain) != 1 {
		t.Fatalf("the PrometheusRule's groups differ from rules.yaml's")
	}
}

// readRules decodes monitoring/rules.yaml strictly.
func readRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile("monitoring/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	return rf
}

// dashboardExprs returns every query of the Grafana dashboard, by panel
// title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("monitoring/sandgate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("sandgate-dashboard.json: %v", err)
	}
	if d.UID == "" {
		t.Fatal("the dashboard has no uid")
	}
	out := map[string][]string{}
	targets := 0
	defer func() {
		// hack/monitoring/promtool.sh reads the queries line by line: one
		// "expr" a line, each a target's.
		if lines := regexp.MustCompile(`(?m)^ *"expr": "`).FindAll(data, -1); len(lines) != targets {
			t.Errorf("sandgate-dashboard.json has %d \"expr\" lines for %d queries: keep one query a line", len(lines), targets)
		}
	}()
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
			targets++
		}
	}
	return out
}

// TestMonitoringMetricsExist checks that every metric the alert rules and
// the dashboard query is one the code exports: sandgate's own collectors,
// found in the module's Go source (prometheus.*Opts literals and
// prometheus.NewDesc calls), and the few that Caddy and controller-runtime
// export, found in those modules' source. A renamed metric would leave an
// alert that never fires; this is where it shows. It also checks that every
// alert has a firing case in rules_test.yaml and a section in
// docs/runbook.md, which its runbook annotation names.
func TestMonitoringMetricsExist(t *testing.T) {
	known := exportedMetrics(t)
	check := func(where, expr string) {
		names, err := promqlMetricNames(expr)
		if err != nil {
			t.Errorf("%s: %v in %q", where, err, expr)
			return
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			if !known[n] {
				t.Errorf("%s: %s is not a metric the code exports", where, n)
			}
		}
	}
	rf := readRules(t)
	tests, err := os.ReadFile("monitoring/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := markdownAnchors(string(runbook))
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts++
			check("alert "+r.Alert, r.Expr)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: no summary or description", r.Alert)
			}
			want := "docs/runbook.md#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook"] != want {
				t.Errorf("alert %s: runbook annotation %q, want %q", r.Alert, r.Annotations["runbook"], want)
			} else if !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("alert %s: docs/runbook.md has no heading %s", r.Alert, r.Alert)
			}
			if !regexp.MustCompile(`(?m)^        alertname: ` + r.Alert + `\n        exp_alerts:`).Match(tests) {
				t.Errorf("alert %s: rules_test.yaml has no case where it fires", r.Alert)
			}
		}
	}
	if alerts < 16 {
		t.Errorf("rules.yaml has %d alerts", alerts)
	}
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			check("dashboard panel "+strconv.Quote(title), e)
		}
	}
}

// TestDashboardChartsEveryHistogram checks that every histogram the
// module exports (a name whose _bucket series the source scan found) has
// a dashboard panel charting its quantiles (histogram_quantile over its
// _bucket series): a latency the code measures is one an operator sees.
func TestDashboardChartsEveryHistogram(t *testing.T) {
	known := exportedMetrics(t)
	charted := map[string]bool{}
	for _, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			if !strings.Contains(e, "histogram_quantile(") {
				continue
			}
			names, err := promqlMetricNames(e)
			if err != nil {
				t.Fatalf("%v in %q", err, e)
			}
			for _, n := range names {
				if h, ok := strings.CutSuffix(n, "_bucket"); ok {
					charted[h] = true
				}
			}
		}
	}
	histograms := 0
	for n := range known {
		if !known[n+"_bucket"] || !known[n+"_count"] {
			continue
		}
		histograms++
		if !charted[n] {
			t.Errorf("the histogram %s has no dashboard panel (histogram_quantile over %s_bucket)", n, n)
		}
	}
	if histograms < 8 {
		t.Errorf("the source scan found %d histograms", histograms)
	}
}

// TestDashboardChartsEveryCounter checks that every counter the module
// exports (collectorNames) has a dashboard panel that queries it: what the
// code counts (refusals, restarts, outcomes) is something an operator
// sees without writing a query. No counter is exempt; a counter left off
// the dashboard on purpose belongs in exemptCounters with the reason.
func TestDashboardChartsEveryCounter(t *testing.T) {
	_, counters := moduleCollectors(t)
	charted := map[string]bool{}
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			names, err := promqlMetricNames(e)
			if err != nil {
				t.Fatalf("dashboard panel %q: %v in %q", title, err, e)
			}
			for _, n := range names {
				charted[n] = true
			}
		}
	}
	for n := range counters {
		if !charted[n] && exemptCounters[n] == "" {
			t.Errorf("the counter %s has no dashboard panel (add one, or say in exemptCounters why it needs none)", n)
		}
	}
	for n := range exemptCounters {
		if !counters[n] {
			t.Errorf("exemptCounters names %s, which the code does not export", n)
		}
	}
	if len(counters) < 16 {
		t.Errorf("the source scan found %d counters", len(counters))
	}
}

// exemptCounters are the counters the dashboard leaves out, each with the
// reason; none today.
var exemptCounters = map[string]string{}

// markdownAnchors returns the GitHub anchors of a Markdown document's
// headings (lower case, spaces as hyphens, punctuation dropped).
func markdownAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// externalMetrics are the metrics of other modules the rules and the
// dashboard use, with the module whose source defines each.
var externalMetrics = map[string]string{
	// Caddy's configuration loads (in every config's metrics registry,
	// which the gateway's metrics handler serves).
	"caddy_config_last_reload_successful": "github.com/caddyserver/caddy/v2",
	// controller-runtime's leader election, one series per Lease.
	"leader_election_master_status": "sigs.k8s.io/controller-runtime",
	// Caddy's HTTP metrics (the metrics global option of the shipped
	// Caddyfile), defined as namespace, subsystem and name (below).
	"caddy_http_request_duration_seconds_count": "github.com/caddyserver/caddy/v2",
}

// externalMentions are what a module's source must contain for a metric
// of externalMetrics it does not spell whole: Caddy builds its HTTP
// metrics' names from the constants ns and sub.
var externalMentions = map[string][]string{
	"caddy_http_request_duration_seconds_count": {`ns, sub = "caddy", "http"`, `Name:      "request_duration_seconds"`},
}

// exportedMetrics returns the names of the metrics the code exports: the
// module's own collectors (with a histogram's _bucket, _sum and _count
// series), and externalMetrics after checking each in its module's source.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known, _ := moduleCollectors(t)
	for name, mod := range externalMetrics {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", mod, err)
		}
		mentions, ok := externalMentions[name]
		if !ok {
			mentions = []string{strconv.Quote(name)}
		}
		defined := true
		for _, m := range mentions {
			defined = defined && sourceMentions(t, strings.TrimSpace(string(out)), m)
		}
		if !defined {
			t.Errorf("%s does not define the metric %s", mod, name)
			continue
		}
		known[name] = true
	}
	return known
}

// moduleCollectors returns the metric names the module's own Go source
// defines (collectorNames over every non-test file) and, of those, the
// counters.
func moduleCollectors(t *testing.T) (known, counters map[string]bool) {
	t.Helper()
	known, counters = map[string]bool{}, map[string]bool{}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		names, cs := collectorNames(f)
		for _, n := range names {
			known[n] = true
		}
		for _, n := range cs {
			counters[n] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sandgate_dataplane_requests_total", "sandgate_node_online", "corectl_cni_gate_open",
		"corectl_http_request_duration_seconds_bucket", "sandgate_credential_source_stale_seconds"} {
		if !known[want] {
			t.Fatalf("the scan of the Go source missed %s (found %d names)", want, len(known))
		}
	}
	if !counters["corectl_api_refusals_total"] || counters["sandgate_node_online"] {
		t.Fatalf("the scan of the Go source took the wrong names for counters: %v", counters)
	}
	return known, counters
}

// sourceMentions reports whether a non-test Go file under dir contains s.
func sourceMentions(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found = bytes.Contains(data, []byte(s))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// collectorNames returns the metric names a Go file defines: from
// prometheus.{Counter,Gauge,Histogram,Summary}Opts literals with constant
// Namespace, Subsystem and Name (joined as prometheus.BuildFQName does),
// and from prometheus.NewDesc calls with a constant name. counters are
// those of them that are counters: every CounterOpts name, and a NewDesc
// name ending in _total (a const metric's type is chosen where it is
// written, so the name's suffix is what says it is a counter).
func collectorNames(f *ast.File) (out, counters []string) {
	lit := func(e ast.Expr) string {
		if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
			s, _ := strconv.Unquote(b.Value)
			return s
		}
		return ""
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			sel, ok := n.Type.(*ast.SelectorExpr)
			if !ok || !isPkg(sel.X, "prometheus") {
				return true
			}
			kind := strings.TrimSuffix(sel.Sel.Name, "Opts")
			if kind == sel.Sel.Name || !slices.Contains([]string{"Counter", "Gauge", "Histogram", "Summary"}, kind) {
				return true
			}
			var parts []string
			for _, field := range []string{"Namespace", "Subsystem", "Name"} {
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == field {
							if v := lit(kv.Value); v != "" {
								parts = append(parts, v)
							}
						}
					}
				}
			}
			if len(parts) == 0 {
				return true
			}
			name := strings.Join(parts, "_")
			out = append(out, name)
			switch kind {
			case "Counter":
				counters = append(counters, name)
			case "Histogram":
				out = append(out, name+"_bucket", name+"_sum", name+"_count")
			case "Summary":
				out = append(out, name+"_sum", name+"_count")
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isPkg(sel.X, "prometheus") && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
				if v := lit(n.Args[0]); v != "" {
					out = append(out, v)
					if strings.HasSuffix(v, "_total") {
						counters = append(counters, v)
					}
				}
			}
		}
		return true
	})
	return out, counters
}

func isPkg(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// promqlMetricNames returns the metric names a PromQL expression selects.
// It is a lexer, not a parser (promtool parses the rules): strings, label
// matchers and range or subquery brackets are dropped, the label lists of
// by, without, on, ignoring, group_left and group_right are skipped, and of
// the identifiers left those not called as a function and not keywords are
// metric names. Unbalanced brackets or quotes are an error.
func promqlMetricNames(expr string) ([]string, error) {
	// Drop strings, then what is inside {…} and […].
	var b strings.Builder
	depth := map[rune]int{}
	closing := map[rune]rune{'}': '{', ']': '['}
	for i := 0; i < len(expr); i++ {
		c := rune(expr[i])
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && rune(expr[j]) != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string")
			}
			i = j
			continue
		case c == '{' || c == '[':
			depth[c]++
			b.WriteRune(' ')
			continue
		case c == '}' || c == ']':
			if depth[closing[c]] == 0 {
				return nil, fmt.Errorf("unbalanced %c", c)
			}
			depth[closing[c]]--
			b.WriteRune(' ')
			continue
		}
		if depth['{'] == 0 && depth['['] == 0 {
			b.WriteRune(c)
		}
	}
	if depth['{'] != 0 || depth['['] != 0 {
		return nil, fmt.Errorf("unbalanced brackets")
	}
	s := b.String()
	if strings.Count(s, "(") != strings.Count(s, ")") {
		return nil, fmt.Errorf("unbalanced parentheses")
	}
	keywords := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true,
		// Aggregations, which may be followed by by (…) before their
		// parentheses.
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
		"count_values": true, "bottomk": true, "topk": true, "quantile": true}
	labelLists := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipSpace := func(i int) int {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
			i++
		}
		return i
	}
	var names []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= '0' && c <= '9' || c == '.':
			// A number or a duration (15m).
			for i < len(s) && (isPart(s[i]) || s[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(s) && isPart(s[j]) {
				j++
			}
			word := s[i:j]
			next := skipSpace(j)
			switch {
			case labelLists[strings.ToLower(word)]:
				if next < len(s) && s[next] == '(' {
					end := strings.IndexByte(s[next:], ')')
					j = next + end + 1
				}
			case keywords[strings.ToLower(word)]:
			case next < len(s) && s[next] == '(':
				// A function or an aggregation.
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

func TestPromQLMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (outcome) (rate(a_total{outcome=~"X|Y", route="PUT /s/{id}"}[5m])) / ignoring (outcome) group_left sum(rate(a_total[5m])) > 0.05`,
			[]string{"a_total", "a_total"}},
		{`sum(b) < 0.9 * sum(b offset 15m)`, []string{"b", "b"}},
		{`histogram_quantile(0.95, sum by (le, route) (rate(c_bucket[5m])))`, []string{"c_bucket"}},
		{`max_over_time(sum(d)[30m:1m]) and on () e == bool 1`, []string{"d", "e"}},
		{`sum(f) by (x)`, []string{"f"}},
	} {
		got, err := promqlMetricNames(c.expr)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("promqlMetricNames(%q) = %v, %v; want %v", c.expr, got, err, c.want)
		}
	}
	for _, bad := range []string{`sum(a`, `a{x="1"`, `a{x="1}`, `rate(a[5m)`, `a}`} {
		if _, err := promqlMetricNames(bad); err == nil {
			t.Errorf("promqlMetricNames(%q) accepted it", bad)
		}
	}
}

// TestMonitoringManifests renders deploy/monitoring and checks its
// objects against the Portal Deployments: each PodMonitor selects one
// Deployment's pods and scrapes /metrics on a named port the container
// has (the port the pods' prometheus.io annotations name); the
// PrometheusRule is rules.yaml's; the dashboard ConfigMap holds the
// dashboard file and Grafana's sidecar label.
func TestMonitoringManifests(t *testing.T) {
	r := render(t, "monitoring")
	portal := render(t, "portal")
	monitors := 0
	for _, o := range r.objs {
		if o.GetNamespace() != "sandgate" || o.GetLabels()["app.kubernetes.io/part-of"] != "sandgate" {
			t.Errorf("%s %s: namespace %q, labels %v", o.GetKind(), o.GetName(), o.GetNamespace(), o.GetLabels())
		}
		switch o.GetKind() {
		case "PodMonitor":
			monitors++
			checkPodMonitor(t, o, portal)
		case "PrometheusRule":
			rules, err := os.ReadFile("monitoring/rules.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var plain map[string]any
			if err := yaml.Unmarshal(rules, &plain); err != nil {
				t.Fatal(err)
			}
			groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
			if !reflect.DeepEqual(groups, plain["groups"]) {
				t.Error("the rendered PrometheusRule's groups differ from rules.yaml's")
			}
		case "ConfigMap":
			dash, err := os.ReadFile("monitoring/sandgate-dashboard.json")
			if err != nil {
				t.Fatal(err)
			}
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			if o.GetName() != "sandgate-grafana-dashboard" || data["sandgate-dashboard.json"] != string(dash) || o.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap %s: labels %v, keys %d", o.GetName(), o.GetLabels(), len(data))
			}
		default:
			t.Errorf("unexpected %s %s in deploy/monitoring", o.GetKind(), o.GetName())
		}
	}
	if monitors != 2 || len(r.objs) != 4 {
		t.Errorf("deploy/monitoring renders %d objects, %d PodMonitors; want 4 and 2", len(r.objs), monitors)
	}
}

// checkPodMonitor checks one PodMonitor against the Deployment whose pods
// it selects.
func checkPodMonitor(t *testing.T, o *unstructured.Unstructured, portal *rendered) {
	t.Helper()
	var pm struct {
		Spec struct {
			JobLabel string `json:"jobLabel"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			PodMetricsEndpoints []struct {
				Port     string `json:"port"`
				Path     string `json:"path"`
				Interval string `json:"interval"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	raw, err := json.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&pm); err != nil {
		t.Fatal(err)
	}
	d := portal.deployment(t, o.GetName())
	if !labelsMatch(pm.Spec.Selector.MatchLabels, d.Spec.Template.Labels) || len(pm.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("PodMonitor %s selects %v; the Deployment's pods are labelled %v", o.GetName(), pm.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if d.Spec.Template.Labels[pm.Spec.JobLabel] != o.GetName() {
		t.Errorf("PodMonitor %s: jobLabel %q gives job %q", o.GetName(), pm.Spec.JobLabel, d.Spec.Template.Labels[pm.Spec.JobLabel])
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor %s: %d endpoints", o.GetName(), len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	var port int32
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == ep.Port {
			port = p.ContainerPort
		}
	}
	ann := d.Spec.Template.Annotations
	if port == 0 || ann["prometheus.io/port"] != strconv.Itoa(int(port)) || ep.Path != ann["prometheus.io/path"] || ep.Path != "/metrics" {
		t.Errorf("PodMonitor %s scrapes %s (port %d) at %s; the pods' annotations say port %s at %s", o.GetName(), ep.Port, port, ep.Path,
			ann["prometheus.io/port"], ann["prometheus.io/path"])
	}
}
