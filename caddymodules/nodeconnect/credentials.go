package nodeconnect

import (
	"errors"
	"path/filepath"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/internal/sourcemetrics"
	"github.com/sandgate/sandgate/nodecore/credential"
)

// pool holds the open node credential files across config reloads, keyed
// by absolute path.
var pool = caddy.NewUsagePool()

// pooledFile lets the pool close a file source when the last config using
// it is cleaned up.
type pooledFile struct {
	*credential.File
	unexport func()
}

// Destruct stops watching the file and exporting its metrics.
func (p pooledFile) Destruct() error {
	p.unexport()
	return p.File.Close()
}

// CredentialFile is the "file" node credential source
// (sandgate.node_credentials.file): a JSON or YAML file of node records,
// each with the SHA-256 digest of the node's credential (never the
// credential) and its enrolled identity, reloaded within a second of a
// change; a broken file keeps the last good version, and a file missing
// for 5 s revokes every node. Its state is exported as metrics (package
// sourcemetrics, kind "node"). Format (see credential.OpenFile):
//
//	nodes:
//	  - node_id: "7c0e5f0a-4c1e-4e55-9a7e-2f1f6d1b9a01"
//	    enabled: true
//	    credential_sha256: "<sha256 of the node credential, 64 hex>"
//	    installation_id: "0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60"
//	    provider: docker
//	    backend_fingerprint: "<64 hex>"
//	    deployment_generation: 1
//	    specification_digest: "<64 hex>"
//	    generation_management: false
//
// JSON: {"source": "file", "path": "/etc/sandgate/nodes.yaml"}.
type CredentialFile struct {
	// Path is the node credential file. Relative paths are taken from the
	// working directory. Placeholders such as {env.NODE_CREDENTIALS} are
	// expanded. Required.
	Path string `json:"path"`

	key string
	src *credential.File
}

// CaddyModule returns the Caddy module information.
func (CredentialFile) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.node_credentials.file", New: func() caddy.Module { return new(CredentialFile) }}
}

// Provision opens the file, or reuses the source a previous config opened
// for the same path. It returns the file's load error on first open.
func (f *CredentialFile) Provision(ctx caddy.Context) error {
	p := caddy.NewReplacer().ReplaceAll(f.Path, "")
	if p == "" {
		return errors.New("a node credentials file path is required")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	logger := ctx.Logger()
	sourcemetrics.Register(ctx.GetMetricsRegistry())
	v, _, err := pool.LoadOrNew(abs, func() (caddy.Destructor, error) {
		src, err := credential.OpenFile(abs, logger)
		if err != nil {
			return nil, err
		}
		return pooledFile{File: src, unexport: sourcemetrics.Add("node", src)}, nil
	})
	if err != nil {
		return err
	}
	f.key = abs
	f.src = v.(pooledFile).File
	return nil
}

// Authenticate implements credential.Store.
func (f *CredentialFile) Authenticate(nodeID string, digest credential.Digest) (credential.Node, error) {
	return f.src.Authenticate(nodeID, digest)
}

// Nodes implements credential.Store.
func (f *CredentialFile) Nodes() []credential.Node { return f.src.Nodes() }

// Find implements credential.Finder.
func (f *CredentialFile) Find(nodeID string) (credential.Node, bool) { return f.src.Find(nodeID) }

// Cleanup releases this config's use of the file.
func (f *CredentialFile) Cleanup() error {
	if f.key == "" {
		return nil
	}
	_, err := pool.Delete(f.key)
	return err
}

// UnmarshalCaddyfile sets up the source. Syntax (inside the sandgate
// app's nodes block):
//
//	credentials file <path>
func (f *CredentialFile) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // source name
	if err := argcount.Check(d, "credentials file", 1, 1, "<path>"); err != nil {
		return err
	}
	d.NextArg()
	f.Path = d.Val()
	if d.NextBlock(0) {
		return d.Err("credentials file takes no block")
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*CredentialFile)(nil)
	_ caddy.CleanerUpper    = (*CredentialFile)(nil)
	_ caddyfile.Unmarshaler = (*CredentialFile)(nil)
	_ credential.Store      = (*CredentialFile)(nil)
	_ credential.Finder     = (*CredentialFile)(nil)
)
