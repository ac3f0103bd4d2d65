package nodeconnect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	_ "github.com/sandgate/sandgate/caddymodules/nodeadmin" // admin.api.sandgate: the /sandgate/pools routes
	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/deploy"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/internal/waittest"
	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
	"github.com/sandgate/sandgate/nodecore/enrolment/enrolmenttest"
	"github.com/sandgate/sandgate/nodecore/kubestore"
	nodepool "github.com/sandgate/sandgate/nodecore/pool"
)

// TestCaddyNodeStoreKubernetes runs the gateway with `nodes { store
// kubernetes }` against a real kube-apiserver as replica A (the sandgate
// app, with Caddy's admin API), beside replica B (a kubestore.Store on the
// same namespace, as another gateway process opens it, with the same
// pools): a deployment set
// through A's admin API reaches B's registry through B's watch, and one B
// sets is what A's admin API shows; a token issued through A's admin API
// (only its SHA-256 stored) enrols a node through B; A authenticates that
// node (enrolled elsewhere) and lists it; disabling it through A's admin
// API reaches B; a reload keeps the store and its state; a malformed
// request changes nothing.
func TestCaddyNodeStoreKubernetes(t *testing.T) {
	crds, err := deploy.NodeCRDs()
	if err != nil {
		t.Fatal(err)
	}
	env, err := kubeenv.Start(crds, kubestore.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kube, err := client.New(env.Config, client.Options{Scheme: kubestore.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gw"}}); err != nil {
		t.Fatal(err)
	}
	adminAddr, err := freeport.Addr() // below the ephemeral range: no outgoing connection takes it meanwhile
	if err != nil {
		t.Fatal(err)
	}
	f := newFiles(t)
	kubeconfig := f.dir + "/kubeconfig"
	write(t, kubeconfig, string(env.KubeConfig))
	d1, d2 := strings.Repeat("1a", 32), strings.Repeat("2b", 32)
	withStore := func(body string) obj {
		cfg := config(f, body)
		cfg["admin"] = obj{"listen": adminAddr, "config": obj{"persist": false}}
		cfg["apps"].(obj)["sandgate"].(obj)["kubernetes"] = obj{"kubeconfig": kubeconfig, "namespace": "gw", "replica": "replica-a"}
		n := nodesOf(cfg)
		n["store"] = "kubernetes"
		n["pools"] = obj{"default": obj{"generations": []any{obj{"generation": 1, "specification_digest": d1},
			obj{"generation": 2, "specification_digest": d2}}, "target": 1}}
		return cfg
	}
	load(t, withStore("v1"))
	app := func() *sandgate.App {
		a, err := caddy.ActiveContext().App(sandgate.AppName)
		if err != nil {
			t.Fatal(err)
		}
		return a.(*sandgate.App)
	}
	admin := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://"+adminAddr+path, r)
		req.Header.Set("Content-Type", "application/json")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	target := func(path string) int64 {
		t.Helper()
		code, out := admin(http.MethodGet, path, nil)
		var st struct {
			Deployment *struct {
				Generation int64 `json:"generation"`
			} `json:"deployment"`
		}
		if code != http.StatusOK || json.Unmarshal(out, &st) != nil || st.Deployment == nil {
			t.Fatalf("GET %s: %d %s", path, code, out)
		}
		return st.Deployment.Generation
	}
	if g := target("/sandgate/pools/default"); g != 1 {
		t.Fatalf("A's target %d, want the config's 1", g)
	}

	// Replica B.
	b, err := kubestore.Open(kubestore.Config{REST: rest.CopyConfig(env.Config), Namespace: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bPools, err := b.Pools()
	if err != nil {
		t.Fatal(err)
	}
	// B runs the same config (its pools), which changes nothing stored.
	if _, err := bPools.Configure(map[string]nodepool.Spec{"default": {Bindings: []nodepool.Binding{{Generation: 1, SpecificationDigest: d1},
		{Generation: 2, SpecificationDigest: d2}}, Target: 1}}); err != nil {
		t.Fatal(err)
	}
	if d, ok := bPools.Deployment("default"); !ok || d.Generation != 1 {
		t.Fatalf("B's deployment %+v %v, want the config's", d, ok)
	}

	// A's admin API → B.
	if code, out := admin(http.MethodPut, "/sandgate/pools/default/deployment", obj{"generation": 2, "serving_generation": 1}); code != http.StatusOK {
		t.Fatalf("PUT deployment through A: %d %s", code, out)
	}
	start := time.Now()
	waittest.Until(t, timeout, "B sees the deployment set through A's admin API", func() bool {
		d, _ := bPools.Deployment("default")
		return d.Generation == 2
	})
	t.Logf("the deployment reached B %s after A's answer", time.Since(start).Round(time.Millisecond))
	// A malformed request changes nothing, on either replica.
	if code, _ := admin(http.MethodPut, "/sandgate/pools/default/deployment", obj{"generation": 3, "serving_generation": 1}); code < 400 {
		t.Fatalf("an unbound target was accepted: %d", code)
	}
	if d, _ := bPools.Deployment("default"); d.Generation != 2 || target("/sandgate/pools/default") != 2 {
		t.Fatal("a refused change reached a replica")
	}
	// B → A.
	one := int64(2)
	if _, err := bPools.Set("default", 1, &one, nil); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, timeout, "A's admin API shows B's deployment", func() bool { return target("/sandgate/pools/default") == 1 })

	// A token issued through A's admin API enrols a node through B.
	code, out := admin(http.MethodPost, "/sandgate/enrolment-tokens", obj{"pool": "default", "ttl": "10m"})
	var tok struct {
		Token string `json:"enrolment_token"`
	}
	if code != http.StatusCreated || json.Unmarshal(out, &tok) != nil || tok.Token == "" {
		t.Fatalf("POST enrolment-tokens through A: %d %s", code, out)
	}
	digest, _ := enrolment.TokenDigest(tok.Token)
	var stored v1.NodeEnrolmentToken
	if err := kube.Get(t.Context(), client.ObjectKey{Namespace: "gw", Name: digest}, &stored); err != nil {
		t.Fatalf("the token's NodeEnrolmentToken (named by its SHA-256): %v", err)
	}
	e, err := b.Enrolment().Enrol(tok.Token, enrolmenttest.Request(), func(p string) (enrolment.Generation, error) {
		return enrolment.Generation{Generation: 1, SpecificationDigest: d1}, nil
	})
	if err != nil {
		t.Fatalf("enrolling through B with A's token: %v", err)
	}
	id, sum := e.Node.NodeID, credential.Sum(e.Credential)
	// A authenticates the node B enrolled a moment ago (read from the
	// apiserver when A's watch has not delivered it yet).
	if n, err := app().NodeCredentials().Authenticate(id, sum); err != nil || n.Pool != "default" {
		t.Fatalf("A authenticates the node enrolled through B: %+v %v", n, err)
	}
	if _, err := app().NodeCredentials().Authenticate(id, credential.Sum("wrong")); err == nil {
		t.Fatal("A accepted a wrong credential")
	}
	// The token is used on every replica.
	if _, err := app().NodeEnrolment().Enrol(tok.Token, enrolmenttest.Request(), enrolmenttest.Resolve7); err == nil {
		t.Fatal("A enrolled a second node with the used token")
	}
	waittest.Until(t, timeout, "A's admin API lists the node", func() bool {
		_, out := admin(http.MethodGet, "/sandgate/enrolled-nodes", nil)
		return bytes.Contains(out, []byte(id))
	})
	// Disabling through A's admin API reaches B.
	if code, out := admin(http.MethodPost, "/sandgate/enrolled-nodes/"+id+"/disable", nil); code != http.StatusOK {
		t.Fatalf("disable through A: %d %s", code, out)
	}
	waittest.Until(t, timeout, "B refuses the node disabled through A", func() bool {
		_, err := b.Enrolment().Authenticate(id, sum)
		return err != nil
	})
	// No secret in any object.
	var objs []client.ObjectList
	objs = append(objs, &v1.NodePoolList{}, &v1.NodeEnrolmentTokenList{}, &v1.EnrolledNodeList{}, &v1.NodePlacementsList{})
	for _, list := range objs {
		if err := kube.List(t.Context(), list, client.InNamespace("gw")); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(list)
		if bytes.Contains(raw, []byte(tok.Token)) || bytes.Contains(raw, []byte(e.Credential)) {
			t.Fatalf("%T holds a secret", list)
		}
	}

	// A reload keeps the store (and its view).
	before := app().NodePools()
	if err := caddy.Load(mustJSON(t, withStore("v2")), true); err != nil {
		t.Fatalf("reload: %v", err)
	}
	waitReloaded(t)
	if app().NodePools() != before || target("/sandgate/pools/default") != 1 {
		t.Fatal("a reload did not keep the Kubernetes store and its deployment")
	}
	if got := fmt.Sprint(len(app().NodeEnrolment().Records())); got != "1" {
		t.Fatalf("after the reload A knows %s enrolled nodes, want 1", got)
	}
}
