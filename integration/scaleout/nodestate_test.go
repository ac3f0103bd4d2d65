package scaleout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/integration/replicas"
	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/node/sim"
	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/enrolment/enrolmenttest"
	"github.com/sandgate/sandgate/nodecore/kubestore"
)

// testClient is the tests' HTTP client: http.DefaultClient's transport
// with a bound on every request, its response body read included, so a
// peer that hangs fails the request instead of holding the test until the
// package's -timeout. No request here is meant to take that long.
var testClient = &http.Client{Timeout: 2 * time.Minute}

// TestNodeStateAcrossReplicas runs three bin/caddy replicas with `nodes {
// store kubernetes }` on a real kube-apiserver: a deployment set through
// replica 0's admin API is what replicas 1 and 2 show; a token issued
// through replica 1's admin API enrols a node (through a store on the same
// namespace) and is then refused by every replica's machine API; the node
// is listed by replica 0's admin API; disabling it through replica 2 shows
// on replica 0; a refused deployment change reaches no replica; the objects hold
// only the token's and the credential's SHA-256.
func TestNodeStateAcrossReplicas(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	caddy := filepath.Join(root, "bin", "caddy")
	if _, err := os.Stat(caddy); err != nil {
		t.Fatalf("the gateway binary %s is missing; run `make build` first", caddy)
	}
	crds, err := deploy.NodeCRDs()
	if err != nil {
		t.Fatal(err)
	}
	ke, err := kubeenv.Start(crds, kubestore.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	defer ke.Stop()
	kube, err := client.New(ke.Config, client.Options{Scheme: kubestore.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "sandgate"
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	d1, d2 := strings.Repeat("1a", 32), strings.Repeat("2b", 32)
	var out logs
	// One node in the operator's file (the file may not be empty); the
	// enrolled node comes from the store.
	c, err := replicas.Start(replicas.Config{Caddy: caddy, Replicas: 3, Nodes: []sim.Identity{sim.NewIdentity()}, Kubeconfig: ke.KubeConfig, Namespace: ns, Admin: true,
		NodeStore: "kubernetes", NodesExtra: fmt.Sprintf("\t\t\tpool default {\n\t\t\t\tgeneration 1 digest %s\n\t\t\t\tgeneration 2 digest %s\n\t\t\t\ttarget 1\n\t\t\t}", d1, d2),
		Output: func(i int) io.Writer { return replicaLog{&out, i} }})
	if err != nil {
		out.dump(t)
		t.Fatal(err)
	}
	defer c.Close()
	defer func() {
		if t.Failed() {
			out.dump(t)
		}
	}()
	call := func(method, url string, body any) (int, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url, r)
		req.Header.Set("Content-Type", "application/json")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b
	}
	admin := func(i int, method, path string, body any) (int, []byte) {
		t.Helper()
		return call(method, "http://"+c.Replicas[i].Admin+path, body)
	}
	target := func(i int) int64 {
		t.Helper()
		code, b := admin(i, http.MethodGet, "/sandgate/pools/default", nil)
		var st struct {
			Deployment *struct {
				Generation int64 `json:"generation"`
			} `json:"deployment"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &st) != nil || st.Deployment == nil {
			t.Fatalf("replica %d: GET pool: %d %s", i, code, b)
		}
		return st.Deployment.Generation
	}
	until := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling the replicas' admin API
		}
		return time.Since(start)
	}

	if code, b := admin(0, http.MethodPut, "/sandgate/pools/default/deployment", map[string]any{"generation": 2, "serving_generation": 1}); code != http.StatusOK {
		t.Fatalf("PUT deployment through replica 0: %d %s", code, b)
	}
	took := until("replicas 1 and 2 show the deployment set through replica 0", func() bool { return target(1) == 2 && target(2) == 2 })
	t.Logf("the deployment set through replica 0 was on replicas 1 and 2 within %s", took.Round(time.Millisecond))
	if code, _ := admin(1, http.MethodPut, "/sandgate/pools/default/deployment", map[string]any{"generation": 9, "serving_generation": 1}); code < 400 {
		t.Fatalf("an unbound target was accepted: %d", code)
	}
	for i := range 3 {
		if g := target(i); g != 2 {
			t.Fatalf("replica %d: target %d after a refused change", i, g)
		}
	}

	code, b := admin(1, http.MethodPost, "/sandgate/enrolment-tokens", map[string]any{"pool": "default"})
	var tok struct {
		Token string `json:"enrolment_token"`
	}
	if code != http.StatusCreated || json.Unmarshal(b, &tok) != nil || tok.Token == "" {
		t.Fatalf("POST enrolment-tokens through replica 1: %d %s", code, b)
	}
	enrol := func(i int) (int, []byte) {
		return call(http.MethodPost, c.Replicas[i].URL+machine.EnrolPath, machine.EnrolRequest{EnrolmentToken: tok.Token,
			InstallationID: "11111111-2222-4333-8444-555555555555", Provider: proto.ProviderDocker,
			BackendFingerprint: strings.Repeat("ab", 32), MaxActive: 4, MaxRetained: 2})
	}
	// The machine API enrols only into a pool whose runtime comes from a
	// published release (this gateway has no release store): the node
	// enrols through a fourth replica's store with the token replica 1
	// issued, as replica 2's machine API would.
	store, err := kubestore.Open(kubestore.Config{REST: rest.CopyConfig(ke.Config), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e, err := store.Enrolment().Enrol(tok.Token, enrolmenttest.Request(), func(string) (enrolment.Generation, error) {
		return enrolment.Generation{Generation: 1, SpecificationDigest: d1}, nil
	})
	if err != nil {
		t.Fatalf("enrolment with replica 1's token: %v", err)
	}
	enrolled := machine.EnrolResponse{NodeID: e.Node.NodeID, Credential: e.Credential}
	// The used token is refused by every replica's machine API.
	for i := range 3 {
		if code, b := enrol(i); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("replica %d: the used token: %d %s", i, code, b)
		}
	}
	listed := func(i int, enabled bool) bool {
		_, b := admin(i, http.MethodGet, "/sandgate/enrolled-nodes", nil)
		var l struct {
			Nodes []struct {
				NodeID  string `json:"node_id"`
				Enabled bool   `json:"enabled"`
			} `json:"nodes"`
		}
		if json.Unmarshal(b, &l) != nil {
			return false
		}
		for _, n := range l.Nodes {
			if n.NodeID == enrolled.NodeID {
				return n.Enabled == enabled
			}
		}
		return false
	}
	until("replica 0 lists the node enrolled through replica 2", func() bool { return listed(0, true) })
	if code, b := admin(2, http.MethodPost, "/sandgate/enrolled-nodes/"+enrolled.NodeID+"/disable", nil); code != http.StatusOK {
		t.Fatalf("disable through replica 2: %d %s", code, b)
	}
	until("replica 0 shows the node disabled through replica 2", func() bool { return listed(0, false) })

	for _, list := range []client.ObjectList{&v1.NodePoolList{}, &v1.NodeEnrolmentTokenList{}, &v1.EnrolledNodeList{}} {
		if err := kube.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(list)
		if bytes.Contains(raw, []byte(tok.Token)) || bytes.Contains(raw, []byte(enrolled.Credential)) {
			t.Fatalf("%T holds a secret", list)
		}
	}
}
