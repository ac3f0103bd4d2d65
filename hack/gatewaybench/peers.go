package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/freeport"
)

// nginxConf is the nginx baseline: one process (no master, one worker, so
// /proc/<pid>/stat holds all its CPU), proxy_pass to the fixed entry with
// kept-alive upstream connections, streaming both ways (no request or
// response buffering, as Caddy's reverse_proxy), no access log (Caddy's
// has none by default). Arguments: the directory for its files (four
// times), the fixed entry's address, the listen address.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[1]s/nginx-tmp/body;
	proxy_temp_path %[1]s/nginx-tmp/proxy;
	client_max_body_size 0;
	keepalive_requests 10000000;
	keepalive_timeout 300s;
	upstream fixedentry {
		server %[2]s;
		keepalive 128;
		keepalive_requests 10000000;
		keepalive_timeout 300s;
	}
	server {
		listen %[3]s;
		location / {
			proxy_pass http://fixedentry;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
			proxy_request_buffering off;
			proxy_read_timeout 300s;
			proxy_send_timeout 300s;
		}
	}
}
`

// nginxBinary finds nginx, installing Debian's nginx-light with apt-get
// when it is missing (as hack/'s other scripts install what they need),
// and says what it does.
func nginxBinary() (string, error) {
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin, nil
		}
	}
	fmt.Println("gatewaybench: nginx is missing; installing Debian's nginx-light (apt-get install -y nginx-light)")
	install := func(args ...string) error {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get %v: %w\n%s", args, err, out)
		}
		return nil
	}
	if err := install("install", "-y", "nginx-light"); err != nil {
		if err := install("update"); err != nil {
			return "", err
		}
		if err := install("install", "-y", "nginx-light"); err != nil {
			return "", err
		}
	}
	return exec.LookPath("/usr/sbin/nginx")
}

// startNginx runs the nginx baseline on addr in front of the fixed entry
// fe and waits until it listens.
func startNginx(dir, addr, fe string) (*proc, error) {
	bin, err := nginxBinary()
	if err != nil {
		return nil, err
	}
	ndir := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(filepath.Join(ndir, "nginx-tmp"), 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, ndir, fe, addr), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(ndir, "nginx.log")
	cmd := exec.Command(bin, "-c", conf, "-p", ndir, "-e", filepath.Join(ndir, "nginx-error.log"))
	return startWaiting("nginx", cmd, logPath, "http://"+addr+"/")
}

// startExecd runs the real OpenSandbox execd bin on a free loopback port
// (execd listens on every address of the host; its only flag is the
// port) and waits until it answers /ping.
func startExecd(bin, logPath string) (*proc, string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	if _, err := strconv.Atoi(port); err != nil {
		return nil, "", fmt.Errorf("free port %q: %w", addr, err)
	}
	p, err := startWaiting("execd", exec.Command(bin, "--port", port), logPath, "http://"+addr+"/ping")
	return p, addr, err
}

// startWaiting starts cmd with its output in logPath and waits up to 30 s
// until a GET of probe is answered (any status).
func startWaiting(name string, cmd *exec.Cmd, logPath, probe string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan error, 1), log: logPath}
	go func() { p.exited <- cmd.Wait(); logf.Close() }()
	client := &http.Client{Timeout: time.Second}
	return p.awaitReady(func() bool {
		resp, err := client.Get(probe)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, "answer "+probe)
}

// awaitReady polls ready every 50 ms until it is true (p returned), p's
// process exits (an error with its log) or 30 s pass (p stopped; an error
// saying it did not <what> within 30 s).
func (p *proc) awaitReady(ready func() bool, what string) (*proc, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ready() {
			return p, nil
		}
		select {
		case err := <-p.exited:
			logText, _ := os.ReadFile(p.log)
			return nil, fmt.Errorf("%s exited while starting: %v\n%s", p.name, err, logText)
		case <-time.After(50 * time.Millisecond): // polling for the listener
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s did not %s within 30 s", p.name, what)
		}
	}
}
