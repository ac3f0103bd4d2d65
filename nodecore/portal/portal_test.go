package portal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/internal/kubeenv"
)

var env *kubeenv.Env

func TestMain(m *testing.M) {
	kubeenv.Main(m, nil, nil, func(e *kubeenv.Env) error {
		env = e
		return nil
	})
}

// kubeconfig writes the test apiserver's kubeconfig with a second context
// "other" whose namespace is "elsewhere", and returns its path.
func kubeconfig(t *testing.T) string {
	t.Helper()
	kc, err := clientcmd.Load(env.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := *kc.Contexts[kc.CurrentContext]
	cur.Namespace = "elsewhere"
	kc.Contexts["other"] = &cur
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConnectKubeconfig: a kubeconfig reaches the real apiserver; the
// namespace comes from the setting, else from the context ("default" when
// it names none, or the named context's); the rate limits default to
// DefaultQPS and twice that; Context ends with Close.
func TestConnectKubeconfig(t *testing.T) {
	path := kubeconfig(t)
	c, err := Connect(Config{Kubeconfig: path, Namespace: "gw", Replica: "gateway-0"})
	if err != nil {
		t.Fatal(err)
	}
	// A name of its own: the control plane is shared by the package's
	// tests and outlives a run (go test -count=2 runs this test again).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "connect-"}}
	if _, err := c.Clientset().CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a request through the clientset: %v", err)
	}
	if c.Namespace() != "gw" || c.Replica() != "gateway-0" {
		t.Fatalf("namespace %q replica %q", c.Namespace(), c.Replica())
	}
	rc := c.RESTConfig()
	if rc.QPS != DefaultQPS || rc.Burst != 2*DefaultQPS || rc.UserAgent != UserAgent {
		t.Fatalf("qps %v burst %d agent %q", rc.QPS, rc.Burst, rc.UserAgent)
	}
	rc.QPS = 1 // a copy
	if c.RESTConfig().QPS != DefaultQPS {
		t.Fatal("RESTConfig returned the shared configuration, not a copy")
	}
	select {
	case <-c.Context().Done():
		t.Fatal("Context ended before Close")
	default:
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-c.Context().Done()

	for _, tc := range []struct {
		context, want string
	}{{"", "default"}, {"other", "elsewhere"}} {
		c, err := Connect(Config{Kubeconfig: path, Context: tc.context, Replica: "r", QPS: 7})
		if err != nil {
			t.Fatal(err)
		}
		if c.Namespace() != tc.want || c.RESTConfig().QPS != 7 || c.RESTConfig().Burst != 14 {
			t.Errorf("context %q: namespace %q", tc.context, c.Namespace())
		}
	}
}

// TestReplicaDefaultsToHostName: without replica, the host name is the
// replica's identity (in a pod, its name); a host name that is no DNS
// subdomain is refused with the advice to set it.
func TestReplicaDefaultsToHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Connect(Config{Kubeconfig: kubeconfig(t), Namespace: "n"})
	if len(validation.IsDNS1123Subdomain(host)) > 0 {
		if err == nil || !strings.Contains(err.Error(), "set it, e.g. to the pod name") {
			t.Fatalf("host name %q: %v", host, err)
		}
		return
	}
	if err != nil || c.Replica() != host {
		t.Fatalf("replica %v, host %q: %v", c, host, err)
	}
}

// TestConnectErrors: every bad setting is refused with an error naming it,
// and a kubeconfig's credentials never appear in one.
func TestConnectErrors(t *testing.T) {
	dir := t.TempDir()
	secret := "s3cr3t-bearer-token-value-0123456789"
	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, []byte("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: "+secret+"}\ncontexts: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := kubeconfig(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing kubeconfig", Config{Kubeconfig: filepath.Join(dir, "absent"), Namespace: "n", Replica: "r"}, "portal: kubeconfig: "},
		{"malformed kubeconfig", Config{Kubeconfig: broken, Namespace: "n", Replica: "r"}, "portal: kubeconfig " + broken},
		{"unknown context", Config{Kubeconfig: good, Context: "nope", Namespace: "n", Replica: "r"}, `context "nope"`},
		{"context without kubeconfig", Config{Context: "x"}, "portal: a kubeconfig context needs a kubeconfig file"},
		{"not in a cluster", Config{Namespace: "n", Replica: "r"}, "portal: no kubeconfig is set and the in-cluster configuration is unavailable"},
		{"bad namespace", Config{Kubeconfig: good, Namespace: "Not_A_Label", Replica: "r"}, `portal: namespace "Not_A_Label"`},
		{"bad replica", Config{Kubeconfig: good, Namespace: "n", Replica: "a b"}, `portal: replica "a b"`},
		{"negative qps", Config{Kubeconfig: good, QPS: -1}, "portal: qps and burst must be positive"},
	} {
		c, err := Connect(tc.cfg)
		if err == nil {
			c.Close()
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the credential: %v", tc.name, err)
		}
	}
}

// TestForConfig: a Cluster over a test's client configuration keeps its
// rate limits and checks namespace and replica.
func TestForConfig(t *testing.T) {
	c, err := ForConfig(env.Config, "ns", "replica-1")
	if err != nil {
		t.Fatal(err)
	}
	if c.RESTConfig().QPS != env.Config.QPS {
		t.Fatalf("qps %v", c.RESTConfig().QPS)
	}
	if _, err := c.Clientset().CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := ForConfig(env.Config, "", "r"); err == nil {
		t.Fatal("an empty namespace was accepted")
	}
	if _, err := ForConfig(env.Config, "n", ""); err == nil {
		t.Fatal("an empty replica was accepted")
	}
}
