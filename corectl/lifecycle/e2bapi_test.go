package lifecycle_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/e2bmodeltest"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// call sends a request with key and returns the status, headers and body.
func (w *world) call(method, path, key, body string) (int, http.Header, []byte) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// conform fails t unless body is the E2B model.
func conform(t *testing.T, what, model string, body []byte) {
	t.Helper()
	if err := e2bmodeltest.Check(model, body); err != nil {
		t.Errorf("%s is not E2B's %s: %v\n%s", what, model, err, body)
	}
}

// TestE2BAPI: every answer of the E2B sandbox routes conforms to the
// model E2B's OpenAPI document gives it (required fields, types,
// formats, enums), with create's metadata and envVars carried through:
// metadata on the object, in GET and the lists (and filtering them);
// envVars in the sandbox container's env, over the template's.
func TestE2BAPI(t *testing.T) {
	w := start(t)
	st, _, body := w.call("POST", "/sandboxes", "key-a",
		`{"templateID":"base","timeout":300,"metadata":{"user":"ann","app":"prod"},"envVars":{"GREETING":"hi there","TEMPLATE_ENV":"mine"},"secure":true}`)
	if st != http.StatusCreated {
		t.Fatalf("create = %d %s", st, body)
	}
	conform(t, "create", "Sandbox", body)
	var sb sandboxBody
	_ = json.Unmarshal(body, &sb)
	id := sb.SandboxID
	other := w.create(`{"templateID":"base","metadata":{"user":"bob"}}`).SandboxID

	// envVars: in the sandbox container's env, after E2B's defaults,
	// replacing the template's TEMPLATE_ENV, sorted by name.
	u := bs(w.nsA, id)
	m, _, _ := unstructured.NestedMap(u.Object, "spec", "template", "spec")
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		t.Fatal(err)
	}
	env := spec.Containers[0].Env
	want := []corev1.EnvVar{{Name: "E2B_SANDBOX", Value: "true"}, {Name: "E2B_SANDBOX_ID", Value: id}, {Name: "E2B_TEMPLATE_ID", Value: "base"},
		{Name: "GREETING", Value: "hi there"}, {Name: "TEMPLATE_ENV", Value: "mine"}}
	if !slices.Equal(env, want) || spec.Containers[0].Image != "sandbox-base:test" {
		t.Fatalf("pod spec %+v", spec.Containers[0])
	}

	st, _, body = w.call("GET", "/sandboxes/"+id, "key-a", "")
	if st != http.StatusOK {
		t.Fatalf("GET = %d %s", st, body)
	}
	conform(t, "GET", "SandboxDetail", body)
	var info lifecycle.Info
	_ = json.Unmarshal(body, &info)
	if info.Metadata["user"] != "ann" || info.Metadata["app"] != "prod" || len(info.Metadata) != 2 {
		t.Fatalf("metadata %v", info.Metadata)
	}

	for _, p := range []string{"/sandboxes/" + id + "/connect", "/v2/sandboxes/" + id + "/connect"} {
		st, _, body = w.call("POST", p, "key-a", `{"timeout":300}`)
		if st != http.StatusOK {
			t.Fatalf("connect = %d %s", st, body)
		}
		conform(t, p, "Sandbox", body)
	}

	// Lists: both sandboxes, newest first; the metadata filter; paging.
	list := func(path string) (http.Header, []lifecycle.Listed) {
		t.Helper()
		st, h, body := w.call("GET", path, "key-a", "")
		if st != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, st, body)
		}
		conform(t, path, "[]ListedSandbox", body)
		var l []lifecycle.Listed
		_ = json.Unmarshal(body, &l)
		return h, l
	}
	if _, l := list("/sandboxes"); len(l) != 2 {
		t.Fatalf("v1 list %+v", l)
	}
	q := url.QueryEscape("user=ann&app=prod")
	for _, p := range []string{"/sandboxes?metadata=" + q, "/v2/sandboxes?metadata=" + q} {
		if _, l := list(p); len(l) != 1 || l[0].SandboxID != id || l[0].Metadata["app"] != "prod" {
			t.Fatalf("%s = %+v", p, l)
		}
	}
	h, l := list("/v2/sandboxes?limit=1&state=running")
	if len(l) != 1 || h.Get("X-Next-Token") == "" || h.Get("X-Total-Running") != "2" {
		t.Fatalf("page 1: %+v %v", l, h)
	}
	first := l[0].SandboxID
	h, l = list("/v2/sandboxes?limit=1&state=running&nextToken=" + url.QueryEscape(h.Get("X-Next-Token")))
	if len(l) != 1 || l[0].SandboxID == first || h.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %+v %v", l, h)
	}
	if _, l := list("/v2/sandboxes?state=paused"); len(l) != 0 {
		t.Fatalf("paused: %+v", l)
	}
	if _, l := list("/v2/sandboxes?template=other"); len(l) != 0 {
		t.Fatalf("template filter: %+v", l)
	}
	_, asc := list("/v2/sandboxes?order=asc")
	_, desc := list("/v2/sandboxes")
	if len(asc) != 2 || len(desc) != 2 || asc[0].SandboxID != desc[1].SandboxID {
		t.Fatalf("order: asc %+v desc %+v", asc, desc)
	}
	_ = other

	// Metrics: no sample for the sandbox (its cluster serves no resource
	// metrics, or, once TestMetricsFromPodMetrics ran, none for its pods):
	// an empty list, not a 404.
	st, _, body = w.call("GET", "/sandboxes/"+id+"/metrics", "key-a", "")
	if st != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("metrics = %d %s", st, body)
	}
	conform(t, "metrics", "[]SandboxMetric", body)

	// Every error is E2B's Error.
	for _, r := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/sandboxes/" + id + "/pause", "", http.StatusNotImplemented},
		{"POST", "/sandboxes/" + id + "/resume", "{}", http.StatusNotImplemented},
		{"GET", "/sandboxes/sb00000000000000000000", "", http.StatusNotFound},
		{"GET", "/sandboxes/sb00000000000000000000/metrics", "", http.StatusNotFound},
		{"POST", "/sandboxes/sb00000000000000000000/pause", "", http.StatusNotFound},
		{"POST", "/v2/sandboxes", `{"templateID":"nope"}`, http.StatusNotFound},
		{"POST", "/v2/sandboxes", `{"metadata":{"a":1}}`, http.StatusBadRequest},
		{"POST", "/v2/sandboxes", `{"envVars":{"1BAD":"x"}}`, http.StatusBadRequest},
		{"POST", "/v2/sandboxes", `{"envVars":{"A=B":"x"}}`, http.StatusBadRequest},
		{"POST", "/v2/sandboxes", `{"metadata":"x"}`, http.StatusBadRequest},
		{"GET", "/v2/sandboxes?limit=0", "", http.StatusBadRequest},
		{"GET", "/v2/sandboxes?limit=101", "", http.StatusBadRequest},
		{"GET", "/v2/sandboxes?state=stopped", "", http.StatusBadRequest},
		{"GET", "/v2/sandboxes?order=up", "", http.StatusBadRequest},
		{"GET", "/v2/sandboxes?nextToken=%21%21", "", http.StatusBadRequest},
		{"GET", "/v2/sandboxes?startedAfter=today", "", http.StatusBadRequest},
		{"GET", "/sandboxes?metadata=%zz", "", http.StatusBadRequest},
		{"GET", "/sandboxes/" + id + "/metrics?start=-1", "", http.StatusBadRequest},
		{"POST", "/sandboxes/" + id + "/timeout", `{}`, http.StatusBadRequest},
		{"GET", "/sandboxes", "", http.StatusUnauthorized},
	} {
		key := "key-a"
		if r.status == http.StatusUnauthorized {
			key = ""
		}
		st, _, body := w.call(r.method, r.path, key, r.body)
		if st != r.status {
			t.Errorf("%s %s = %d %s; want %d", r.method, r.path, st, body, r.status)
			continue
		}
		conform(t, r.method+" "+r.path, "Error", body)
	}
	st, _, body = w.call("POST", "/sandboxes/"+id+"/pause", "key-a", "")
	if !strings.Contains(string(body), "pause is not supported") {
		t.Errorf("pause answer %d %s", st, body)
	}
}

// encodeURIComponent is JavaScript's: every byte but A–Z a–z 0–9 and
// -_.!~*'() escaped, space as %20.
func encodeURIComponent(s string) string {
	return escapeExcept(s, "-_.!~*'()")
}

// pyQuote is Python's urllib.parse.quote with its default safe "/".
func pyQuote(s string) string { return escapeExcept(s, "_.-~/") }

func escapeExcept(s, safe string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(safe, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// sdkMetadata is the metadata query parameter as the SDKs put it in the
// URL: each key and value escaped (escape), the pairs joined as a form
// query (which escapes the escapes), and that escaped once more as the
// query value (E2B JS 2.x: encodeURIComponent, URLSearchParams,
// openapi-fetch; Python 2.x: quote, urlencode, httpx).
func sdkMetadata(md map[string]string, escape func(string) string) string {
	pairs := url.Values{}
	for k, v := range md {
		pairs.Set(escape(k), escape(v))
	}
	return url.QueryEscape(pairs.Encode())
}

// TestListMetadataFilterAsTheSDKsSendIt: the metadata filter is decoded
// as E2B's API decodes it, so keys and values with a space, @, /, :, +, =,
// & or non-ASCII find their sandbox whichever SDK escaped them (it used to
// be read one level short and find nothing).
func TestListMetadataFilterAsTheSDKsSendIt(t *testing.T) {
	w := start(t)
	md := map[string]string{"user id": "a b/c", "email": "ann@example.com", "url": "http://h:8080/p?q=1&r=2", "名前": "値 ü",
		"a+b": "1=2", "plain": "x"}
	raw, _ := json.Marshal(map[string]any{"templateID": "base", "metadata": md})
	id := w.create(string(raw)).SandboxID
	other := w.create(`{"templateID":"base","metadata":{"plain":"x"}}`).SandboxID
	ids := func(path string) []string {
		t.Helper()
		st, _, body := w.call("GET", path, "key-a", "")
		if st != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, st, body)
		}
		var l []lifecycle.Listed
		_ = json.Unmarshal(body, &l)
		var out []string
		for _, s := range l {
			out = append(out, s.SandboxID)
		}
		slices.Sort(out)
		return out
	}
	for name, escape := range map[string]func(string) string{"JS": encodeURIComponent, "Python": pyQuote} {
		for k, v := range md {
			q := sdkMetadata(map[string]string{k: v}, escape)
			want := []string{id}
			if k == "plain" {
				want = []string{id, other}
				slices.Sort(want)
			}
			for _, p := range []string{"/sandboxes?metadata=" + q, "/v2/sandboxes?metadata=" + q} {
				if got := ids(p); !slices.Equal(got, want) {
					t.Errorf("%s %s (%q=%q) = %v, want %v", name, p, k, v, got, want)
				}
			}
		}
		if got := ids("/v2/sandboxes?metadata=" + sdkMetadata(md, escape)); !slices.Equal(got, []string{id}) {
			t.Errorf("%s: every pair = %v", name, got)
		}
		if got := ids("/v2/sandboxes?metadata=" + sdkMetadata(map[string]string{"user id": "a b/d"}, escape)); len(got) != 0 {
			t.Errorf("%s: another value = %v", name, got)
		}
	}
	// The unescaped form still reads the same; a pair without "=", an
	// empty key or a key given twice is refused.
	if got := ids("/sandboxes?metadata=" + url.QueryEscape("plain=x&email=ann%40example.com")); !slices.Equal(got, []string{id}) {
		t.Errorf("plain query = %v", got)
	}
	for _, bad := range []string{"plain", "=x", "plain=x&plain=x", "a=b=c", "plain=%zz"} {
		st, _, body := w.call("GET", "/v2/sandboxes?metadata="+url.QueryEscape(bad), "key-a", "")
		if st != http.StatusBadRequest || !strings.Contains(string(body), "metadata") {
			t.Errorf("metadata %q = %d %s, want 400 naming metadata", bad, st, body)
		}
	}
}

// TestUnsupportedE2BRoutes: every route of E2B's API that sandgate does
// not serve answers 501 not_supported in E2B's Error shape, with a
// message saying what is not supported, once the API key is accepted
// (401 before); a route on one sandbox checks ownership and existence
// first (404 for a missing or another credential's sandbox). Fork and
// snapshots of a live sandbox are 501, not 404.
func TestUnsupportedE2BRoutes(t *testing.T) {
	w := start(t)
	id := w.create(`{"templateID":"base"}`).SandboxID
	fill := func(pattern, sandboxID string) string {
		p := strings.ReplaceAll(pattern, "{sandboxID}", sandboxID)
		return regexp.MustCompile(`\{[A-Za-z]+\}`).ReplaceAllString(p, "x1")
	}
	for _, u := range httpapi.UnsupportedRoutes {
		path := fill(u.Pattern, id)
		if st, _, body := w.call(u.Method, path, "", "{}"); st != http.StatusUnauthorized {
			t.Errorf("%s %s without a key = %d %s", u.Method, path, st, body)
		}
		st, _, body := w.call(u.Method, path, "key-a", "{}")
		var e struct {
			Code           int
			Error, Message string
		}
		_ = json.Unmarshal(body, &e)
		if st != http.StatusNotImplemented || e.Code != 501 || e.Error != httpapi.CodeNotSupported ||
			!strings.Contains(e.Message, "is not supported by sandgate ("+u.Feature+")") {
			t.Errorf("%s %s = %d %s", u.Method, path, st, body)
			continue
		}
		conform(t, u.Method+" "+path, "Error", body)
		if strings.Contains(u.Pattern, "{sandboxID}") {
			for _, key := range []string{"key-a", "key-b"} {
				sb := "sb00000000000000000000"
				if key == "key-b" {
					sb = id // another namespace's credential
				}
				if st, _, body := w.call(u.Method, fill(u.Pattern, sb), key, "{}"); st != http.StatusNotFound {
					t.Errorf("%s %s as %s = %d %s, want 404", u.Method, fill(u.Pattern, sb), key, st, body)
				}
			}
		}
	}
	// Not E2B's: still 404.
	if st, _, body := w.call("GET", "/sandboxes/"+id+"/nothing", "key-a", ""); st != http.StatusNotFound {
		t.Errorf("an unknown route = %d %s", st, body)
	}
	if st, _, body := w.call("GET", "/health", "", ""); st != http.StatusNoContent {
		t.Errorf("GET /health = %d %s", st, body)
	}
}
