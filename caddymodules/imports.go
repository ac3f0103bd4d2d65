// Package caddymodules registers every sandgate Caddy module. xcaddy builds
// the gateway with this package as its plugin (see xcaddy.toml), the way
// caddy-l4's root imports.go gathers its modules.
package caddymodules

import (
	// The sandbox authorizer: sandgate.authorizer.http.
	_ "github.com/sandgate/sandgate/caddymodules/authorizer"
	// The credential sources: sandgate.credentials.file and .http.
	_ "github.com/sandgate/sandgate/caddymodules/credentialsource"
	// The edge certificate served from files and re-read when they change:
	// tls.get_certificate.key_pair_files.
	_ "github.com/sandgate/sandgate/caddymodules/keypair"
	// The data plane handler: http.handlers.e2b_dataplane.
	_ "github.com/sandgate/sandgate/caddymodules/e2bdataplane"
	// The fixed-entry probe relay for corectl: http.handlers.fixed_entry_probe.
	_ "github.com/sandgate/sandgate/caddymodules/entryprobe"
	// The node connection service: http.handlers.sandbox_node_connect,
	// http.handlers.sandbox_node_api, sandgate.node_credentials.file.
	_ "github.com/sandgate/sandgate/caddymodules/nodeconnect"
	// The gateway's probes: http.handlers.sandgate_health.
	_ "github.com/sandgate/sandgate/caddymodules/health"
	// The app and its global option.
	_ "github.com/sandgate/sandgate/caddymodules/sandgate"
	// The operator's node routes under the admin endpoint: admin.api.sandgate.
	_ "github.com/sandgate/sandgate/caddymodules/nodeadmin"
	// The commands caddy sandgate-token, sandgate-release and sandgate-version.
	_ "github.com/sandgate/sandgate/caddymodules/sandgatecmd"
)
