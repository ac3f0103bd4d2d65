package docker

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
)

// unixServer serves h on a unix socket in a fresh directory and returns
// its DOCKER_HOST address.
func unixServer(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "sgdiag-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func probeWith(t *testing.T, endpoint string, opts ...client.Opt) (error, string) {
	t.Helper()
	p, err := New(Config{Endpoint: endpoint, NodeID: uuid.NewString(), State: mustState(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) > 0 {
		p.cli.Close()
		if p.cli, err = client.NewClientWithOpts(append([]client.Opt{client.WithHost(endpoint), client.WithAPIVersionNegotiation()}, opts...)...); err != nil {
			t.Fatal(err)
		}
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = p.Probe(ctx)
	return err, p.Diagnose(err)
}

// TestDiagnoseClassifiesTypedProbeErrors drives the real Docker client
// against endpoints that fail in each way and checks the fixed code.
func TestDiagnoseClassifiesTypedProbeErrors(t *testing.T) {
	ping := func(status int, version string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Api-Version", version)
			w.WriteHeader(status)
		})
	}
	refused := func(t *testing.T) string {
		sock := filepath.Join(shortDir(t), "gone.sock")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close() // the socket file stays, nobody listens
		return "unix://" + sock
	}
	silent := func(t *testing.T) string {
		sock := filepath.Join(shortDir(t), "silent.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() }) // accept, never answer
			}
		}()
		return "unix://" + sock
	}
	denied := client.WithDialContext(func(context.Context, string, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	})

	cases := []struct {
		name     string
		endpoint func(t *testing.T) string
		opts     []client.Opt
		want     string
	}{
		{"no socket", func(t *testing.T) string { return "unix://" + filepath.Join(shortDir(t), "none.sock") }, nil, proto.DiagDockerUnreachable},
		{"connection refused", refused, nil, proto.DiagDockerUnreachable},
		{"permission denied", func(t *testing.T) string { return "unix:///var/run/denied.sock" }, []client.Opt{denied}, proto.DiagDockerPermissionDenied},
		{"no answer", silent, nil, proto.DiagDockerTimeout},
		{"old API", func(t *testing.T) string { return unixServer(t, ping(http.StatusOK, "1.30")) }, nil, proto.DiagDockerAPIVersionUnsupported},
		{"500", func(t *testing.T) string { return unixServer(t, ping(http.StatusInternalServerError, "1.41")) }, nil, proto.DiagDockerDaemonError},
		{"503", func(t *testing.T) string { return unixServer(t, ping(http.StatusServiceUnavailable, "1.41")) }, nil, proto.DiagDockerDaemonError},
		{"404", func(t *testing.T) string { return unixServer(t, http.NotFoundHandler()) }, nil, proto.DiagProviderUnavailable},
		{"healthy", func(t *testing.T) string { return unixServer(t, ping(http.StatusOK, "1.41")) }, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err, code := probeWith(t, tc.endpoint(t), tc.opts...)
			if code != tc.want {
				t.Fatalf("probe error %v: code %q, want %q", err, code, tc.want)
			}
			if tc.want != "" {
				if _, known := proto.DiagnosticCause(code); !known {
					t.Fatalf("code %q is not in node/proto's table", code)
				}
			}
		})
	}
}
