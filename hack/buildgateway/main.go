// Command buildgateway builds the sandgate gateway, bin/caddy, from
// xcaddy.toml with xcaddy's Go package: the Caddy version it pins and the
// plugins it lists, local plugins through a module replace.
//
// Usage:
//
//	go run ./hack/buildgateway [-manifest xcaddy.toml] [-ldflags "$(bash hack/version.sh)"] [-tags t1,t2] [-o path]
//
// -ldflags adds linker flags to xcaddy's defaults ("-w -s", -trimpath and
// its build tags); the Makefile passes hack/version.sh's output so that
// `caddy sandgate-version` names the sandgate commit (package
// internal/version). -tags adds build tags to xcaddy's (letters, digits
// and underscores, comma-separated), for a measurement build; -o writes
// the binary to path instead of the manifest's output, so such a build
// does not replace bin/caddy. It exits 1 with the reason when the manifest is invalid or the build fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/caddyserver/xcaddy"
)

// Manifest is the content of xcaddy.toml.
type Manifest struct {
	// CaddyVersion is the Caddy module version, e.g. "v2.11.9".
	CaddyVersion string `toml:"caddy_version"`
	// Output is the binary path, relative to the manifest.
	Output string `toml:"output"`
	// Plugins are the Go packages that register Caddy modules.
	Plugins []Plugin `toml:"plugin"`
}

// Plugin is one [[plugin]] table.
type Plugin struct {
	// Package is the Go package path xcaddy imports.
	Package string `toml:"package"`
	// Module is the Go module that holds Package; needed with Replace.
	Module string `toml:"module"`
	// Version pins the module version when it comes from the proxy.
	Version string `toml:"version"`
	// Replace is a local directory, relative to the manifest, that
	// replaces Module.
	Replace string `toml:"replace"`
}

func main() {
	manifest := flag.String("manifest", "xcaddy.toml", "the build manifest")
	ldflags := flag.String("ldflags", "", "extra linker flags, e.g. the version stamp of hack/version.sh")
	tags := flag.String("tags", "", "extra build tags, comma-separated (for a measurement build)")
	output := flag.String("o", "", "the binary's path (default: the manifest's output)")
	flag.Parse()
	if err := run(*manifest, *ldflags, *tags, *output); err != nil {
		fmt.Fprintln(os.Stderr, "buildgateway:", err)
		os.Exit(1)
	}
}

// load reads and checks the manifest; unknown keys are errors.
func load(path string) (Manifest, error) {
	var m Manifest
	md, err := toml.DecodeFile(path, &m)
	if err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return m, fmt.Errorf("%s: unknown keys %v", path, und)
	}
	if !strings.HasPrefix(m.CaddyVersion, "v2.") {
		return m, fmt.Errorf("%s: caddy_version must be a v2 version, got %q", path, m.CaddyVersion)
	}
	if m.Output == "" {
		return m, fmt.Errorf("%s: output is required", path)
	}
	if len(m.Plugins) == 0 {
		return m, errors.New(path + ": at least one [[plugin]] is required")
	}
	for i, p := range m.Plugins {
		if p.Package == "" {
			return m, fmt.Errorf("%s: plugin %d has no package", path, i)
		}
		if p.Replace != "" && p.Module == "" {
			return m, fmt.Errorf("%s: plugin %s has replace but no module", path, p.Package)
		}
	}
	return m, nil
}

// buildFlags are xcaddy's default flags for a release build (setting
// Builder.BuildFlags replaces them) with extra added to the linker flags
// and tags to the build tags. Quotes and backslashes in extra are refused
// (xcaddy splits the flags like a shell), and a tag that is not letters,
// digits and underscores.
func buildFlags(extra, tags string) (string, error) {
	if strings.ContainsAny(extra, "'\"\\") {
		return "", fmt.Errorf("-ldflags must not contain quotes or backslashes: %q", extra)
	}
	all := "nobadger,nomysql,nopgx"
	if tags != "" {
		for _, t := range strings.Split(tags, ",") {
			if !validTag(t) {
				return "", fmt.Errorf("-tags: %q is not a build tag (letters, digits and underscores)", t)
			}
		}
		all += "," + tags
	}
	return "-ldflags '" + strings.TrimSpace("-w -s "+extra) + "' -trimpath -tags " + all, nil
}

// validTag reports whether t is a build tag of letters, digits and
// underscores.
func validTag(t string) bool {
	if t == "" {
		return false
	}
	for _, r := range t {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func run(manifestPath, ldflags, tags, output string) error {
	m, err := load(manifestPath)
	if err != nil {
		return err
	}
	base, err := filepath.Abs(filepath.Dir(manifestPath))
	if err != nil {
		return err
	}
	flags, err := buildFlags(ldflags, tags)
	if err != nil {
		return err
	}
	b := xcaddy.Builder{
		BuildFlags:   flags,
		CaddyVersion: m.CaddyVersion,
		TimeoutGet:   10 * time.Minute,
		TimeoutBuild: 20 * time.Minute,
	}
	for _, p := range m.Plugins {
		b.Plugins = append(b.Plugins, xcaddy.Dependency{PackagePath: p.Package, Version: p.Version})
		if p.Replace != "" {
			b.Replacements = append(b.Replacements, xcaddy.NewReplace(p.Module, filepath.Join(base, p.Replace)))
		}
	}
	restore, err := proxyFallback()
	if err != nil {
		return err
	}
	defer restore()
	out := filepath.Join(base, m.Output)
	if output != "" {
		if out, err = filepath.Abs(output); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return b.Build(context.Background(), out)
}

// proxyFallback makes the go commands xcaddy runs treat a module the proxy
// refuses as "not found". xcaddy's build module replaces
// github.com/sandgate/sandgate with this checkout but does not require it,
// so `go get` asks the proxy for the module's versions before it settles
// on the replacement. The public proxy answers 404 and Go moves on; the
// proxies some build machines use answer 403, which Go treats as fatal.
// Chaining the configured proxies with "|" and ending with an empty
// file:// proxy turns any refusal into "not found". It returns a function
// that restores GOPROXY.
func proxyFallback() (func(), error) {
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("reading GOPROXY: %w", err)
	}
	// "direct" is left out: asking the module's VCS host fails with a
	// network error on machines that reach only the proxy, and that error
	// would end the chain before the empty proxy answers "not found".
	var chain []string
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "off" && p != "direct" {
			chain = append(chain, p)
		}
	}
	empty, err := os.MkdirTemp("", "sandgate-empty-proxy-")
	if err != nil {
		return nil, err
	}
	chain = append(chain, "file://"+empty)
	old, had := os.LookupEnv("GOPROXY")
	if err := os.Setenv("GOPROXY", strings.Join(chain, "|")); err != nil {
		return nil, err
	}
	return func() {
		_ = os.RemoveAll(empty)
		if had {
			_ = os.Setenv("GOPROXY", old)
		} else {
			_ = os.Unsetenv("GOPROXY")
		}
	}, nil
}
