package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/freeport"
)

// repoRoot is the repository root, where bin/caddy is built (make build).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(CaddyBinary(root)); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the gateway binary bin/caddy is missing (%v): run make build", err)
	}
	return root
}

// creds is a credentials file with one enabled credential.
const creds = "credentials:\n  - {id: c, enabled: true, projectNamespace: p, clusterId: cluster-a}\n"

// holdShared listens on a loopback port the kernel picks with
// SO_REUSEPORT, as a Caddy of another test would, so that a gateway
// started on the same port binds it with no error and shares it.
func holdShared(t *testing.T) string {
	t.Helper()
	l, err := freeport.ListenShared(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// picks replaces pickAddr for the test: the n-th pick (from 1) returns
// held when shared(n), others a free port; it returns the count of picks.
func picks(t *testing.T, held string, shared func(n int) bool) *int {
	t.Helper()
	n := new(int)
	saved := pickAddr
	t.Cleanup(func() { pickAddr = saved })
	pickAddr = func() (string, error) {
		*n++
		if shared(*n) {
			return held, nil
		}
		return freeport.Addr()
	}
	return n
}

// TestStartRetriesSharedPorts: when the port picked for the gateway's site
// or, with a Caddyfile that takes {{ADMIN}}, for its admin endpoint is
// held by another SO_REUSEPORT listener, the gateway binds it with no
// error, and Start stops it and starts it again on new ports (each
// attempt picks the site's and the admin's address: 2 picks), ending
// with a gateway that alone listens on both.
func TestStartRetriesSharedPorts(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		name string
		pick int // the pick of the first attempt that returns the held port
	}{
		{"site", 1},
		{"admin", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := holdShared(t)
			n := picks(t, held, func(n int) bool { return n == tc.pick })
			env, err := Start(Config{RepoRoot: root, Credentials: creds})
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			if *n != 4 {
				t.Fatalf("%d picks, want 4 (a second attempt after the shared %s)", *n, held)
			}
			for _, addr := range []string{strings.TrimPrefix(env.Gateway, "http://"), env.Admin} {
				if addr == held {
					t.Fatalf("the gateway kept the shared %s", held)
				}
				if all, own, err := freeport.Listeners(env.PID(), addr); all != 1 || own != 1 || err != nil {
					t.Fatalf("Listeners(gateway, %s) = %d, %d, %v; want 1, 1", addr, all, own, err)
				}
			}
		})
	}
}

// TestStartFailsOnAnAdminPortAlwaysShared: when every admin address
// picked is shared, Start gives up after its 5 attempts with ErrBindRace
// naming the address.
func TestStartFailsOnAnAdminPortAlwaysShared(t *testing.T) {
	root := repoRoot(t)
	held := holdShared(t)
	n := picks(t, held, func(n int) bool { return n%2 == 0 })
	env, err := Start(Config{RepoRoot: root, Credentials: creds})
	if err == nil {
		env.Close()
		t.Fatal("Start succeeded with its admin port shared")
	}
	if !errors.Is(err, ErrBindRace) || !strings.Contains(err.Error(), held) {
		t.Fatalf("Start = %v, want ErrBindRace naming %s", err, held)
	}
	if *n != 10 {
		t.Fatalf("%d picks, want 10 (5 attempts)", *n)
	}
}

// TestStartIgnoresAnAdminAddressNotUsed: a Caddyfile that does not take
// {{ADMIN}} (admin off) leaves the picked admin address unused, so a
// listener there is not the gateway's concern: the first attempt stands.
func TestStartIgnoresAnAdminAddressNotUsed(t *testing.T) {
	root := repoRoot(t)
	held := holdShared(t)
	n := picks(t, held, func(n int) bool { return n == 2 })
	env, err := Start(Config{RepoRoot: root, Caddyfile: strings.Replace(DefaultCaddyfile, "admin {{ADMIN}}", "admin off", 1), Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if *n != 2 {
		t.Fatalf("%d picks, want 2 (one attempt)", *n)
	}
}

// TestStartChecksListens: an address of Config.Listens (a site on a port
// the caller picked) is held to the gateway's own rule: shared with
// another SO_REUSEPORT listener, Start fails with ErrBindRace naming it;
// free, the gateway alone listens there once Start returns.
func TestStartChecksListens(t *testing.T) {
	root := repoRoot(t)
	site := func(addr string) string {
		return DefaultCaddyfile + "\nhttp://" + addr + " {\n\tbind 127.0.0.1\n\trespond ok\n}\n"
	}
	held := holdShared(t)
	env, err := Start(Config{RepoRoot: root, Credentials: creds, Caddyfile: site(held), Listens: []string{held}})
	if err == nil {
		env.Close()
		t.Fatal("Start succeeded with a port of Listens shared")
	}
	if !errors.Is(err, ErrBindRace) || !strings.Contains(err.Error(), held) {
		t.Fatalf("Start = %v, want ErrBindRace naming %s", err, held)
	}
	// A free port picked here may still be taken before the gateway
	// binds it: that start is a bind race too, and a new port is picked.
	var free string
	for attempt := 1; ; attempt++ {
		if free, err = freeport.Addr(); err != nil {
			t.Fatal(err)
		}
		env, err = Start(Config{RepoRoot: root, Credentials: creds, Caddyfile: site(free), Listens: []string{free}})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBindRace) || attempt == 5 {
			t.Fatal(err)
		}
	}
	defer env.Close()
	if all, own, err := freeport.Listeners(env.PID(), free); all != 1 || own != 1 || err != nil {
		t.Fatalf("Listeners(gateway, %s) = %d, %d, %v; want 1, 1", free, all, own, err)
	}
}
