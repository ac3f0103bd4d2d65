package cluster

import (
	"errors"
	"strings"
	"testing"
)

const withTemplates = good + `sandboxTemplates:
  - id: base
    pod:
      containers:
        - name: sandbox
          image: registry.example/sandbox-base:1.4
          resources:
            limits: {cpu: 1500m, memory: 2Gi, ephemeral-storage: 10Gi}
  - id: code-interpreter
    container: main
    pod:
      containers:
        - {name: sidecar, image: sidecar:1}
        - name: main
          image: registry.example/ci:2
          resources: {limits: {cpu: "4", memory: 512Mi}}
`

// TestSandboxTemplates: templates parse strictly, the sandbox container is
// the named one or the first, and the sizes come from its limits.
func TestSandboxTemplates(t *testing.T) {
	cfg, err := Parse([]byte(withTemplates))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id        string
		container string
		want      Sizes
	}{
		{"base", "sandbox", Sizes{CPUCount: 2, MemoryMB: 2048, DiskSizeMB: 10240}},
		{"code-interpreter", "main", Sizes{CPUCount: 4, MemoryMB: 512}},
	} {
		tpl, ok := cfg.SandboxTemplate(tc.id)
		if !ok {
			t.Fatalf("template %s missing", tc.id)
		}
		i, err := SandboxContainer(&tpl.Pod, tpl.Container)
		if err != nil || tpl.Pod.Containers[i].Name != tc.container {
			t.Fatalf("%s: sandbox container %d %v", tc.id, i, err)
		}
		if s, err := SizesOf(&tpl.Pod.Containers[i]); err != nil || s != tc.want {
			t.Fatalf("%s: SizesOf = %+v %v, want %+v", tc.id, s, err, tc.want)
		}
	}
	if _, ok := cfg.SandboxTemplate("nope"); ok {
		t.Fatal("an unknown template was found")
	}

	for _, tc := range []struct{ name, from, to, reason string }{
		{"unknown pod field", "        - name: sandbox\n", "        - name: sandbox\n          bogus: 1\n", "unknown field"},
		{"no image", "          image: registry.example/sandbox-base:1.4\n", "", "needs an image"},
		{"no cpu limit", "{cpu: 1500m, memory: 2Gi, ephemeral-storage: 10Gi}", "{memory: 2Gi}", "needs a cpu limit"},
		{"no memory limit", "{cpu: 1500m, memory: 2Gi, ephemeral-storage: 10Gi}", "{cpu: 1}", "needs a memory limit"},
		{"too little memory", "{cpu: 1500m, memory: 2Gi, ephemeral-storage: 10Gi}", "{cpu: 1, memory: 64Mi}", "at least 128Mi"},
		{"named container missing", "container: main", "container: nope", `no container named "nope"`},
		{"duplicate id", "id: code-interpreter", "id: base", `duplicate id "base"`},
		{"bad id", "id: code-interpreter", "id: Code_Interpreter", "sandboxTemplates[1]: id:"},
		{"bad quantity", "memory: 512Mi", "memory: lots", "quantities must match"},
	} {
		data := strings.Replace(withTemplates, tc.from, tc.to, 1)
		if data == withTemplates {
			t.Fatalf("%s: replacement did not apply", tc.name)
		}
		_, err := Parse([]byte(data))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v, want ErrInvalidConfig with %q", tc.name, err, tc.reason)
		}
	}
}
