package rotation

// The compute clusters' kubeconfigs (docs/runbook.md "Kubeconfigs"): a
// real, revocable credential (a ServiceAccount's token from the
// TokenRequest API, bound to cluster-admin), rolled into corectl, then
// revoked by deleting the ServiceAccount.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/integration/harness"
)

// serviceAccountKubeconfig creates ServiceAccount namespace/name bound to
// the ClusterRole cluster-admin (what corectl's own RBAC grants is not
// this test's concern) and returns a kubeconfig reaching the apiserver
// with a token the TokenRequest API issued for it (valid an hour).
func serviceAccountKubeconfig(t *testing.T, namespace, name string) []byte {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}}
	if err := env.Client.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
	hour := int64(3600)
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &hour}}
	if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", namespace, name, err)
	}
	if tr.Status.Token == "" {
		t.Fatalf("TokenRequest for %s/%s: no token", namespace, name)
	}
	cfg, err := clientcmd.Load(env.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	if cur == nil {
		t.Fatal("the admin kubeconfig has no current context")
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{name: {Token: tr.Status.Token}}
	cfg.Contexts = map[string]*clientcmdapi.Context{name: {Cluster: cur.Cluster, AuthInfo: name}}
	cfg.CurrentContext = name
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kubeconfigStatus lists Namespaces with kubeconfig and returns the
// apiserver's refusal (nil when it answered).
func kubeconfigStatus(kubeconfig []byte) error {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(rc, client.Options{Scheme: env.Scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.List(ctx, &corev1.NamespaceList{}, client.Limit(1))
}

// controlTraffic is control-API traffic through corectl's Service: one
// goroutine creating, reading and deleting sandboxes, two listing and
// reading a standing one. Any answer but the expected status, or no
// answer, is a refusal.
type controlTraffic struct {
	r             *rig
	sent, refused atomic.Int64
	created       atomic.Int64
	refusals      sync.Map
	stop          context.CancelFunc
	stopped       sync.WaitGroup
	standing      sandbox
	progress      chan struct{} // receives after each create cycle
}

// call sends one control-API request and reports a refusal unless it
// answers want; it returns the answer's body and whether it was want.
func (c *controlTraffic) call(ctx context.Context, method, path, body string, want int) (string, bool) {
	req, _ := http.NewRequestWithContext(ctx, method, c.r.front+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", c.r.key())
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	phase := c.r.phase.Load().(string)
	resp, err := keepAliveClient.Do(req)
	if ctx.Err() != nil {
		return "", false
	}
	c.sent.Add(1)
	if err != nil {
		c.refused.Add(1)
		c.refusals.Store(fmt.Sprintf("%s: %s %s: %v", phase, method, path, err), true)
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != want {
		c.refused.Add(1)
		c.refusals.Store(fmt.Sprintf("%s: %s %s: %d %.200s", phase, method, strings.SplitN(path, "?", 2)[0], resp.StatusCode, b), true)
		return "", false
	}
	return string(b), true
}

func (c *controlTraffic) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.progress = make(chan struct{}, 1)
	c.stopped.Add(3)
	go func() {
		defer c.stopped.Done()
		for ctx.Err() == nil {
			b, ok := c.call(ctx, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":300}`, http.StatusCreated)
			if ok {
				var created struct{ SandboxID string }
				_ = json.Unmarshal([]byte(b), &created)
				id := created.SandboxID
				c.call(ctx, "GET", "/sandboxes/"+id, "", http.StatusOK)
				c.call(ctx, "DELETE", "/sandboxes/"+id, "", http.StatusNoContent)
				c.created.Add(1)
			}
			select {
			case c.progress <- struct{}{}:
			default:
			}
		}
	}()
	for range 2 {
		go func() {
			defer c.stopped.Done()
			for ctx.Err() == nil {
				c.call(ctx, "GET", "/v2/sandboxes", "", http.StatusOK)
				c.call(ctx, "GET", "/sandboxes/"+c.standing.id, "", http.StatusOK)
			}
		}()
	}
}

// cycles waits until n more create–get–delete cycles have ended.
func (c *controlTraffic) cycles(what string, n int) {
	c.r.t.Helper()
	select {
	case <-c.progress: // one that ended before the call
	default:
	}
	deadline := time.After(wait)
	for range n {
		select {
		case <-c.progress:
		case <-deadline:
			c.r.t.Fatalf("%s: the control-API traffic made no progress", what)
		}
	}
}

// end stops the traffic and reports: no request refused.
func (c *controlTraffic) end() {
	if c.stop == nil {
		return
	}
	c.stop()
	c.stop = nil
	c.stopped.Wait()
	t := c.r.t
	if n := c.refused.Load(); n != 0 {
		var kinds []string
		c.refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d control-API requests refused during the rotation: %v", n, c.sent.Load(), kinds)
	}
	t.Logf("%d control-API requests (%d sandboxes created and deleted), %d refused", c.sent.Load(), c.created.Load(), c.refused.Load())
}

// TestKubeconfigRotationUnderTraffic follows docs/runbook.md "Kubeconfigs"
// with two bin/corectl replicas reaching the real kube-apiserver (the
// compute cluster) through a ServiceAccount token: step 1 makes the
// cluster accept a new credential (a second ServiceAccount and its
// token), step 2 puts the new kubeconfig in corectl's file and rolls the
// replicas, step 3 revokes the old credential (deletes its
// ServiceAccount). Control-API traffic (create, get, delete, list) and
// data-plane traffic through bin/caddy's authorizer run the whole time:
// none is refused. At the end the apiserver refuses the old kubeconfig
// (401) and corectl still creates, reads and lists sandboxes.
func TestKubeconfigRotationUnderTraffic(t *testing.T) {
	dir := t.TempDir()
	keyFile := dir + "/primary.key"
	writeFile(t, keyFile, "rotation-hmac-secret-0123456789abcdef0123456789")
	saNS := env.Namespace(t)
	oldKC := serviceAccountKubeconfig(t, saNS, "corectl-old")
	if err := kubeconfigStatus(oldKC); err != nil {
		t.Fatalf("the old kubeconfig before the rotation: %v", err)
	}
	kcFile := dir + "/cluster-a.kubeconfig"
	writeFile(t, kcFile, string(oldKC))
	r := newRig(t, func(*rig) []string {
		return []string{"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile}
	}, func(r *rig, step int) string {
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}", "token_key primary HS256 "+keyFile, 1),
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\t"+authorizerBlock(r.front, r.internal, step), 1)
	}, func(_ *rig, c *cluster.Cluster) { c.Kubeconfig = kcFile })
	sb := r.create(600)
	r.startTraffic(func() sandbox { return sb })
	ct := &controlTraffic{r: r, standing: sb}
	ct.start()
	t.Cleanup(ct.end)
	r.answered("before the rotation", 20, r.live...)
	ct.cycles("before the rotation", 2)

	// 1. The cluster accepts the new credential.
	r.phase.Store("step 1")
	newKC := serviceAccountKubeconfig(t, saNS, "corectl-new")
	if err := kubeconfigStatus(newKC); err != nil {
		t.Fatalf("the new kubeconfig: %v", err)
	}
	// 2. corectl's file holds it; the replicas roll.
	writeFile(t, kcFile, string(newKC))
	r.rollCorectl("step 2")
	ct.cycles("step 2", 2)
	// 3. The old credential is revoked.
	r.phase.Store("step 3")
	if err := env.Client.Delete(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNS, Name: "corectl-old"}}); err != nil {
		t.Fatal(err)
	}
	var last error
	if err := kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(context.Context) (bool, error) {
		last = kubeconfigStatus(oldKC)
		return apierrors.IsUnauthorized(last), nil
	}); err != nil {
		t.Fatalf("the old kubeconfig is still accepted after its ServiceAccount was deleted: %v", last)
	}
	r.answered("step 3: after the revocation", 20, r.live...)
	ct.cycles("step 3: after the revocation", 3)
	ct.end()
	r.endTraffic()

	if err := kubeconfigStatus(newKC); err != nil {
		t.Errorf("the new kubeconfig after the rotation: %v", err)
	}
	// corectl still works on the new credential.
	after := r.create(600)
	var got struct{ SandboxID string }
	if st := r.api("GET", "/sandboxes/"+after.id, "", &got); st != http.StatusOK || got.SandboxID != after.id {
		t.Errorf("GET a sandbox created after the revocation = %d %+v", st, got)
	}
	if code, body, err := r.dataPlane(context.Background(), after); err != nil || code != http.StatusOK {
		t.Errorf("data plane for a sandbox created after the revocation: %d %.200s %v", code, body, err)
	}
}
