package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// withSecret is the good configuration with extra lines under the cluster.
func withSecret(lines string) string {
	return strings.Replace(good, "    fixedEntry:", lines+"    fixedEntry:", 1)
}

func writeSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "execd-token-secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExecdTokenSecretFile: the secret is read as the gateway's
// {file./path} reads it (one trailing newline dropped) and derives the
// token the gateway's execdtoken vector pins.
func TestExecdTokenSecretFile(t *testing.T) {
	p := writeSecret(t, strings.Repeat("k", 32)+"\n")
	cfg, err := Parse([]byte(withSecret(fmt.Sprintf("    execdTokenSecretFile: %s\n", p))))
	if err != nil {
		t.Fatal(err)
	}
	c := &cfg.Clusters[0]
	tok, err := c.ExecdToken("sbx-1")
	if err != nil || tok != "3ad745d60eead599d6da23fedf3d36faacd60ccb6eda25cf26de45ec865acf21" {
		t.Fatalf("ExecdToken = %q, %v", tok, err)
	}
	if s := fmt.Sprintf("%+v %#v", *c, *c); strings.Contains(s, strings.Repeat("k", 32)) {
		t.Fatal("printing the cluster shows the secret")
	}
	cfg, err = Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := cfg.Clusters[0].ExecdToken("sbx-1"); err != nil || tok != "" {
		t.Fatalf("without the setting: ExecdToken = %q, %v", tok, err)
	}
	// Set but never loaded (a Config built without Validate): refused,
	// not silently without a token.
	unloaded := Cluster{ID: "c1", ExecdTokenSecretFile: p}
	if _, err := unloaded.ExecdToken("sbx-1"); !errors.Is(err, ErrExecdSecretNotLoaded) {
		t.Fatalf("unloaded: %v", err)
	}
	if err := unloaded.LoadExecdTokenSecret(); err != nil {
		t.Fatal(err)
	}
	if got, err := unloaded.ExecdToken("sbx-1"); err != nil || got != tok {
		t.Fatalf("loaded: %q %v", got, err)
	}
}

// TestExecdTokenSecretFileRefused: a short, missing or oversized secret
// file, or an execdContainer no template has, refuses the configuration
// (corectl does not start); the error never carries the secret.
func TestExecdTokenSecretFileRefused(t *testing.T) {
	short := strings.Repeat("s", 31)
	for _, tc := range []struct{ name, lines, want string }{
		{"31 bytes", "    execdTokenSecretFile: " + writeSecret(t, short+"\n") + "\n", "at least 32 bytes"},
		{"missing", "    execdTokenSecretFile: " + filepath.Join(t.TempDir(), "none") + "\n", "execdTokenSecretFile"},
		{"too large", "    execdTokenSecretFile: " + writeSecret(t, strings.Repeat("x", MaxExecdTokenSecretBytes+1)) + "\n", "larger than"},
		{"container without secret", "    execdContainer: sandbox\n", "needs execdTokenSecretFile"},
	} {
		_, err := Parse([]byte(withSecret(tc.lines)))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), short) {
			t.Errorf("%s: the error carries the secret", tc.name)
		}
	}
	p := writeSecret(t, strings.Repeat("k", 32))
	tpl := `sandboxTemplates:
  - id: base
    pod:
      containers:
        - name: sandbox
          image: x
          resources: {limits: {cpu: "1", memory: 1Gi}}
`
	_, err := Parse([]byte(withSecret("    execdTokenSecretFile: "+p+"\n    execdContainer: execd\n") + tpl))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "execdContainer") {
		t.Fatalf("execdContainer no template has: %v", err)
	}
	if _, err := Parse([]byte(withSecret("    execdTokenSecretFile: "+p+"\n    execdContainer: sandbox\n") + tpl)); err != nil {
		t.Fatalf("execdContainer every template has: %v", err)
	}
}

// TestSetExecdToken: the token replaces any EXECD_ACCESS_TOKEN entry of
// the execd container and touches no other container.
func TestSetExecdToken(t *testing.T) {
	spec := corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar"},
		{Name: "sandbox", Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: ExecdAccessTokenEnv, Value: "template"}}},
	}}
	c := &Cluster{ID: "c1"}
	if err := c.SetExecdToken(&spec, 1, "tok"); err != nil {
		t.Fatal(err)
	}
	want := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: ExecdAccessTokenEnv, Value: "tok"}}
	if fmt.Sprint(spec.Containers[1].Env) != fmt.Sprint(want) || len(spec.Containers[0].Env) != 0 {
		t.Fatalf("env = %v / %v", spec.Containers[0].Env, spec.Containers[1].Env)
	}
	c.ExecdContainer = "sidecar"
	if err := c.SetExecdToken(&spec, 1, "tok2"); err != nil || spec.Containers[0].Env[0].Value != "tok2" {
		t.Fatalf("named container: %v %v", err, spec.Containers[0].Env)
	}
	c.ExecdContainer = "nope"
	if err := c.SetExecdToken(&spec, 1, "tok3"); !errors.Is(err, ErrNoExecdContainer) {
		t.Fatalf("unknown container: %v", err)
	}
}
