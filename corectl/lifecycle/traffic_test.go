package lifecycle_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/token"
)

// locate asks the world's corectl the Locate question (no credential).
func (w *world) locate(id string) (int, authorizer.Answer) {
	w.t.Helper()
	req, _ := http.NewRequest("GET", w.url+authorizer.Path+"?"+url.Values{"sandbox": {id}}.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+internalToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a authorizer.Answer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a
}

// TestDomainAndTrafficToken: with a cluster domain, create, connect and
// GET answer it; a create with network.allowPublicTraffic false gets a
// traffic token (audience traffic, the sandbox and credential, the
// gateway's key) on create and connect, and the Locate answer says its
// ports need it; a public sandbox gets none; a deleted one is not found.
func TestDomainAndTrafficToken(t *testing.T) {
	w := startWorld(t, env.Config, worldOptions{before: func(w *world) { w.cluster.Domain = "sbx.test" }})

	priv := w.create(`{"templateID":"base","network":{"allowPublicTraffic":false}}`)
	if priv.Domain == nil || *priv.Domain != "sbx.test" || priv.TrafficAccessToken == nil {
		t.Fatalf("private create: domain %v, traffic token set %v", priv.Domain, priv.TrafficAccessToken != nil)
	}
	tg, err := w.verifier.Verify(*priv.TrafficAccessToken)
	if err != nil || tg != (token.Target{CredentialID: "a", SandboxID: priv.SandboxID, Audience: token.AudienceTraffic}) {
		t.Fatalf("traffic token: %+v %v", tg, err)
	}
	pub := w.create(`{"templateID":"base","network":{"allowPublicTraffic":true}}`)
	if pub.TrafficAccessToken != nil || pub.Domain == nil || *pub.Domain != "sbx.test" {
		t.Fatalf("public create: %+v", pub)
	}

	var conn sandboxBody
	if st, raw := w.do("POST", "/sandboxes/"+priv.SandboxID+"/connect", "key-a", `{}`, &conn); st != 200 || conn.TrafficAccessToken == nil || conn.Domain == nil {
		t.Fatalf("connect: %d %s", st, raw)
	}
	if tg, err := w.verifier.Verify(*conn.TrafficAccessToken); err != nil || tg.Audience != token.AudienceTraffic || tg.SandboxID != priv.SandboxID {
		t.Fatalf("connect's traffic token: %+v %v", tg, err)
	}
	var detail struct {
		Domain *string `json:"domain"`
	}
	if st, raw := w.do("GET", "/sandboxes/"+pub.SandboxID, "key-a", "", &detail); st != 200 || detail.Domain == nil || *detail.Domain != "sbx.test" {
		t.Fatalf("GET: %d %s", st, raw)
	}

	for id, private := range map[string]bool{priv.SandboxID: true, pub.SandboxID: false} {
		kubetest.Eventually(t, 10*time.Second, "Locate finds "+id, func() (bool, error) {
			st, a := w.locate(id)
			return st == 200 && a.Allowed && a.Cluster == w.clusterID && a.TrafficTokenRequired == private, nil
		})
	}
	if st, a := w.locate("sb00000000000000000000"); st != 200 || a != (authorizer.Answer{Reason: authorizer.ReasonNotFound}) {
		t.Fatalf("unknown sandbox: %d %+v", st, a)
	}
	if st, raw := w.do("DELETE", "/sandboxes/"+priv.SandboxID, "key-a", "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	kubetest.Eventually(t, 10*time.Second, "the deleted sandbox is not located", func() (bool, error) {
		st, a := w.locate(priv.SandboxID)
		return st == 200 && !a.Allowed, nil
	})
}
