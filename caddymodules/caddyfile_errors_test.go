package caddymodules

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// adapter is the Caddyfile adapter of the HTTP server type; importing this
// package (imports.go) registers the sandgate app, global option, credential
// sources and the e2b_dataplane directive with it.
func adapter() caddyfile.Adapter {
	return caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
}

// location matches a file:line reference in an error.
var location = regexp.MustCompile(`\bCaddyfile:\d+`)

// errMarker marks the line of a bad Caddyfile the error must point at.
const errMarker = "#ERR"

// markedLine returns the 1-based line of body that carries errMarker; it
// fails the test unless exactly one line does.
func markedLine(t *testing.T, body string) int {
	t.Helper()
	line := 0
	for i, l := range strings.Split(body, "\n") {
		if strings.Contains(l, errMarker) {
			if line != 0 {
				t.Fatalf("more than one line marked %s", errMarker)
			}
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatalf("no line marked %s", errMarker)
	}
	return line
}

// sandgateOpt wraps sandgate subdirectives in a global options block with
// a valid key and credential source, so each case differs only where it is
// broken. The first subdirective line is line 5.
func sandgateOpt(lines string) string {
	return "{\n\tsandgate {\n\t\ttoken_key base HS256 /etc/sandgate/base.key\n\t\tcredentials file /etc/sandgate/credentials.yaml\n" +
		lines + "\n\t}\n}\n"
}

// sandgateOptNoCreds is sandgateOpt without the credentials line.
func sandgateOptNoCreds(lines string) string {
	return "{\n\tsandgate {\n\t\ttoken_key base HS256 /etc/sandgate/base.key\n" + lines + "\n\t}\n}\n"
}

// nodesOpt puts lines in a sandgate nodes block after a valid credentials
// line (line 6); the first given line is line 7.
func nodesOpt(lines string) string {
	return sandgateOpt("\t\tnodes {\n\t\t\tcredentials file /etc/sandgate/nodes.yaml\n" + lines + "\n\t\t}")
}

// nodeSite is a site with body after a valid sandgate global option with a
// nodes block.
func nodeSite(body string) string {
	return nodesOpt("") + "\n:30085 {\n" + body + "\n}\n"
}

// dataplaneSite puts e2b_dataplane subdirectives in a site after a valid
// sandgate global option.
func dataplaneSite(lines string) string {
	return sandgateOpt("") + "\n:30083 {\n\te2b_dataplane {\n" + lines + "\n\t}\n}\n"
}

// tlsSite puts tls subdirectives in a site on :30083.
func tlsSite(lines string) string {
	return ":30083 {\n\ttls {\n" + lines + "\n\t}\n\trespond ok\n}\n"
}

// TestCaddyfileErrors adapts Caddyfiles that must be refused and checks that
// the error names the file and line of the problem (what d.Errf produces:
// "…, at Caddyfile:<line>"), no other line, and a message naming the
// problem.
func TestCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the error besides Caddyfile:<line>
	}{
		// The sandgate global option.
		{"unknown sandgate subdirective",
			sandgateOpt("\t\ttoken_keys k1 HS256 /k1.key #ERR"),
			[]string{`unrecognized sandgate subdirective "token_keys"`}},
		{"sandgate with an argument",
			"{\n\tsandgate extra { #ERR\n\t}\n}\n",
			[]string{"wrong argument count", "'extra'"}},
		{"token_key with too few args",
			sandgateOpt("\t\ttoken_key k1 HS256 #ERR"),
			[]string{"wrong argument count", "'HS256'"}},
		{"token_key with one arg",
			sandgateOpt("\t\ttoken_key k1 #ERR"),
			[]string{"wrong argument count", "'k1'"}},
		{"token_key with too many args",
			sandgateOpt("\t\ttoken_key k1 HS256 /k1.key /other.key #ERR"),
			[]string{"wrong argument count", "'/other.key'"}},
		{"duplicate token_key kid",
			sandgateOpt("\t\ttoken_key k1 HS256 /a.key\n\t\ttoken_key k1 HS512 /b.key #ERR"),
			[]string{`token_key "k1" already specified`}},
		{"duplicate token_leeway",
			sandgateOpt("\t\ttoken_leeway 5s\n\t\ttoken_leeway 10s #ERR"),
			[]string{"token_leeway already specified"}},
		{"token_leeway bad duration",
			sandgateOpt("\t\ttoken_leeway soon #ERR"),
			[]string{`bad token_leeway "soon"`}},
		{"token_leeway zero",
			sandgateOpt("\t\ttoken_leeway 0s #ERR"),
			[]string{"token_leeway must be positive"}},
		{"token_leeway without a value",
			sandgateOpt("\t\ttoken_leeway #ERR"),
			[]string{"wrong argument count", "'token_leeway'"}},
		{"credentials with unknown source",
			sandgateOptNoCreds("\t\tcredentials vault https://vault.internal #ERR"),
			[]string{"sandgate.credentials.vault"}},
		{"credentials without source",
			sandgateOptNoCreds("\t\tcredentials #ERR"),
			[]string{"wrong argument count", "'credentials'"}},
		{"duplicate credentials",
			sandgateOpt("\t\tcredentials file /etc/sandgate/other.yaml #ERR"),
			[]string{"credentials already specified"}},
		{"credentials file without path",
			sandgateOptNoCreds("\t\tcredentials file #ERR"),
			[]string{"wrong argument count", "'file'"}},
		{"credentials file with extra args",
			sandgateOptNoCreds("\t\tcredentials file /a.yaml /b.yaml #ERR"),
			[]string{"wrong argument count", "'/b.yaml'"}},
		{"credentials file with a block",
			sandgateOptNoCreds("\t\tcredentials file /a.yaml {\n\t\t\treload 1s #ERR\n\t\t}"),
			[]string{"credentials file takes no block"}},
		{"credentials http without url",
			sandgateOptNoCreds("\t\tcredentials http #ERR"),
			[]string{"wrong argument count", "'http'"}},
		{"credentials http bad cache_ttl",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\tcache_ttl forever #ERR\n\t\t}"),
			[]string{`bad cache_ttl "forever"`}},
		{"credentials http bad timeout",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\ttimeout 2 #ERR\n\t\t}"),
			[]string{`bad timeout "2"`}},
		{"credentials http duplicate cache_ttl",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\tcache_ttl 1s\n\t\t\tcache_ttl 2s #ERR\n\t\t}"),
			[]string{"cache_ttl already specified"}},
		{"credentials http header without value",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\theader Authorization #ERR\n\t\t}"),
			[]string{"wrong argument count", "'Authorization'"}},
		{"credentials http unknown subdirective",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\tretries 3 #ERR\n\t\t}"),
			[]string{`unrecognized credentials http subdirective "retries"`}},
		{"cluster without fixed entry",
			sandgateOpt("\t\tcluster cluster-a #ERR"),
			[]string{"wrong argument count", "'cluster-a'"}},
		{"cluster with extra args",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 http://10.0.0.6 #ERR"),
			[]string{"wrong argument count", "'http://10.0.0.6'"}},
		{"cluster fixed entry not http(s)",
			sandgateOpt("\t\tcluster cluster-a ftp://10.0.0.5 #ERR"),
			[]string{`cluster "cluster-a"`, "fixed_entry must be an http:// or https:// URL with a host"}},
		{"cluster fixed entry without host",
			sandgateOpt("\t\tcluster cluster-a http:///path #ERR"),
			[]string{`cluster "cluster-a"`, "fixed_entry must be an http:// or https:// URL with a host"}},
		{"cluster fixed entry with query",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5/?x=1 #ERR"),
			[]string{`cluster "cluster-a"`, "fixed_entry must not have a query, fragment or user info"}},
		{"cluster fixed entry with user info",
			sandgateOpt("\t\tcluster cluster-a http://admin:pw@10.0.0.5 #ERR"),
			[]string{`cluster "cluster-a"`, "fixed_entry must not have a query, fragment or user info"}},
		{"duplicate cluster",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5\n\t\tcluster cluster-a http://10.0.0.6 #ERR"),
			[]string{`cluster "cluster-a" already specified`}},
		{"unknown cluster subdirective",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_token abc #ERR\n\t\t}"),
			[]string{`unrecognized cluster subdirective "execd_token"`}},
		{"duplicate execd_access_token",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_access_token {env.A}\n\t\t\texecd_access_token {env.B} #ERR\n\t\t}"),
			[]string{"execd_access_token already specified"}},
		{"execd_access_token with execd_token_secret",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_access_token {env.A}\n\t\t\texecd_token_secret {env.B} #ERR\n\t\t}"),
			[]string{"execd_access_token and execd_token_secret exclude each other"}},
		{"five execd_token_secret lines",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_token_secret {env.A}\n\t\t\texecd_token_secret {env.B}\n\t\t\texecd_token_secret {env.C}\n\t\t\texecd_token_secret {env.D}\n\t\t\texecd_token_secret {env.E} #ERR\n\t\t}"),
			[]string{"at most 4 execd_token_secret lines per cluster"}},
		{"literal second execd_token_secret",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_token_secret {env.A}\n\t\t\texecd_token_secret s3cr3t #ERR\n\t\t}"),
			[]string{"execd_token_secret: a secret must not be written into the configuration"}},
		{"literal execd_token_secret",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_token_secret s3cr3t #ERR\n\t\t}"),
			[]string{"execd_token_secret: a secret must not be written into the configuration"}},
		{"duplicate cluster host",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\thost a.example\n\t\t\thost b.example #ERR\n\t\t}"),
			[]string{"host already specified"}},
		{"cluster host not a DNS name",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\thost Sandbox_Entry #ERR\n\t\t}"),
			[]string{`cluster "cluster-a": host "Sandbox_Entry" must be a lowercase DNS name (RFC 1123 subdomain), optionally with :<port>`}},
		{"cluster host with a bad port",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\thost a.example:0 #ERR\n\t\t}"),
			[]string{`cluster "cluster-a": host "a.example:0": the port must be 1 to 65535`}},
		{"literal execd_access_token",
			sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_access_token s3cr3t-execd-token #ERR\n\t\t}"),
			[]string{"execd_access_token: a secret must not be written into the configuration", "{env.NAME} or {file./path/to/secret}"}},
		{"credentials http literal Authorization header",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\theader Authorization \"Bearer s3cr3t-portal-token\" #ERR\n\t\t}"),
			[]string{"header Authorization: a secret must not be written into the configuration"}},
		{"credentials http URL with a literal token",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id}?token=s3cr3t #ERR"),
			[]string{"URL query parameter token: a secret must not be written into the configuration"}},
		{"credentials http URL with user info",
			sandgateOptNoCreds("\t\tcredentials http https://gateway:s3cr3t@portal/{id} #ERR"),
			[]string{"the credentials http URL must not carry user info", "{env.NAME} or {file./path}"}},
		{"credentials http literal X-Api-Key header",
			sandgateOptNoCreds("\t\tcredentials http https://portal/{id} {\n\t\t\theader X-Api-Key s3cr3t #ERR\n\t\t}"),
			[]string{"header X-Api-Key: a secret must not be written into the configuration"}},
		{"authorizer without source",
			sandgateOpt("\t\tauthorizer #ERR"),
			[]string{"wrong argument count", "'authorizer'"}},
		{"authorizer with unknown source",
			sandgateOpt("\t\tauthorizer grpc corectl:9000 #ERR"),
			[]string{"sandgate.authorizer.grpc"}},
		{"authorizer http without url",
			sandgateOpt("\t\tauthorizer http #ERR"),
			[]string{"wrong argument count", "'http'"}},
		{"authorizer http with extra args",
			sandgateOpt("\t\tauthorizer http http://corectl:8090 http://other #ERR"),
			[]string{"wrong argument count", "'http://other'"}},
		{"duplicate authorizer",
			sandgateOpt("\t\tauthorizer http http://corectl:8090\n\t\tauthorizer http http://other:8090 #ERR"),
			[]string{"authorizer already specified"}},
		{"authorizer http unknown subdirective",
			sandgateOpt("\t\tauthorizer http http://corectl:8090 {\n\t\t\tretries 3 #ERR\n\t\t}"),
			[]string{`unrecognized authorizer http subdirective "retries"`}},
		{"authorizer http URL with user info",
			sandgateOpt("\t\tauthorizer http http://gateway:s3cr3t@corectl:8090 #ERR"),
			[]string{"the authorizer http URL must not carry user info"}},
		{"authorizer http literal Authorization header",
			sandgateOpt("\t\tauthorizer http http://corectl:8090 {\n\t\t\theader Authorization \"Bearer s3cr3t-internal\" #ERR\n\t\t}"),
			[]string{"header Authorization: a secret must not be written into the configuration"}},
		{"authorizer http bad cache_ttl",
			sandgateOpt("\t\tauthorizer http http://corectl:8090 {\n\t\t\tcache_ttl always #ERR\n\t\t}"),
			[]string{`bad cache_ttl "always"`}},
		{"sandgate given twice",
			"{\n\tsandgate {\n\t\ttoken_key k1 HS256 /k1.key\n\t}\n\tsandgate { #ERR\n\t\ttoken_key k2 HS256 /k2.key\n\t}\n}\n",
			[]string{"the sandgate global option may appear only once"}},
		// The nodes block of the sandgate global option.
		{"nodes without credentials",
			sandgateOpt("\t\tnodes {\n\t\t\towner_epoch 2\n\t\t} #ERR"),
			[]string{"nodes: credentials is required"}},
		{"nodes with an argument",
			sandgateOpt("\t\tnodes extra { #ERR\n\t\t\tcredentials file /n.yaml\n\t\t}"),
			[]string{"wrong argument count", "'extra'"}},
		{"duplicate nodes",
			sandgateOpt("\t\tnodes {\n\t\t\tcredentials file /a.yaml\n\t\t}\n\t\tnodes { #ERR\n\t\t\tcredentials file /b.yaml\n\t\t}"),
			[]string{"nodes already specified"}},
		{"nodes unknown subdirective",
			nodesOpt("\t\t\tping_interval 10s #ERR"),
			[]string{`unrecognized nodes subdirective "ping_interval"`}},
		{"nodes credentials with unknown source",
			sandgateOpt("\t\tnodes {\n\t\t\tcredentials vault https://vault #ERR\n\t\t}"),
			[]string{"sandgate.node_credentials.vault"}},
		{"nodes credentials file without path",
			sandgateOpt("\t\tnodes {\n\t\t\tcredentials file #ERR\n\t\t}"),
			[]string{"wrong argument count", "'file'"}},
		{"nodes credentials file with a block",
			sandgateOpt("\t\tnodes {\n\t\t\tcredentials file /n.yaml {\n\t\t\t\treload 1s #ERR\n\t\t\t}\n\t\t}"),
			[]string{"credentials file takes no block"}},
		{"duplicate nodes credentials",
			nodesOpt("\t\t\tcredentials file /other.yaml #ERR"),
			[]string{"credentials already specified"}},
		{"owner_epoch zero",
			nodesOpt("\t\t\towner_epoch 0 #ERR"),
			[]string{`bad owner_epoch "0"`}},
		{"owner_epoch not a number",
			nodesOpt("\t\t\towner_epoch one #ERR"),
			[]string{`bad owner_epoch "one"`}},
		{"owner_epoch without a value",
			nodesOpt("\t\t\towner_epoch #ERR"),
			[]string{"wrong argument count", "'owner_epoch'"}},
		{"duplicate owner_epoch",
			nodesOpt("\t\t\towner_epoch 1\n\t\t\towner_epoch 2 #ERR"),
			[]string{"owner_epoch already specified"}},
		{"deployment with one argument",
			nodesOpt("\t\t\tdeployment 2 #ERR"),
			[]string{"wrong argument count", "'2'"}},
		{"deployment bad generation",
			nodesOpt("\t\t\tdeployment -2 " + strings.Repeat("ab", 32) + " #ERR"),
			[]string{`bad deployment generation "-2"`}},
		{"deployment bad digest",
			nodesOpt("\t\t\tdeployment 2 " + strings.Repeat("AB", 32) + " #ERR"),
			[]string{"bad deployment specification digest", "64 lowercase hexadecimal digits"}},
		{"deployment bad serving_generation",
			nodesOpt("\t\t\tdeployment 2 " + strings.Repeat("ab", 32) + " {\n\t\t\t\tserving_generation 0 #ERR\n\t\t\t}"),
			[]string{`bad serving_generation "0"`}},
		{"deployment unknown subdirective",
			nodesOpt("\t\t\tdeployment 2 " + strings.Repeat("ab", 32) + " {\n\t\t\t\tserving 1 #ERR\n\t\t\t}"),
			[]string{`unrecognized deployment subdirective "serving"`}},
		{"duplicate deployment",
			nodesOpt("\t\t\tdeployment 2 " + strings.Repeat("ab", 32) + "\n\t\t\tdeployment 3 " + strings.Repeat("ab", 32) + " #ERR"),
			[]string{"deployment already specified"}},
		{"pool without a name",
			nodesOpt("\t\t\tpool { #ERR\n\t\t\t}"),
			[]string{"wrong argument count"}},
		{"duplicate pool",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t}\n\t\t\tpool gpu { #ERR\n\t\t\t}"),
			[]string{`pool "gpu" already specified`}},
		{"pool generation without kind",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\tgeneration 3 #ERR\n\t\t\t}"),
			[]string{"generation takes: generation <n> release <source>"}},
		{"pool generation of another kind",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\tgeneration 3 image busybox #ERR\n\t\t\t}"),
			[]string{`"image" is neither release nor digest`}},
		{"pool generation bad digest",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\tgeneration 3 digest " + strings.Repeat("AB", 32) + " #ERR\n\t\t\t}"),
			[]string{"the digest must be 64 lowercase hexadecimal digits"}},
		{"pool generation zero",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\tgeneration 0 release r #ERR\n\t\t\t}"),
			[]string{`bad generation "0"`}},
		{"pool generation twice",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\tgeneration 3 release a\n\t\t\t\tgeneration 3 release b #ERR\n\t\t\t}"),
			[]string{"generation 3 already specified"}},
		{"pool target twice",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\ttarget 3\n\t\t\t\ttarget 4 #ERR\n\t\t\t}"),
			[]string{"target already specified"}},
		{"pool bad serving",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\tserving x #ERR\n\t\t\t}"),
			[]string{`bad serving "x"`}},
		{"pool unknown subdirective",
			nodesOpt("\t\t\tpool gpu {\n\t\t\t\timage busybox #ERR\n\t\t\t}"),
			[]string{`unrecognized pool subdirective "image"`}},
		{"bad store",
			nodesOpt("\t\t\tstore etcd #ERR"),
			[]string{`bad store "etcd": must be file or kubernetes`}},
		{"store without a value",
			nodesOpt("\t\t\tstore #ERR"),
			[]string{"wrong argument count"}},
		{"store twice",
			nodesOpt("\t\t\tstore file\n\t\t\tstore kubernetes #ERR"),
			[]string{"store already specified"}},
		{"store kubernetes with a state_dir",
			sandgateOpt("\t\tnodes {\n\t\t\tcredentials file /n.yaml\n\t\t\tstore kubernetes\n\t\t\tstate_dir /var/lib/sandgate/nodes\n\t\t} #ERR"),
			[]string{"nodes: store kubernetes keeps the node state in the Portal cluster: remove state_dir"}},
		{"state_dir without a value",
			nodesOpt("\t\t\tstate_dir #ERR"),
			[]string{"wrong argument count"}},
		{"bad hello_timeout",
			nodesOpt("\t\t\thello_timeout soon #ERR"),
			[]string{`bad hello_timeout "soon"`}},
		{"zero idle_timeout",
			nodesOpt("\t\t\tidle_timeout 0s #ERR"),
			[]string{`bad idle_timeout "0s"`, "positive duration"}},
		{"online_window over an hour",
			nodesOpt("\t\t\tonline_window 2h #ERR"),
			[]string{`bad online_window "2h"`, "up to 1h"}},
		{"duplicate close_grace",
			nodesOpt("\t\t\tclose_grace 1s\n\t\t\tclose_grace 2s #ERR"),
			[]string{"close_grace already specified"}},
		{"write_timeout with two values",
			nodesOpt("\t\t\twrite_timeout 1s 2s #ERR"),
			[]string{"wrong argument count", "'2s'"}},
		{"bad shutdown_grace",
			nodesOpt("\t\t\tshutdown_grace -5s #ERR"),
			[]string{`bad shutdown_grace "-5s"`}},
		{"presence with an unknown store",
			nodesOpt("\t\t\tpresence etcd { #ERR\n\t\t\t}"),
			[]string{"sandgate.node_presence.etcd"}},
		{"presence kubernetes without advertise",
			nodesOpt("\t\t\tpresence kubernetes {\n\t\t\t\tpeer_token_file /t\n\t\t\t} #ERR"),
			[]string{"presence kubernetes needs advertise and peer_token_file"}},
		{"presence kubernetes short lease",
			nodesOpt("\t\t\tpresence kubernetes {\n\t\t\t\tlease_duration 5s #ERR\n\t\t\t}"),
			[]string{`bad lease_duration "5s"`}},
		{"presence kubernetes unknown subdirective",
			nodesOpt("\t\t\tpresence kubernetes {\n\t\t\t\tholder me #ERR\n\t\t\t}"),
			[]string{`unrecognized presence kubernetes subdirective "holder"`}},
		{"presence kubernetes duplicate renew_interval",
			nodesOpt("\t\t\tpresence kubernetes {\n\t\t\t\trenew_interval 5s\n\t\t\t\trenew_interval 6s #ERR\n\t\t\t}"),
			[]string{"renew_interval already specified"}},
		{"presence kubernetes with a setting of the kubernetes block",
			nodesOpt("\t\t\tpresence kubernetes {\n\t\t\t\tnamespace sandgate #ERR\n\t\t\t}"),
			[]string{"presence kubernetes: namespace moved to the sandgate app's kubernetes block"}},
		// The kubernetes block of the sandgate app.
		{"kubernetes twice",
			sandgateOpt("\t\tkubernetes\n\t\tkubernetes #ERR"),
			[]string{"kubernetes already specified"}},
		{"kubernetes with an argument",
			sandgateOpt("\t\tkubernetes /etc/kubeconfig #ERR"),
			[]string{"wrong argument count"}},
		{"kubernetes unknown subdirective",
			sandgateOpt("\t\tkubernetes {\n\t\t\tserver https://x #ERR\n\t\t}"),
			[]string{`unrecognized kubernetes subdirective "server"`}},
		{"kubernetes duplicate namespace",
			sandgateOpt("\t\tkubernetes {\n\t\t\tnamespace a\n\t\t\tnamespace b #ERR\n\t\t}"),
			[]string{"namespace already specified"}},
		{"kubernetes bad qps",
			sandgateOpt("\t\tkubernetes {\n\t\t\tqps many #ERR\n\t\t}"),
			[]string{`bad qps "many"`}},
		{"kubernetes zero burst",
			sandgateOpt("\t\tkubernetes {\n\t\t\tburst 0 #ERR\n\t\t}"),
			[]string{`bad burst "0"`}},
		{"kubernetes in_cluster with a kubeconfig",
			sandgateOpt("\t\tkubernetes {\n\t\t\tin_cluster\n\t\t\tkubeconfig /k\n\t\t} #ERR"),
			[]string{"in_cluster and kubeconfig/context exclude each other"}},
		{"kubernetes in_cluster with a value",
			sandgateOpt("\t\tkubernetes {\n\t\t\tin_cluster yes #ERR\n\t\t}"),
			[]string{"wrong argument count"}},
		{"kubernetes context without kubeconfig",
			sandgateOpt("\t\tkubernetes {\n\t\t\tcontext portal\n\t\t} #ERR"),
			[]string{"context needs kubeconfig"}},
		// The sandgate_health directive.
		{"sandgate_health with an argument",
			nodeSite("\tsandgate_health /x extra #ERR"),
			[]string{"wrong argument count", "'extra'"}},
		{"sandgate_health with a block",
			nodeSite("\tsandgate_health {\n\t\tverbose #ERR\n\t}"),
			[]string{"sandgate_health takes no block"}},
		// The sandbox_node_connect and sandbox_node_api directives.
		{"sandbox_node_connect with an argument",
			nodeSite("\tsandbox_node_connect /connect extra #ERR"),
			[]string{"wrong argument count", "'extra'"}},
		{"sandbox_node_connect with a block",
			nodeSite("\tsandbox_node_connect {\n\t\thello_timeout 1s #ERR\n\t}"),
			[]string{"sandbox_node_connect takes no block"}},
		{"sandbox_node_api without token",
			nodeSite("\tsandbox_node_api #ERR"),
			[]string{"sandbox_node_api needs at least one token_sha256"}},
		{"sandbox_node_api unknown subdirective",
			nodeSite("\tsandbox_node_api {\n\t\ttoken secret #ERR\n\t}"),
			[]string{`unrecognized sandbox_node_api subdirective "token"`}},
		{"sandbox_node_api token_sha256 without value",
			nodeSite("\tsandbox_node_api {\n\t\ttoken_sha256 #ERR\n\t}"),
			[]string{"wrong argument count", "'token_sha256'"}},
		{"sandbox_node_api duplicate token_sha256",
			nodeSite("\tsandbox_node_api {\n\t\ttoken_sha256 " + strings.Repeat("ab", 32) + "\n\t\ttoken_sha256 " + strings.Repeat("ab", 32) + " #ERR\n\t}"),
			[]string{"token_sha256 already specified"}},
		// The fixed_entry_probe directive.
		{"fixed_entry_probe without token",
			nodeSite("\tfixed_entry_probe #ERR"),
			[]string{"fixed_entry_probe needs at least one token_sha256"}},
		{"fixed_entry_probe with an argument",
			nodeSite("\tfixed_entry_probe /internal/* extra #ERR"),
			[]string{"wrong argument count", "'extra'"}},
		{"fixed_entry_probe unknown subdirective",
			nodeSite("\tfixed_entry_probe {\n\t\ttoken secret #ERR\n\t}"),
			[]string{`unrecognized fixed_entry_probe subdirective "token"`}},
		{"fixed_entry_probe duplicate token_sha256",
			nodeSite("\tfixed_entry_probe {\n\t\ttoken_sha256 " + strings.Repeat("ab", 32) + "\n\t\ttoken_sha256 " + strings.Repeat("ab", 32) + " #ERR\n\t}"),
			[]string{"token_sha256 already specified"}},
		// The e2b_dataplane directive.
		{"e2b_dataplane unknown subdirective",
			dataplaneSite("\t\thomedir /home/user #ERR"),
			[]string{`unrecognized e2b_dataplane subdirective "homedir"`}},
		{"user with bad uid",
			dataplaneSite("\t\tuser alice root 1000 #ERR"),
			[]string{`user "alice": bad uid "root"`}},
		{"user with negative uid",
			dataplaneSite("\t\tuser alice -1 1000 #ERR"),
			[]string{`user "alice": bad uid "-1"`}},
		{"user with bad gid",
			dataplaneSite("\t\tuser alice 1000 staff #ERR"),
			[]string{`user "alice": bad gid "staff"`}},
		{"user with too few args",
			dataplaneSite("\t\tuser alice 1000 #ERR"),
			[]string{"wrong argument count"}},
		{"user with too many args",
			dataplaneSite("\t\tuser alice 1000 1000 /home/alice /bin/sh #ERR"),
			[]string{"wrong argument count"}},
		{"duplicate user",
			dataplaneSite("\t\tuser alice 1000 1000\n\t\tuser alice 1001 1001 #ERR"),
			[]string{`user "alice" already specified`}},
		{"duplicate home_dir",
			dataplaneSite("\t\thome_dir /home/user\n\t\thome_dir /workspace #ERR"),
			[]string{"home_dir already specified"}},
		{"home_dir with two args",
			dataplaneSite("\t\thome_dir /home/user /workspace #ERR"),
			[]string{"wrong argument count", "'/workspace'"}},
		{"duplicate default_user",
			dataplaneSite("\t\tdefault_user user\n\t\tdefault_user root #ERR"),
			[]string{"default_user already specified"}},
		{"bad keepalive_interval",
			dataplaneSite("\t\tkeepalive_interval often #ERR"),
			[]string{`bad keepalive_interval "often"`}},
		{"bad unary_client",
			dataplaneSite("\t\tunary_client fasthttp #ERR"),
			[]string{`unary_client "fasthttp": must be builtin or transport`}},
		{"unary_client twice",
			dataplaneSite("\t\tunary_client builtin\n\t\tunary_client transport #ERR"),
			[]string{"unary_client already specified"}},
		{"zero keepalive_interval",
			dataplaneSite("\t\tkeepalive_interval 0s #ERR"),
			[]string{`bad keepalive_interval "0s"`, "positive duration"}},
		{"bad max_message_size",
			dataplaneSite("\t\tmax_message_size lots #ERR"),
			[]string{`bad max_message_size "lots"`}},
		{"oversized max_message_size",
			dataplaneSite("\t\tmax_message_size 65MiB #ERR"),
			[]string{`bad max_message_size "65MiB"`, "64MiB"}},
		{"bad max_decompressed_size",
			dataplaneSite("\t\tmax_decompressed_size lots #ERR"),
			[]string{`bad max_decompressed_size "lots"`}},
		{"zero max_port_requests_per_sandbox",
			dataplaneSite("\t\tmax_port_requests_per_sandbox 0 #ERR"),
			[]string{`bad max_port_requests_per_sandbox "0"`}},
		{"zero max_requests_per_credential",
			dataplaneSite("\t\tmax_requests_per_credential 0 #ERR"),
			[]string{`bad max_requests_per_credential "0"`}},
		{"max_requests not a number",
			dataplaneSite("\t\tmax_requests many #ERR"),
			[]string{`bad max_requests "many"`}},
		{"max_requests twice",
			dataplaneSite("\t\tmax_requests 10\n\t\tmax_requests 20 #ERR"),
			[]string{`max_requests already specified`}},
		{"negative stream_close_delay",
			dataplaneSite("\t\tstream_close_delay -1s #ERR"),
			[]string{`bad stream_close_delay "-1s"`}},
		{"stream_close_delay twice",
			dataplaneSite("\t\tstream_close_delay 1s\n\t\tstream_close_delay 2s #ERR"),
			[]string{`stream_close_delay already specified`}},
		{"zero max_upstream_calls_per_sandbox",
			dataplaneSite("\t\tmax_upstream_calls_per_sandbox 0 #ERR"),
			[]string{`bad max_upstream_calls_per_sandbox "0"`}},
		{"max_listing_size not a size",
			dataplaneSite("\t\tmax_listing_size lots #ERR"),
			[]string{`bad max_listing_size "lots"`}},
		{"duplicate max_upstream_calls",
			dataplaneSite("\t\tmax_upstream_calls 10\n\t\tmax_upstream_calls 20 #ERR"),
			[]string{"max_upstream_calls already specified"}},
		{"zero max_decompression_ratio",
			dataplaneSite("\t\tmax_decompression_ratio 0 #ERR"),
			[]string{`bad max_decompression_ratio "0"`}},
		{"duplicate max_decompression_ratio",
			dataplaneSite("\t\tmax_decompression_ratio 10\n\t\tmax_decompression_ratio 20 #ERR"),
			[]string{"max_decompression_ratio already specified"}},
		{"zero max_message_size",
			dataplaneSite("\t\tmax_message_size 0 #ERR"),
			[]string{`bad max_message_size "0"`}},
		{"transport other than http",
			dataplaneSite("\t\ttransport fastcgi { #ERR\n\t\t\troot /srv\n\t\t}"),
			[]string{`transport "fastcgi" is not supported`, "transport http"}},
		{"transport without protocol",
			dataplaneSite("\t\ttransport #ERR"),
			[]string{"wrong argument count", "'transport'"}},
		{"duplicate transport",
			dataplaneSite("\t\ttransport http\n\t\ttransport http #ERR"),
			[]string{"transport already specified"}},
		{"transport http with a bad option",
			dataplaneSite("\t\ttransport http {\n\t\t\tdial_timeout never #ERR\n\t\t}"),
			[]string{"transport http", "never"}},
		{"token_target with an argument",
			dataplaneSite("\t\ttoken_target yes #ERR"),
			[]string{"wrong argument count", "'yes'"}},
		{"duplicate token_target",
			dataplaneSite("\t\ttoken_target\n\t\ttoken_target #ERR"),
			[]string{"token_target already specified"}},
		{"extended_operations with an argument",
			dataplaneSite("\t\textended_operations on #ERR"),
			[]string{"wrong argument count", "'on'"}},
		{"duplicate extended_operations",
			dataplaneSite("\t\textended_operations\n\t\textended_operations #ERR"),
			[]string{"extended_operations already specified"}},
		{"hosts without a domain",
			dataplaneSite("\t\thosts #ERR"),
			[]string{"wrong argument count"}},
		{"hosts with a wildcard",
			dataplaneSite("\t\thosts *.sbx.example.com #ERR"),
			[]string{"hosts", "*.sbx.example.com", "letters, digits and inner hyphens"}},
		{"hosts twice",
			dataplaneSite("\t\thosts a.example\n\t\thosts b.example #ERR"),
			[]string{"hosts already specified"}},
		{"process_dir without a path",
			dataplaneSite("\t\tprocess_dir #ERR"),
			[]string{"wrong argument count"}},
		{"duplicate process_dir",
			dataplaneSite("\t\tprocess_dir /a\n\t\tprocess_dir /b #ERR"),
			[]string{"process_dir already specified"}},

		// The key_pair_files certificate manager (tls get_certificate).
		{"key_pair_files without a key file",
			tlsSite("\t\tget_certificate key_pair_files /c.pem #ERR"),
			[]string{"key_pair_files: want <cert_file> <key_file>"}},
		{"key_pair_files with a third file",
			tlsSite("\t\tget_certificate key_pair_files /c.pem /k.pem /x.pem #ERR"),
			[]string{"key_pair_files: want <cert_file> <key_file>"}},
		{"key_pair_files bad check_interval",
			tlsSite("\t\tget_certificate key_pair_files /c.pem /k.pem {\n\t\t\tcheck_interval often #ERR\n\t\t}"),
			[]string{`check_interval "often"`}},
		{"key_pair_files check_interval too short",
			tlsSite("\t\tget_certificate key_pair_files /c.pem /k.pem {\n\t\t\tcheck_interval 1ms #ERR\n\t\t}"),
			[]string{"check_interval 1ms is out of range [100ms, 1h0m0s]"}},
		{"key_pair_files check_interval twice on a line",
			tlsSite("\t\tget_certificate key_pair_files /c.pem /k.pem {\n\t\t\tcheck_interval 1s 2s #ERR\n\t\t}"),
			[]string{"wrong argument count", "'2s'"}},
		{"key_pair_files unknown subdirective",
			tlsSite("\t\tget_certificate key_pair_files /c.pem /k.pem {\n\t\t\treload 1s #ERR\n\t\t}"),
			[]string{`key_pair_files: unknown subdirective "reload"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := markedLine(t, tc.body)
			_, _, err := adapter().Adapt([]byte(tc.body), map[string]any{"filename": "Caddyfile"})
			if err == nil {
				t.Fatalf("adapting succeeded; want an error at Caddyfile:%d\n%s", line, tc.body)
			}
			msg := err.Error()
			if strings.Contains(msg, "s3cr3t") {
				t.Errorf("error %q echoes the secret", msg)
			}
			locs := location.FindAllString(msg, -1)
			if len(locs) == 0 {
				t.Errorf("error %q names no Caddyfile:<line>", msg)
			}
			for _, l := range locs {
				if l != fmt.Sprintf("Caddyfile:%d", line) {
					t.Errorf("error %q names %s; want only Caddyfile:%d", msg, l, line)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}
