package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// credentialsFile returns a resource credential file of n credentials in
// format ("yaml" or "json"); variant changes one credential's namespace,
// so each rewrite is a real change.
func credentialsFile(format string, n, variant int) []byte {
	var b bytes.Buffer
	if format == "json" {
		b.WriteString(`{"credentials": [`)
	} else {
		b.WriteString("credentials:\n")
	}
	for i := range n {
		ns := fmt.Sprintf("team-%03d", i%500)
		if i == 0 {
			ns = fmt.Sprintf("variant-%d", variant)
		}
		if format == "json" {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "\n  {\"id\": \"cred-%08d\", \"enabled\": true, \"resourceSpecId\": \"spec-small\", \"resourceGroupId\": \"group-%04d\", \"projectNamespace\": %q, \"clusterId\": \"cluster-a\"}", i, i%1000, ns)
		} else {
			fmt.Fprintf(&b, "  - id: cred-%08d\n    enabled: true\n    resourceSpecId: spec-small\n    resourceGroupId: group-%04d\n    projectNamespace: %s\n    clusterId: cluster-a\n", i, i%1000, ns)
		}
	}
	if format == "json" {
		b.WriteString("\n]}\n")
	}
	return b.Bytes()
}

// credentialsAttack: the gateway serves a credential file of o.count
// credentials (o.format), which is then replaced o.reloads times; each
// replacement is re-read and parsed whole by the gateway.
func credentialsAttack(o options) error {
	describe(o)
	if o.count == 0 {
		one := len(credentialsFile(o.format, 2, 0)) - len(credentialsFile(o.format, 1, 0))
		o.count = (15 << 20) / one
	}
	dir, err := os.MkdirTemp("", "attack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "creds."+o.format)
	if err := os.WriteFile(path, credentialsFile(o.format, o.count, 0), 0o600); err != nil {
		return err
	}
	fi, _ := os.Stat(path)
	g, err := startWith(o, dir, "info", fmt.Sprintf("\t\tcredentials file %s", path), "http://127.0.0.1:%s {\n\trespond ok\n}\n")
	if err != nil {
		return err
	}
	defer g.Stop()
	logPath := filepath.Join(dir, "gateway.log")
	if err := waitLog(logPath, "sandgate app started", 1); err != nil {
		return err
	}
	before, err := g.baseline()
	if err != nil {
		return err
	}
	fmt.Printf("credential file %s: %d credentials, %s; %d replacements (write a new file, rename it over)\n",
		o.format, o.count, mib(int(fi.Size())), o.reloads)
	start := time.Now()
	for i := 1; i <= o.reloads; i++ {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, credentialsFile(o.format, o.count, i), 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		if err := waitLog(logPath, "credential file reloaded", i); err != nil {
			return err
		}
	}
	fmt.Printf("%d reloads applied in %s\n", o.reloads, time.Since(start).Round(time.Millisecond))
	g.report(o, before)
	return nil
}

// waitLog waits up to 2 minutes until the log file has n lines containing
// msg.
func waitLog(path, msg string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(path)
		if strings.Count(string(data), msg) >= n {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // polling the gateway's log file
	}
	data, _ := os.ReadFile(path)
	return fmt.Errorf("no %d × %q in the gateway log within 2 minutes; log:\n%s", n, msg, data)
}
