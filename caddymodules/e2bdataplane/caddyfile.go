package e2bdataplane

import (
	"fmt"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/gateway/sandboxhost"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("e2b_dataplane", parseCaddyfile)
	// The handler is terminal, like reverse_proxy; it goes right before it.
	httpcaddyfile.RegisterDirectiveOrder("e2b_dataplane", httpcaddyfile.Before, "reverse_proxy")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	dp := new(Handler)
	err := dp.UnmarshalCaddyfile(h.Dispenser)
	return dp, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	e2b_dataplane [<matcher>] {
//		home_dir <path>
//		user <name> <uid> <gid> [<home>]
//		default_user <name>
//		keepalive_interval <duration>
//		max_message_size <size>
//		max_decompressed_size <size>
//		max_decompression_ratio <n>
//		max_listing_size <size>
//		max_listing_entries <n>
//		max_upstream_calls <n>
//		max_upstream_calls_per_sandbox <n>
//		max_process_calls_per_credential <n>
//		max_requests_per_credential <n>
//		max_requests <n>
//		upstream_wait <duration>
//		drain_grace <duration>
//		token_target
//		extended_operations
//		process_dir <path>
//		hosts <domain>...
//		max_port_requests_per_sandbox <n>
//		max_port_requests <n>
//		stream_close_delay <duration>
//		unary_client builtin|transport
//		transport http {
//			<reverse_proxy http transport options>
//		}
//	}
//
// user may repeat, once per name. max_message_size takes a size such as
// 4MiB or 1048576. max_decompressed_size (a size, default 1GiB) and
// max_decompression_ratio (a positive integer, default 100, checked past
// 16MiB) bound gzip-encoded writes. max_listing_size (default 4MiB) and
// max_listing_entries (default 16384) bound execd's answer to a listing;
// max_upstream_calls (default 16), max_upstream_calls_per_sandbox
// (default 4) and max_process_calls_per_credential (default 2) bound the
// calls in progress (positive integers; a unary call counts from execd's
// first answer on, not while it waits for execd: docs/dataplane.md
// "Bounded cost per request and per tenant"); a call beyond them waits up to
// upstream_wait (default 30s) for a slot. max_requests_per_credential
// (default 1024) and max_requests (default 4096, or the per-credential
// bound when larger) bound the requests in progress, per resource
// credential and in all, streams and transfers for as long as they last
// (positive integers; one more is refused at once with GATEWAY_BUSY; a
// max_requests below the per-credential bound is refused when the
// configuration loads). drain_grace (default 25s) is
// how long command streams and file transfers run on once the server
// shuts down for the process exit (a reload drains nothing), before they
// end with GATEWAY_DRAINING (keep it below
// grace_period). extended_operations (a flag, off by default) also serves
// envd's Process List/Connect/SendSignal and Filesystem Stat/MakeDir/Move;
// process_dir is where it keeps process records in the sandbox (default
// /tmp/.sandgate/processes). hosts (once, one or more domains such as
// sbx.example.com) turns on host routing: <port>-<sandboxID>.<domain> as
// E2B_DOMAIN's SDKs address it, every other Host refused
// (docs/dataplane.md "Host routing"). max_port_requests_per_sandbox
// (default 1024) and max_port_requests (default 4096, or the per-sandbox
// bound when larger) bound the port requests in progress, per sandbox and
// in all (positive integers, used only with hosts; one more is refused
// with 429 or 503); a max_port_requests below the per-sandbox bound is
// refused when the configuration loads. stream_close_delay (a duration,
// default 0, as reverse_proxy's; used only with hosts) is how long the
// port WebSockets of a configuration a reload replaced run on before the
// gateway closes them. The transport block is
// reverse_proxy's "transport http" (dial_timeout,
// response_header_timeout, keepalive, tls, …); its max_response_header
// (the largest head of an answer read) defaults to 64KiB here, not Go's
// 10MiB, and a larger head is a failed call (a port request's 502).
// unary_client (default builtin, or transport when the transport block
// lacks HTTP/1.1 or has HTTP/3) chooses what sends the bodyless execd
// calls read whole: the data plane's own HTTP/1.1 client or that transport
// (docs/dataplane.md "The unary client").
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if err := argcount.Check(d, "e2b_dataplane", 0, 0, ""); err != nil {
		return err
	}
	seen := map[string]bool{}
	once := func(name string) error {
		if seen[name] {
			return d.Errf("%s already specified", name)
		}
		seen[name] = true
		return nil
	}
	// oneArg reads the one argument of the subdirective at d's cursor.
	oneArg := func() (string, error) {
		opt := d.Val()
		syntax := "<n>"
		switch opt {
		case "home_dir", "process_dir":
			syntax = "<path>"
		case "default_user":
			syntax = "<name>"
		case "keepalive_interval", "upstream_wait", "drain_grace", "stream_close_delay":
			syntax = "<duration>"
		case "max_message_size", "max_decompressed_size", "max_listing_size":
			syntax = "<size>"
		case "unary_client":
			syntax = "builtin|transport"
		}
		if err := argcount.Check(d, opt, 1, 1, syntax); err != nil {
			return "", err
		}
		d.NextArg()
		return d.Val(), nil
	}
	for d.NextBlock(0) {
		opt := d.Val()
		switch opt {
		case "home_dir", "default_user", "keepalive_interval", "max_message_size", "process_dir",
			"max_decompressed_size", "max_decompression_ratio", "max_listing_size", "max_listing_entries",
			"max_upstream_calls", "max_upstream_calls_per_sandbox", "max_process_calls_per_credential", "upstream_wait", "drain_grace",
			"max_requests_per_credential", "max_requests",
			"max_port_requests_per_sandbox", "max_port_requests", "stream_close_delay":
			if err := once(opt); err != nil {
				return err
			}
			v, err := oneArg()
			if err != nil {
				return err
			}
			switch opt {
			case "home_dir":
				h.HomeDir = v
			case "process_dir":
				h.ProcessDir = v
			case "default_user":
				h.DefaultUser = v
			case "keepalive_interval":
				dur, err := caddy.ParseDuration(v)
				if err != nil || dur <= 0 {
					return d.Errf("bad keepalive_interval %q: must be a positive duration", v)
				}
				h.KeepaliveInterval = caddy.Duration(dur)
			case "stream_close_delay":
				dur, err := caddy.ParseDuration(v)
				if err != nil || dur < 0 {
					return d.Errf("bad stream_close_delay %q: must be a duration, 0 or more", v)
				}
				h.StreamCloseDelay = caddy.Duration(dur)
			case "upstream_wait", "drain_grace":
				dur, err := caddy.ParseDuration(v)
				if err != nil || dur <= 0 {
					return d.Errf("bad %s %q: must be a positive duration", opt, v)
				}
				if opt == "drain_grace" {
					h.DrainGrace = caddy.Duration(dur)
				} else {
					h.UpstreamWait = caddy.Duration(dur)
				}
			case "max_message_size":
				n, err := humanize.ParseBytes(v)
				if err != nil || n == 0 || n > 64<<20 {
					return d.Errf("bad max_message_size %q: must be a size from 1 byte to 64MiB", v)
				}
				h.MaxMessageSize = int64(n)
			case "max_decompressed_size":
				n, err := humanize.ParseBytes(v)
				if err != nil || n == 0 || n > 1<<50 {
					return d.Errf("bad max_decompressed_size %q: must be a positive size such as 1GiB", v)
				}
				h.MaxDecompressedSize = int64(n)
			case "max_decompression_ratio":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 1 || n > 1<<20 {
					return d.Errf("bad max_decompression_ratio %q: must be a positive integer", v)
				}
				h.MaxDecompressionRatio = n
			case "max_listing_size":
				n, err := humanize.ParseBytes(v)
				if err != nil || n == 0 || n > 1<<30 {
					return d.Errf("bad max_listing_size %q: must be a size from 1 byte to 1GiB", v)
				}
				h.MaxListingSize = int64(n)
			case "max_listing_entries", "max_upstream_calls", "max_upstream_calls_per_sandbox", "max_process_calls_per_credential",
				"max_port_requests_per_sandbox", "max_port_requests", "max_requests_per_credential", "max_requests":
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 1<<24 {
					return d.Errf("bad %s %q: must be a positive integer", opt, v)
				}
				switch opt {
				case "max_listing_entries":
					h.MaxListingEntries = n
				case "max_upstream_calls":
					h.MaxUpstreamCalls = n
				case "max_upstream_calls_per_sandbox":
					h.MaxUpstreamCallsPerSandbox = n
				case "max_port_requests_per_sandbox":
					h.MaxPortRequestsPerSandbox = n
				case "max_port_requests":
					h.MaxPortRequests = n
				case "max_requests_per_credential":
					h.MaxRequestsPerCredential = n
				case "max_requests":
					h.MaxRequests = n
				default:
					h.MaxProcessCallsPerCredential = n
				}
			}
		case "user":
			if err := argcount.Check(d, opt, 3, 4, "<name> <uid> <gid> [<home>]"); err != nil {
				return err
			}
			args := d.RemainingArgs()
			name := args[0]
			if _, dup := h.Users[name]; dup {
				return d.Errf("user %q already specified", name)
			}
			uid, err := strconv.ParseUint(args[1], 10, 32)
			if err != nil {
				return d.Errf("user %q: bad uid %q", name, args[1])
			}
			gid, err := strconv.ParseUint(args[2], 10, 32)
			if err != nil {
				return d.Errf("user %q: bad gid %q", name, args[2])
			}
			u := &User{UID: uint32(uid), GID: uint32(gid)}
			if len(args) == 4 {
				u.Home = args[3]
			}
			if h.Users == nil {
				h.Users = map[string]*User{}
			}
			h.Users[name] = u
		case "token_target", "extended_operations":
			if err := once(opt); err != nil {
				return err
			}
			if err := argcount.Check(d, opt, 0, 0, ""); err != nil {
				return err
			}
			if opt == "token_target" {
				h.TokenTarget = true
			} else {
				h.ExtendedOperations = true
			}
		case "hosts":
			if err := once(opt); err != nil {
				return err
			}
			if err := argcount.Check(d, opt, 1, -1, "<domain>..."); err != nil {
				return err
			}
			h.Hosts = d.RemainingArgs()
			if _, err := sandboxhost.NewTable(h.Hosts); err != nil {
				return d.Errf("hosts: %v", err)
			}
		case "unary_client":
			if err := once(opt); err != nil {
				return err
			}
			v, err := oneArg()
			if err != nil {
				return err
			}
			if v != "builtin" && v != "transport" {
				return d.Errf("unary_client %q: must be builtin or transport", v)
			}
			h.UnaryClient = v
		case "transport":
			if err := once(opt); err != nil {
				return err
			}
			if err := argcount.Check(d, opt, 1, 1, "http"); err != nil {
				return err
			}
			d.NextArg()
			name := d.Val()
			if name != "http" {
				return d.Errf("transport %q is not supported; use transport http", name)
			}
			mod, err := caddyfile.UnmarshalModule(d, "http.reverse_proxy.transport."+name)
			if err != nil {
				// err already names the file and line of the bad option.
				return fmt.Errorf("transport %s: %w", name, err)
			}
			h.TransportRaw = caddyconfig.JSONModuleObject(mod, "protocol", name, nil)
		default:
			return d.Errf("unrecognized e2b_dataplane subdirective %q", opt)
		}
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
