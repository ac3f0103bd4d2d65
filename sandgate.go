// Package sandgate is the root of the sandgate module. Importing it
// registers every sandgate Caddy module; it is the plugin package that
// xcaddy.toml hands to xcaddy. (A plugin package below the module root
// makes the go command look that path up as a module of its own on the
// module proxy, which fails where the proxy answers 403 for unknown
// modules instead of 404.)
package sandgate

import (
	// Every sandgate Caddy module.
	_ "github.com/sandgate/sandgate/caddymodules"
)
