package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apikey"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/daemon"
	"github.com/sandgate/sandgate/gateway/credential"
	"k8s.io/client-go/rest"
)

// TestNewRefusesShortExecdTokenSecret: a configuration built without
// Validate still has its execdTokenSecretFile read at start; a secret
// under 32 bytes stops corectl before any cluster is dialled, and the
// error does not carry it.
func TestNewRefusesShortExecdTokenSecret(t *testing.T) {
	short := strings.Repeat("q", 31)
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(short+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := apikey.Parse([]byte("keys: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	dialled := false
	_, err = daemon.New(daemon.Options{
		Config:      &cluster.Config{Clusters: []cluster.Cluster{{ID: "c1", ExecdTokenSecretFile: file}}},
		Keys:        keys,
		Credentials: credential.Static{},
		Listen:      "127.0.0.1:0",
		RESTConfig:  func(*cluster.Cluster) (*rest.Config, error) { dialled = true; return &rest.Config{}, nil },
	})
	if err == nil || !strings.Contains(err.Error(), "at least 32 bytes") || strings.Contains(err.Error(), short) || dialled {
		t.Fatalf("New = %v (dialled %v)", err, dialled)
	}
}
