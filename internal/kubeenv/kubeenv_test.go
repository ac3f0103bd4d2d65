package kubeenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAssetsDirNeedsBothBinaries(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	if _, err := AssetsDir(); !errors.Is(err, ErrNoAssets) {
		t.Fatalf("empty dir: %v, want ErrNoAssets", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := AssetsDir(); !errors.Is(err, ErrNoAssets) {
		t.Fatalf("etcd missing: %v, want ErrNoAssets", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := AssetsDir(); err != nil || got != dir {
		t.Fatalf("AssetsDir = %q, %v", got, err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("XDG_CACHE_HOME", dir)
	want := filepath.Join(dir, "sandgate", "kube-"+K8sVersion+"-etcd-"+EtcdVersion)
	if _, err := AssetsDir(); !errors.Is(err, ErrNoAssets) || !strings.Contains(err.Error(), want) {
		t.Fatalf("default dir: %v, want ErrNoAssets naming %s", err, want)
	}
}
