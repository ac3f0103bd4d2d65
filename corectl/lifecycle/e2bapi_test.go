package lifecycle_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/e2bmodel"
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
	if err := e2bmodel.Check(model, body); err != nil {
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

	// envVars: in the sandbox container's env, replacing the template's
	// TEMPLATE_ENV, sorted by name.
	u := bs(w.nsA, id)
	m, _, _ := unstructured.NestedMap(u.Object, "spec", "template", "spec")
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		t.Fatal(err)
	}
	env := spec.Containers[0].Env
	if len(env) != 2 || env[0] != (corev1.EnvVar{Name: "GREETING", Value: "hi there"}) || env[1] != (corev1.EnvVar{Name: "TEMPLATE_ENV", Value: "mine"}) ||
		spec.Containers[0].Image != "sandbox-base:test" {
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
