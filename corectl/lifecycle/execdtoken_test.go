package lifecycle_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// podEnv is the env of container name in a BatchSandbox's pod template.
func podEnv(t *testing.T, u *unstructured.Unstructured, name string) []corev1.EnvVar {
	t.Helper()
	m, ok, err := unstructured.NestedMap(u.Object, "spec", "template", "spec")
	if !ok || err != nil {
		t.Fatalf("no pod template: %v", err)
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.Containers {
		if c.Name == name {
			return c.Env
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// envValues returns the values of the entries named name.
func envValues(env []corev1.EnvVar, name string) []string {
	var out []string
	for _, e := range env {
		if e.Name == name {
			out = append(out, e.Value)
		}
	}
	return out
}

// TestCreateSetsExecdToken runs on the real apiserver (issue 29 finding
// 4): with an execdTokenSecretFile, a created BatchSandbox's pod template
// carries EXECD_ACCESS_TOKEN = execdtoken.Derive(secret, its ID) — one
// entry, replacing one a create's envVars tried to set — and nowhere the
// secret; two sandboxes get different tokens; the readiness ping reached
// execd with the sandbox's token. Without the setting nothing is added.
func TestCreateSetsExecdToken(t *testing.T) {
	secret := "execd-token-secret-for-tests-0123456789abcdef"
	file := filepath.Join(t.TempDir(), "execd-secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var pinged []string // X-EXECD-ACCESS-TOKEN of each /ping execd saw
	w := startWorld(t, env.Config, worldOptions{execdTokenSecretFile: file, execdWrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ping" {
				mu.Lock()
				pinged = append(pinged, r.Header.Get("X-EXECD-ACCESS-TOKEN"))
				mu.Unlock()
			}
			h.ServeHTTP(rw, r)
		})
	}})
	var tokens []string
	for range 2 {
		sb := w.create(`{"templateID":"base","envVars":{"EXECD_ACCESS_TOKEN":"chosen-by-the-caller","USER_ENV":"x"}}`)
		u := bs(w.nsA, sb.SandboxID)
		if u == nil {
			t.Fatalf("BatchSandbox %s not found", sb.SandboxID)
		}
		want := execdtoken.Derive([]byte(secret), sb.SandboxID)
		e := podEnv(t, u, "sandbox")
		if got := envValues(e, cluster.ExecdAccessTokenEnv); !slices.Equal(got, []string{want}) {
			t.Fatalf("%s: EXECD_ACCESS_TOKEN entries %q, want [%s]", sb.SandboxID, got, want)
		}
		if got := envValues(e, "USER_ENV"); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("%s: the create's other envVars: %q", sb.SandboxID, got)
		}
		raw, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), secret) {
			t.Fatalf("%s: the BatchSandbox carries the cluster secret", sb.SandboxID)
		}
		mu.Lock()
		seen := slices.Contains(pinged, want)
		mu.Unlock()
		if !seen {
			t.Fatalf("%s: no readiness ping reached execd with the sandbox's token", sb.SandboxID)
		}
		tokens = append(tokens, want)
		if code, raw := w.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); code != http.StatusNoContent {
			t.Fatalf("DELETE = %d %s", code, raw)
		}
	}
	if tokens[0] == tokens[1] {
		t.Fatal("two sandboxes got the same execd token")
	}
	w.nothingLeft()

	// Without the setting: the template's env and the create's, nothing
	// added.
	w2 := start(t)
	sb := w2.create(`{"templateID":"base"}`)
	e := podEnv(t, bs(w2.nsA, sb.SandboxID), "sandbox")
	if got := envValues(e, cluster.ExecdAccessTokenEnv); len(got) != 0 {
		t.Fatalf("without execdTokenSecretFile: EXECD_ACCESS_TOKEN %q", got)
	}
	if len(e) != 4 || e[0].Name != "TEMPLATE_ENV" || e[1].Name != lifecycle.EnvSandbox || e[2].Name != lifecycle.EnvSandboxID || e[3].Name != lifecycle.EnvTemplateID {
		t.Fatalf("without execdTokenSecretFile: env %v", e)
	}
	if code, raw := w2.do("DELETE", "/sandboxes/"+sb.SandboxID, "key-a", "", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", code, raw)
	}
	w2.nothingLeft()
}

// TestE2BDefaultEnvironment: every sandbox's container gets E2B's default
// variables (E2B_SANDBOX=true, its ID, its template's ID) in its pod
// spec, where execd and so its commands inherit them; a create's envVars
// of the same name win over them, and their values reach the process as
// given ($ escaped against the kubelet's $(NAME) expansion).
func TestE2BDefaultEnvironment(t *testing.T) {
	w := start(t)
	plain := w.create(`{"templateID":"base"}`)
	e := podEnv(t, bs(w.nsA, plain.SandboxID), "sandbox")
	for name, want := range map[string]string{lifecycle.EnvSandbox: "true", lifecycle.EnvSandboxID: plain.SandboxID, lifecycle.EnvTemplateID: "base"} {
		if got := envValues(e, name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want exactly %q (env %v)", name, got, want, e)
		}
	}
	mine := w.create(`{"templateID":"base","envVars":{"E2B_TEMPLATE_ID":"mine","DOLLARS":"x$$y","REF":"$(E2B_SANDBOX_ID)"}}`)
	e = podEnv(t, bs(w.nsA, mine.SandboxID), "sandbox")
	if got := envValues(e, lifecycle.EnvTemplateID); len(got) != 1 || got[0] != "mine" {
		t.Errorf("E2B_TEMPLATE_ID given by the create = %q, want exactly [mine] (env %v)", got, e)
	}
	if got := envValues(e, lifecycle.EnvSandboxID); len(got) != 1 || got[0] != mine.SandboxID {
		t.Errorf("E2B_SANDBOX_ID = %q, want exactly [%s]", got, mine.SandboxID)
	}
	// The kubelet turns $$ into $ and expands $(NAME): every $ of an
	// envVars value is written as $$, so the process gets it as given.
	if got := envValues(e, "DOLLARS"); len(got) != 1 || got[0] != "x$$$$y" {
		t.Errorf("DOLLARS = %q, want exactly [x$$$$y] (the kubelet gives x$$y)", got)
	}
	if got := envValues(e, "REF"); len(got) != 1 || got[0] != "$$(E2B_SANDBOX_ID)" {
		t.Errorf("REF = %q, want exactly [$$(E2B_SANDBOX_ID)] (the kubelet gives $(E2B_SANDBOX_ID))", got)
	}
	for _, id := range []string{plain.SandboxID, mine.SandboxID} {
		if code, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); code != http.StatusNoContent {
			t.Fatalf("DELETE = %d %s", code, raw)
		}
	}
	w.nothingLeft()
}
