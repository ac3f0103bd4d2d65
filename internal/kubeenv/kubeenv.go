// Package kubeenv starts a real kube-apiserver and etcd on 127.0.0.1 for
// tests, with controller-runtime's envtest, from the binaries that
// hack/kube/build.sh builds from the Go module proxy
// (docs/kube-apiserver.md). corectl's test harness (corectl/kubetest: its
// Start calls Start, its Main calls Main), the tests that start a control
// plane of their own (deploy's manifest
// tests, caddymodules/nodeconnect, integration/scaleout) and
// hack/scaleload call Start; the node and gateway packages whose tests
// share one control plane (nodecore/presence, nodecore/kubestore,
// nodecore/apis/v1alpha1, nodecore/portal) call Main from their TestMain.
//
// Binaries are looked up in $KUBEBUILDER_ASSETS, else in build.sh's
// default cache directory. When neither has them, Start fails with the
// command to run; tests never skip.
package kubeenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// K8sVersion and EtcdVersion are the versions hack/kube/build.sh builds by
// default; they name its cache directory.
const (
	K8sVersion  = "v1.37.2"
	EtcdVersion = "v3.6.16"
)

// ErrNoAssets: kube-apiserver or etcd was not found.
var ErrNoAssets = errors.New("kubeenv: kube-apiserver/etcd not found; run `bash hack/kube/build.sh` (or set KUBEBUILDER_ASSETS)")

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS when set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/kube-<K8sVersion>-etcd-<EtcdVersion>.
// The error wraps ErrNoAssets when a binary is missing.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("%w: %s", ErrNoAssets, err.Error())
			}
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "sandgate", "kube-"+K8sVersion+"-etcd-"+EtcdVersion)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return "", fmt.Errorf("%w (looked in %s)", ErrNoAssets, dir)
		}
	}
	return dir, nil
}

// Env is a running control plane.
type Env struct {
	// Config reaches the apiserver as a cluster admin (QPS 1000, burst
	// 2000).
	Config *rest.Config
	// KubeConfig is a kubeconfig file's content reaching the apiserver as
	// a cluster admin.
	KubeConfig []byte

	env *envtest.Environment
}

// Start starts kube-apiserver and etcd on 127.0.0.1 (RBAC on) and installs
// crds (which may be nil); scheme may be nil. Stop it with Stop.
func Start(crds []*apiextensionsv1.CustomResourceDefinition, scheme *runtime.Scheme) (*Env, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		CRDs:                     crds,
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	// envtest binds kube-apiserver and etcd to 127.0.0.1 (addr.Suggest's
	// default host) and enables RBAC.
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("kubeenv: start control plane: %w", err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	return &Env{Config: cfg, KubeConfig: te.KubeConfig, env: te}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// Main runs a test binary whose tests share one control plane; call it
// from TestMain. It starts the control plane as Start does with crds and
// scheme, calls setup with it (nil: nothing) to build the package's
// clients, runs the tests, stops the control plane and exits with the
// tests' status (a failed stop is printed to standard error and does not
// change it). It never returns. When the start or setup fails (Start's
// errors, ErrNoAssets among them, or setup's), it prints the error and
// exits with status 2 before any test runs: tests never skip for want of
// an apiserver.
func Main(m *testing.M, crds []*apiextensionsv1.CustomResourceDefinition, scheme *runtime.Scheme, setup func(*Env) error) {
	env, err := Start(crds, scheme)
	if err == nil && setup != nil {
		if err = setup(env); err != nil {
			_ = env.Stop()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kubeenv: stop:", err)
	}
	os.Exit(code)
}
