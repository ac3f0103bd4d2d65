package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/harness"
)

// gzipAttack: one files.write through the gateway whose gzip body (about
// 1 MiB) decompresses to o.size bytes of zeros, sent to the fixed entry
// and execd stand-ins of integration/harness (in this process), with the
// gateway started from o.caddy's repository (o.caddy's grandparent
// directory: <root>/bin/caddy).
func gzipAttack(o options) error {
	describe(o)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(o.caddy), ".."))
	if err != nil {
		return err
	}
	const sbx = "sbxgzip"
	env, err := harness.Start(harness.Config{RepoRoot: root,
		Credentials: "credentials:\n  - {id: cred-a, enabled: true, projectNamespace: p, clusterId: cluster-a}\n",
		Grants:      map[string]harness.Grant{sbx: {CredentialID: "cred-a"}}, Sandboxes: []string{sbx}})
	if err != nil {
		return err
	}
	defer env.Close()
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zeros(zw, o.size)
	if err := zw.Close(); err != nil {
		return err
	}
	tok, err := env.Mint(sbx, harness.Grant{CredentialID: "cred-a"})
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // let the freshly started gateway settle before the baseline
	if err := gatewayproc.ResetPeak(env.PID()); err != nil {
		return err
	}
	rss0, _, err := gatewayproc.Memory(env.PID())
	if err != nil {
		return err
	}
	fmt.Printf("one gzip write of %s that decompresses to %s (zeros)\n", mib(gz.Len()), mib(o.size))
	req, _ := http.NewRequest(http.MethodPost, env.Gateway+"/files?path=/home/user/bomb.bin", bytes.NewReader(gz.Bytes()))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("E2b-Sandbox-Id", sbx)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", tok)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	rss1, peak, err := gatewayproc.Memory(env.PID())
	if err != nil {
		return err
	}
	written := int64(0)
	if fi, err := os.Stat(filepath.Join(env.Root, "home/user/bomb.bin")); err == nil {
		written = fi.Size()
	}
	fmt.Printf("answer after %s: %d %.200s\n", took.Round(time.Millisecond), resp.StatusCode, body)
	fmt.Printf("written into the sandbox: %s\n", mib(int(written)))
	fmt.Printf("gateway VmRSS before %.0f MiB; peak during the write (VmHWM) %.0f MiB; VmRSS after %.0f MiB\n",
		float64(rss0)/1024, float64(peak)/1024, float64(rss1)/1024)
	return nil
}

func zeros(w io.Writer, n int) {
	chunk := make([]byte, 1<<20)
	for ; n > 0; n -= len(chunk) {
		_, _ = w.Write(chunk[:min(n, len(chunk))])
	}
}
