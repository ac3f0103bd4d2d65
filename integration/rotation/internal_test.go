package rotation

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/integration/harness"
)

// TestInternalTokenRotationWithProcesses follows docs/runbook.md "Internal
// token" with two bin/corectl replicas and bin/caddy's authorizer under
// continuous data-plane traffic: step 1 (token = old, new), step 2 (new,
// old), step 3 (new), each a roll of both programs. No data-plane request
// and no authorize request is refused; after each roll every new replica
// has answered the gateway. At the end the old token is refused, so the
// rotation did happen.
func TestInternalTokenRotationWithProcesses(t *testing.T) {
	const oldTok, newTok = "internal-token-old-0123456789abcdef0123456789", "internal-token-new-0123456789abcdef0123456789"
	keyFile := filepath.Join(t.TempDir(), "primary.key")
	writeFile(t, keyFile, "rotation-hmac-secret-0123456789abcdef0123456789")
	r := newRig(t, func(*rig) []string {
		return []string{"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile}
	}, func(r *rig, step int) string {
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}", "token_key primary HS256 "+keyFile, 1),
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\t"+authorizerBlock(r.front, r.internal, step), 1)
	})
	writeFile(t, r.internal, oldTok+"\n")
	sb := r.create(600)
	r.startTraffic(func() sandbox { return sb })
	r.answered("before the rotation", 20, r.live...)

	// The runbook's steps, literally. In a cluster both Deployments roll
	// at once; here steps 1 and 3 roll corectl first, step 2 the gateway
	// first (each order is safe by the runbook's argument).
	writeFile(t, r.internal, oldTok+"\n"+newTok+"\n") // 1. token = old, new
	r.rollCorectl("step 1")
	r.rollGateway("step 1", 1)
	writeFile(t, r.internal, newTok+"\n"+oldTok+"\n") // 2. token = new, old
	r.rollGateway("step 2", 2)
	r.rollCorectl("step 2")
	writeFile(t, r.internal, newTok+"\n") // 3. token = new
	r.rollCorectl("step 3")
	r.rollGateway("step 3", 3)
	r.endTraffic()

	// The old token is retired: corectl refuses it now.
	for _, tok := range []string{oldTok, newTok} {
		req, _ := http.NewRequest("GET", "http://"+r.live[0].addr+"/internal/v1/authorize?credential=cred-a&sandbox="+sb.id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := dataPlaneClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := tok == newTok; (resp.StatusCode != http.StatusUnauthorized) != want {
			t.Errorf("authorize with the %s token after the rotation = %d", map[bool]string{true: "new", false: "old"}[want], resp.StatusCode)
		}
	}
}
