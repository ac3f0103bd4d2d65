// Package clusterconfig is the compute-cluster part of the sandgate app's
// configuration: the JSON type of a cluster (its fixed entry, the execd
// token or token secrets, the Host), its Caddyfile syntax and its
// provisioning into what the data plane (dataplane.Cluster) and the probe
// relay (entryprobe.Target) use. The app (caddymodules/sandgate) names the
// type as its own (a type alias), so its JSON is this struct's; only the
// app imports this package.
package clusterconfig

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/internal/secret"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/gateway/execdtoken"
)

// Cluster is one compute cluster.
type Cluster struct {
	// FixedEntry is the cluster's fixed entry: an http or https URL whose
	// host leads to the cluster's OpenSandbox Ingress in URI mode. Requests
	// go to <fixed_entry>/<sandboxID>/44772/<execd path>. Required.
	FixedEntry string `json:"fixed_entry"`
	// ExecdAccessToken, when set, is sent to execd as X-EXECD-ACCESS-TOKEN.
	// It is a secret, so it must be an {env.NAME} or {file./path}
	// placeholder, resolved at provision time (a placeholder that resolves
	// to nothing is an error); a literal value is refused (secret.Check),
	// because the configuration is served by GET /config/ and saved to
	// autosave.json. Default: none (OpenSandbox's Kubernetes deployments run
	// execd without a token, docs/wire-facts.md §X1.1).
	ExecdAccessToken string `json:"execd_access_token,omitempty"`
	// ExecdTokenSecret, when set (instead of ExecdAccessToken), is the
	// cluster secret each sandbox's execd token is derived from:
	// execdtoken.Derive(secret, sandboxID), the value the control plane
	// gives the sandbox's execd as EXECD_ACCESS_TOKEN, so no two sandboxes
	// share a token and no sandbox sees the secret. A placeholder like
	// ExecdAccessToken, resolving to at least 32 bytes. Default: none.
	ExecdTokenSecret string `json:"execd_token_secret,omitempty"`
	// ExtraExecdTokenSecrets are further secrets like ExecdTokenSecret,
	// held during a rotation (docs/runbook.md "Execd token secret"): the
	// sandboxes created under the old secret and those created under the
	// new one run at once, and each sandbox is sent the token its execd
	// accepts (execdtoken.Chooser; ExecdTokenSecret's is tried first). In
	// the Caddyfile, the second and later execd_token_secret lines. At
	// most execdtoken.MaxSecrets-1; each a placeholder of at least 32
	// bytes. Default: none.
	ExtraExecdTokenSecrets []string `json:"extra_execd_token_secrets,omitempty"`
	// Host is the Host header of every request to the fixed entry: the
	// data plane's and the probes it relays for corectl
	// (fixed_entry_probe). It must be the host of the fixed entry's
	// Ingress rules, corectl's ingress.host for this cluster, which corectl
	// checks through the relay at start (docs/deploy.md "Restricted
	// sandboxes"). A DNS name (RFC 1123 subdomain, at most 253
	// characters), optionally with ":<port>"; placeholders are expanded at
	// provision. Default: the fixed entry URL's host and port.
	Host string `json:"host,omitempty"`

	fixedEntry   *url.URL
	token        string
	tokenSecrets [][]byte
	host         string
}

// Provision resolves c's placeholders and secrets and checks them: the
// fixed entry (dataplane.ParseFixedEntry), the host (dataplane.CheckHost),
// the execd token or the execd token secrets (secret.Resolve, at least
// execdtoken.MinSecretBytes each, at most execdtoken.MaxSecrets). Errors
// name the setting, never a secret's value.
func (c *Cluster) Provision(repl *caddy.Replacer) error {
	u, err := dataplane.ParseFixedEntry(repl.ReplaceAll(c.FixedEntry, ""))
	if err != nil {
		return err
	}
	c.fixedEntry = u
	if c.host, err = dataplane.CheckHost(repl.ReplaceAll(c.Host, "")); err != nil {
		return err
	}
	if c.token, err = secret.Resolve(repl, "execd_access_token", c.ExecdAccessToken); err != nil {
		return err
	}
	if c.ExecdTokenSecret != "" && c.ExecdAccessToken != "" {
		return errors.New("execd_access_token and execd_token_secret exclude each other")
	}
	if len(c.ExtraExecdTokenSecrets) > 0 && c.ExecdTokenSecret == "" {
		return errors.New("extra_execd_token_secrets needs execd_token_secret")
	}
	if 1+len(c.ExtraExecdTokenSecrets) > execdtoken.MaxSecrets {
		return fmt.Errorf("at most %d execd token secrets per cluster", execdtoken.MaxSecrets)
	}
	c.tokenSecrets = nil
	for i, v := range append([]string{c.ExecdTokenSecret}, c.ExtraExecdTokenSecrets...) {
		name := "execd_token_secret"
		if i > 0 {
			name = fmt.Sprintf("extra_execd_token_secrets[%d]", i-1)
		}
		s, err := secret.Resolve(repl, name, v)
		if err != nil || s == "" {
			return err
		}
		if err := execdtoken.Check([]byte(s)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c.tokenSecrets = append(c.tokenSecrets, []byte(s))
	}
	return nil
}

// Provisioned reports whether Provision succeeded.
func (c *Cluster) Provisioned() bool { return c.fixedEntry != nil }

// Dataplane returns what the data plane needs of the provisioned cluster
// id (e2b_dataplane).
func (c *Cluster) Dataplane(id string) dataplane.Cluster {
	return dataplane.Cluster{ID: id, FixedEntry: c.fixedEntry, ExecdAccessToken: c.token, ExecdTokenSecrets: c.tokenSecrets, Host: c.host}
}

// Target returns what the probe relay (fixed_entry_probe) needs of the
// provisioned cluster: its fixed entry, the Host the data plane sends and
// its execd token or secrets.
func (c *Cluster) Target() entryprobe.Target {
	return entryprobe.Target{FixedEntry: c.fixedEntry, Host: c.host, ExecdAccessToken: c.token, ExecdTokenSecrets: c.tokenSecrets}
}

// Parse reads one cluster directive of the sandgate global option, d at
// its name, and returns the cluster's ID and configuration:
//
//	cluster <id> <fixed_entry> {
//		execd_access_token <{env.NAME} or {file./path}>
//		execd_token_secret <{env.NAME} or {file./path}>   # up to execdtoken.MaxSecrets lines (rotation)
//		host <name[:port]>
//	}
//
// Secrets must be placeholders (secret.Check); a fixed entry or host
// without placeholders is checked here, one with them at Provision. The
// caller refuses a repeated ID.
func Parse(d *caddyfile.Dispenser) (string, *Cluster, error) {
	var id, entry string
	if err := argcount.Check(d, "cluster", 2, 2, "<id> <fixed_entry>"); err != nil {
		return "", nil, err
	}
	d.Args(&id, &entry)
	c := &Cluster{FixedEntry: entry}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "execd_access_token", "execd_token_secret":
			name := d.Val()
			if err := argcount.Check(d, name, 1, 1, "<{env.NAME} or {file./path}>"); err != nil {
				return "", nil, err
			}
			d.NextArg()
			v := d.Val()
			if err := secret.Check(name, v); err != nil {
				return "", nil, d.Err(err.Error())
			}
			switch {
			case name == "execd_access_token" && c.ExecdAccessToken != "":
				return "", nil, d.Err(name + " already specified")
			case name == "execd_access_token":
				c.ExecdAccessToken = v
			case c.ExecdTokenSecret == "":
				c.ExecdTokenSecret = v
			case 1+len(c.ExtraExecdTokenSecrets) >= execdtoken.MaxSecrets:
				return "", nil, d.Errf("at most %d execd_token_secret lines per cluster", execdtoken.MaxSecrets)
			default:
				c.ExtraExecdTokenSecrets = append(c.ExtraExecdTokenSecrets, v)
			}
			if c.ExecdAccessToken != "" && c.ExecdTokenSecret != "" {
				return "", nil, d.Err("execd_access_token and execd_token_secret exclude each other")
			}
		case "host":
			if c.Host != "" {
				return "", nil, d.Err("host already specified")
			}
			if err := argcount.Check(d, "host", 1, 1, "<name[:port]>"); err != nil {
				return "", nil, err
			}
			d.NextArg()
			c.Host = d.Val()
			if !strings.Contains(c.Host, "{") {
				if _, err := dataplane.CheckHost(c.Host); err != nil {
					return "", nil, d.Errf("cluster %q: %v", id, err)
				}
			}
		default:
			return "", nil, d.Errf("unrecognized cluster subdirective %q", d.Val())
		}
	}
	// A fixed entry given as a runtime placeholder ({env.X}) is
	// checked at provision time instead.
	if !strings.Contains(entry, "{") {
		if _, err := dataplane.ParseFixedEntry(entry); err != nil {
			return "", nil, d.Errf("cluster %q: %v", id, err)
		}
	}
	return id, c, nil
}
