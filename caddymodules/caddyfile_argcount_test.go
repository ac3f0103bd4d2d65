package caddymodules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
)

// TestCaddyfileArgumentCounts gives every directive of sandgate's
// Caddyfile parsers a wrong number of arguments and checks that the error
// names the directive, the count wanted and the count given, explains
// {$NAME} placeholders (argcount.Hint), points at the line, and quotes
// none of the line's arguments: each argument holds "s3cr3t", standing for
// a secret pasted into the wrong place.
func TestCaddyfileArgumentCounts(t *testing.T) {
	const s = "s3cr3t"
	digest := strings.Repeat("ab", 32)
	inCluster := func(lines string) string {
		return sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n" + lines + "\n\t\t}")
	}
	inHTTPCreds := func(lines string) string {
		return sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n" + lines + "\n\t\t}")
	}
	inAuthorizer := func(lines string) string {
		return sandgateOpt("\t\tauthorizer http http://corectl {\n" + lines + "\n\t\t}")
	}
	inKubernetes := func(lines string) string {
		return sandgateOpt("\t\tkubernetes {\n" + lines + "\n\t\t}")
	}
	inPresence := func(lines string) string {
		return nodesOpt("\t\t\tpresence kubernetes {\n" + lines + "\n\t\t\t}")
	}
	inPool := func(lines string) string {
		return nodesOpt("\t\t\tpool p {\n" + lines + "\n\t\t\t}")
	}
	for _, tc := range []struct {
		name, body string
		want       string // "<directive> wants …" up to the count given
	}{
		// The sandgate global option.
		{"sandgate", "{\n\tsandgate " + s + " { #ERR\n\t}\n}\n", "sandgate wants no argument and got 1"},
		{"token_key", sandgateOpt("\t\ttoken_key " + s + "1 " + s + "2 #ERR"),
			"token_key wants 3 arguments, <kid> <algorithm> <key file>, and got 2"},
		{"token_leeway", sandgateOpt("\t\ttoken_leeway 5s " + s + " #ERR"), "token_leeway wants 1 argument, <duration>, and got 2"},
		{"credentials", sandgateOptNoCreds("\t\tcredentials #ERR"), "credentials wants at least 1 argument, <source> ..., and got 0"},
		{"credentials file", sandgateOptNoCreds("\t\tcredentials file /a " + s + " #ERR"), "credentials file wants 1 argument, <path>, and got 2"},
		{"credentials http", sandgateOptNoCreds("\t\tcredentials http https://portal/{id} " + s + " #ERR"),
			"credentials http wants 1 argument, <url>, and got 2"},
		{"header", inHTTPCreds("\t\t\theader Authorization Bearer " + s + " #ERR"), "header wants 2 arguments, <name> <value>, and got 3"},
		{"cache_ttl", inHTTPCreds("\t\t\tcache_ttl #ERR"), "cache_ttl wants 1 argument, <duration>, and got 0"},
		{"timeout", inHTTPCreds("\t\t\ttimeout 1s " + s + " #ERR"), "timeout wants 1 argument, <duration>, and got 2"},
		{"authorizer", sandgateOpt("\t\tauthorizer #ERR"), "authorizer wants at least 1 argument, <source> ..., and got 0"},
		{"authorizer http", sandgateOpt("\t\tauthorizer http http://corectl " + s + " #ERR"),
			"authorizer http wants 1 argument, <corectl base URL>, and got 2"},
		{"bearer_token_file", inAuthorizer("\t\t\tbearer_token_file /t " + s + " #ERR"), "bearer_token_file wants 1 argument, <path>, and got 2"},
		{"cluster", sandgateOpt("\t\tcluster " + s + " { #ERR\n\t\t}"), "cluster wants 2 arguments, <id> <fixed_entry>, and got 1"},
		{"execd_access_token", inCluster("\t\t\texecd_access_token {env.A} " + s + " #ERR"),
			"execd_access_token wants 1 argument, <{env.NAME} or {file./path}>, and got 2"},
		{"execd_token_secret", inCluster("\t\t\texecd_token_secret #ERR"),
			"execd_token_secret wants 1 argument, <{env.NAME} or {file./path}>, and got 0"},
		{"host", inCluster("\t\t\thost a.example " + s + " #ERR"), "host wants 1 argument, <name[:port]>, and got 2"},
		{"kubernetes", sandgateOpt("\t\tkubernetes " + s + " { #ERR\n\t\t}"), "kubernetes wants no argument and got 1"},
		{"kubeconfig", inKubernetes("\t\t\tkubeconfig #ERR"), "kubeconfig wants 1 argument, <path>, and got 0"},
		{"in_cluster", inKubernetes("\t\t\tin_cluster " + s + " #ERR"), "in_cluster wants no argument and got 1"},
		{"qps", inKubernetes("\t\t\tqps 5 " + s + " #ERR"), "qps wants 1 argument, <n>, and got 2"},
		// The nodes block.
		{"nodes", sandgateOpt("\t\tnodes " + s + " { #ERR\n\t\t}"), "nodes wants no argument and got 1"},
		{"nodes credentials", sandgateOpt("\t\tnodes {\n\t\t\tcredentials #ERR\n\t\t}"), "credentials wants at least 1 argument, <source> ..., and got 0"},
		{"nodes credentials file", sandgateOpt("\t\tnodes {\n\t\t\tcredentials file /a " + s + " #ERR\n\t\t}"),
			"credentials file wants 1 argument, <path>, and got 2"},
		{"owner_epoch", nodesOpt("\t\t\towner_epoch 1 " + s + " #ERR"), "owner_epoch wants 1 argument, <n>, and got 2"},
		{"deployment", nodesOpt("\t\t\tdeployment " + s + " #ERR"), "deployment wants 2 arguments, <generation> <specification_digest>, and got 1"},
		{"serving_generation", nodesOpt("\t\t\tdeployment 2 " + digest + " {\n\t\t\t\tserving_generation #ERR\n\t\t\t}"),
			"serving_generation wants 1 argument, <generation>, and got 0"},
		{"hello_timeout", nodesOpt("\t\t\thello_timeout #ERR"), "hello_timeout wants 1 argument, <duration>, and got 0"},
		{"store", nodesOpt("\t\t\tstore file " + s + " #ERR"), "store wants 1 argument, file|kubernetes, and got 2"},
		{"state_dir", nodesOpt("\t\t\tstate_dir /a " + s + " #ERR"), "state_dir wants 1 argument, <dir>, and got 2"},
		{"releases", nodesOpt("\t\t\treleases #ERR"), "releases wants 1 argument, <dir>, and got 0"},
		{"pool", nodesOpt("\t\t\tpool " + s + "1 " + s + "2 { #ERR\n\t\t\t}"), "pool wants 1 argument, <name>, and got 2"},
		{"generation", inPool("\t\t\t\tgeneration 1 release #ERR"),
			"generation wants 3 arguments, <n> release <source> or <n> digest <specification_digest>, and got 2"},
		{"target", inPool("\t\t\t\ttarget #ERR"), "target wants 1 argument, <n>, and got 0"},
		{"serving", inPool("\t\t\t\tserving 1 " + s + " #ERR"), "serving wants 1 argument, <n>, and got 2"},
		{"presence", nodesOpt("\t\t\tpresence #ERR"), "presence wants at least 1 argument, <source> ..., and got 0"},
		{"presence kubernetes", nodesOpt("\t\t\tpresence kubernetes " + s + " { #ERR\n\t\t\t}"),
			"presence kubernetes wants no argument and got 1"},
		{"advertise", inPresence("\t\t\t\tadvertise #ERR"), "advertise wants 1 argument, <url>, and got 0"},
		{"lease_duration", inPresence("\t\t\t\tlease_duration 30s " + s + " #ERR"), "lease_duration wants 1 argument, <duration>, and got 2"},
		{"api", nodesOpt("\t\t\tapi 127.0.0.1:30087 " + s + " { #ERR\n\t\t\t}"), "api wants 1 argument, <host:port>, and got 2"},
		{"api token_sha256", nodesOpt("\t\t\tapi 127.0.0.1:30087 {\n\t\t\t\ttoken_sha256 #ERR\n\t\t\t}"),
			"token_sha256 wants at least 1 argument, <64 hex> [<64 hex>...], and got 0"},
		// Site directives.
		{"sandgate_health", nodeSite("\tsandgate_health " + s + " #ERR"), "sandgate_health wants no argument and got 1"},
		{"sandbox_node_connect", nodeSite("\tsandbox_node_connect " + s + " #ERR"), "sandbox_node_connect wants no argument and got 1"},
		{"sandbox_node_api", nodeSite("\tsandbox_node_api " + s + " { #ERR\n\t}"), "sandbox_node_api wants no argument and got 1"},
		{"sandbox_node_api token_sha256", nodeSite("\tsandbox_node_api {\n\t\ttoken_sha256 " + digest + " " + s + " #ERR\n\t}"),
			"token_sha256 wants 1 argument, <sha256 hex of a token>, and got 2"},
		{"fixed_entry_probe", nodeSite("\tfixed_entry_probe " + s + " { #ERR\n\t}"), "fixed_entry_probe wants no argument and got 1"},
		{"fixed_entry_probe token_sha256", nodeSite("\tfixed_entry_probe {\n\t\ttoken_sha256 #ERR\n\t}"),
			"token_sha256 wants 1 argument, <sha256 hex of a token>, and got 0"},
		{"e2b_dataplane", sandgateOpt("") + "\n:30083 {\n\te2b_dataplane " + s + " { #ERR\n\t}\n}\n", "e2b_dataplane wants no argument and got 1"},
		{"home_dir", dataplaneSite("\t\thome_dir #ERR"), "home_dir wants 1 argument, <path>, and got 0"},
		{"default_user", dataplaneSite("\t\tdefault_user a " + s + " #ERR"), "default_user wants 1 argument, <name>, and got 2"},
		{"max_message_size", dataplaneSite("\t\tmax_message_size #ERR"), "max_message_size wants 1 argument, <size>, and got 0"},
		{"max_requests", dataplaneSite("\t\tmax_requests 1 " + s + " #ERR"), "max_requests wants 1 argument, <n>, and got 2"},
		{"drain_grace", dataplaneSite("\t\tdrain_grace #ERR"), "drain_grace wants 1 argument, <duration>, and got 0"},
		{"user", dataplaneSite("\t\tuser " + s + " 1000 #ERR"), "user wants 3 or 4 arguments, <name> <uid> <gid> [<home>], and got 2"},
		{"token_target", dataplaneSite("\t\ttoken_target " + s + " #ERR"), "token_target wants no argument and got 1"},
		{"hosts", dataplaneSite("\t\thosts #ERR"), "hosts wants at least 1 argument, <domain>..., and got 0"},
		{"unary_client", dataplaneSite("\t\tunary_client #ERR"), "unary_client wants 1 argument, builtin|transport, and got 0"},
		{"transport", dataplaneSite("\t\ttransport http " + s + " { #ERR\n\t\t}"), "transport wants 1 argument, http, and got 2"},
		// The key_pair_files certificate manager.
		{"key_pair_files", tlsSite("\t\tget_certificate key_pair_files /c.pem #ERR"),
			"key_pair_files wants 2 arguments, <cert_file> <key_file>, and got 1"},
		{"check_interval", tlsSite("\t\tget_certificate key_pair_files /c.pem /k.pem {\n\t\t\tcheck_interval 1s " + s + " #ERR\n\t\t}"),
			"check_interval wants 1 argument, <duration>, and got 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, line := adaptError(t, tc.body)
			want := fmt.Sprintf("%s (%s), at Caddyfile:%d", tc.want, argcount.Hint, line)
			if !strings.Contains(msg, want) {
				t.Errorf("error %q\ndoes not contain %q", msg, want)
			}
			if strings.Contains(msg, s) {
				t.Errorf("error %q quotes an argument", msg)
			}
		})
	}
}
