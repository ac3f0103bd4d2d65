package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// secretFiles are the files overlays/example-secrets generates its Secrets
// from (its secrets/ directory, which git ignores): fake values here.
var secretFiles = map[string]string{
	"token-verify.pub":       "-----BEGIN PUBLIC KEY-----\nfake\n-----END PUBLIC KEY-----\n",
	"token-signing.key":      "-----BEGIN PRIVATE KEY-----\nfake\n-----END PRIVATE KEY-----\n",
	"corectl-internal.token": "internal-token-internal-token-32b",
	"peer.token":             "peer-token-peer-token-peer-token",
	"relay.token":            "relay-token-relay-token-relay-tok",
	"cluster-a.kubeconfig":   "apiVersion: v1\nkind: Config\n",
	"cluster-b.kubeconfig":   "apiVersion: v1\nkind: Config\n",
	"keys.yaml":              "keys: []\n",
	"cluster-b-execd.token":  "execd-token",
	"credentials.yaml":       "credentials: []\n",
	"nodes.yaml":             "nodes: []\n",
}

// secretDir is what an example-secrets overlay's secrets/ directory holds,
// by file name: secretFiles with the changes in change, and settings.env
// as docs/deploy.md's commands write it, with the relay token's SHA-256.
func secretDir(change map[string]string) map[string]string {
	files := map[string]string{}
	for name, v := range secretFiles {
		if c, ok := change[name]; ok {
			v = c
		}
		files[name] = v
	}
	files["settings.env"] = "SANDGATE_PROBE_RELAY_TOKEN_SHA256=" + sha256Hex(files["relay.token"]) + "\n"
	return files
}

// renderWithSecrets renders overlays/example-secrets from an in-memory copy
// of deploy/ whose secrets/ directory holds files (secretFiles with the
// changes in change).
func renderWithSecrets(t *testing.T, change map[string]string) *rendered {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/deploy", filepath.ToSlash(p)), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range secretDir(change) {
		if err := mem.WriteFile("/deploy/overlays/example-secrets/secrets/"+name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/deploy/overlays/example-secrets")
	if err != nil {
		t.Fatalf("kustomize build overlays/example-secrets: %v", err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeRendered(t, "overlays/example-secrets", out)
}

// sha256Hex is the lower-case hex SHA-256 of s, as sha256sum prints it.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// generatedSecretLabel labels every Secret overlays/example-secrets
// generates, and nothing else: docs/deploy.md "Old ConfigMaps and Secrets"
// prunes old generated Secrets by it.
const generatedSecretLabel = "sandgate.io/generated-secret"

// TestSecretsRollPods checks overlays/example-secrets, the Secrets that
// roll the pods (docs/deploy.md): every Secret the Deployments mount is
// generated in the namespace sandgate and mounted under its generated
// name; every generated Secret, and no other object, carries
// generatedSecretLabel; sandgate-settings holds the SHA-256 of the relay
// token the overlay generates its Secret from (secrets/settings.env), and
// a new relay token rolls both Deployments; a change of a file read at start (the token key) gives both
// Deployments a new pod template, so they roll; a change of a file the
// programs reload (the resource credentials) gives neither a new one.
func TestSecretsRollPods(t *testing.T) {
	base := renderWithSecrets(t, nil)
	generated := map[string]string{} // Secret name without hash → name
	for _, o := range base.objs {
		if o.GetKind() != "Secret" {
			if _, ok := o.GetLabels()[generatedSecretLabel]; ok {
				t.Errorf("%s %s carries the label %s: the documented prune of old generated Secrets would select it", o.GetKind(), o.GetName(), generatedSecretLabel)
			}
			continue
		}
		if o.GetNamespace() != "sandgate" {
			t.Errorf("Secret %s in namespace %q", o.GetName(), o.GetNamespace())
		}
		if o.GetLabels()[generatedSecretLabel] != "true" {
			t.Errorf("Secret %s lacks the label %s=true that the documented prune selects old generated Secrets by", o.GetName(), generatedSecretLabel)
		}
		plain := o.GetName()
		if plain != "sandgate-credentials" && plain != "gateway-nodes" {
			plain = strings.TrimSuffix(plain, "-"+hashSuffix(plain))
		}
		generated[plain] = o.GetName()
	}
	for _, name := range append(secretNames, "gateway-execd-tokens") {
		if generated[name] == "" {
			t.Errorf("overlays/example-secrets generates no Secret %s", name)
		}
	}
	templates := func(r *rendered) map[string]string {
		secrets := map[string]bool{}
		for _, o := range r.objs {
			if o.GetKind() == "Secret" {
				secrets[o.GetName()] = true
			}
		}
		out := map[string]string{}
		for _, d := range []string{"gateway", "corectl"} {
			dep := r.deployment(t, d)
			var mounted []string
			for _, v := range dep.Spec.Template.Spec.Volumes {
				if v.Secret != nil {
					mounted = append(mounted, v.Secret.SecretName)
					if !secrets[v.Secret.SecretName] {
						t.Errorf("Deployment %s mounts Secret %s, which the overlay does not generate", d, v.Secret.SecretName)
					}
				}
			}
			out[d] = strings.Join(mounted, ",")
		}
		return out
	}
	before := templates(base)
	if strings.Contains(before["gateway"], "sandgate-token-key,") || !strings.Contains(before["gateway"], generated["sandgate-token-key"]) ||
		generated["sandgate-token-key"] == "sandgate-token-key" {
		t.Errorf("the gateway mounts %s; want the token key under its hashed name %s", before["gateway"], generated["sandgate-token-key"])
	}
	for file, d := range map[string]string{"token-verify.pub": "gateway", "token-signing.key": "corectl"} {
		rotated := templates(renderWithSecrets(t, map[string]string{file: "-----BEGIN KEY-----\nrotated\n-----END KEY-----\n"}))
		if rotated[d] == before[d] {
			t.Errorf("a new %s leaves the %s pod template as it was (%s): its pods would keep the old key", file, d, before[d])
		}
	}
	// The relay's digest in sandgate-settings is the Secret's token's, not
	// the example overlay's literal, and a new relay token rolls both: the
	// gateway reads the digest, corectl the token, each at start.
	if got, want := base.configMap(t, "sandgate-settings")["SANDGATE_PROBE_RELAY_TOKEN_SHA256"], sha256Hex(secretFiles["relay.token"]); got != want {
		t.Errorf("sandgate-settings SANDGATE_PROBE_RELAY_TOKEN_SHA256 = %s, want the SHA-256 of secrets/relay.token %s: the relay would refuse corectl", got, want)
	}
	rotated := renderWithSecrets(t, map[string]string{"relay.token": "relay-token-rotated-rotated-rotat"})
	if got, want := rotated.configMap(t, "sandgate-settings")["SANDGATE_PROBE_RELAY_TOKEN_SHA256"], sha256Hex("relay-token-rotated-rotated-rotat"); got != want {
		t.Errorf("after a new relay token sandgate-settings SANDGATE_PROBE_RELAY_TOKEN_SHA256 = %s, want %s", got, want)
	}
	for _, d := range []string{"gateway", "corectl"} {
		a, err1 := json.Marshal(base.deployment(t, d).Spec.Template)
		b, err2 := json.Marshal(rotated.deployment(t, d).Spec.Template)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if bytes.Equal(a, b) {
			t.Errorf("a new relay token leaves the %s pod template as it was: its pods would keep the old token or digest", d)
		}
	}
	reloaded := templates(renderWithSecrets(t, map[string]string{"credentials.yaml": "credentials: [] # changed\n"}))
	for _, d := range []string{"gateway", "corectl"} {
		if reloaded[d] != before[d] {
			t.Errorf("new resource credentials change the %s pod template (%s → %s); the programs reload them without a roll", d, before[d], reloaded[d])
		}
	}
}
