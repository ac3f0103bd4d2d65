package caddymodules

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
)

// argLines are Caddyfile lines of sandgate's directives with ARGS where
// their arguments go, each in the block it belongs to.
var argLines = []string{
	sandgateOpt("\t\ttoken_key ARGS"),
	sandgateOpt("\t\ttoken_leeway ARGS"),
	sandgateOptNoCreds("\t\tcredentials ARGS"),
	sandgateOptNoCreds("\t\tcredentials http ARGS"),
	sandgateOpt("\t\tauthorizer http ARGS"),
	sandgateOpt("\t\tcluster ARGS {\n\t\t}"),
	sandgateOpt("\t\tcluster cluster-a http://10.0.0.5 {\n\t\t\texecd_access_token ARGS\n\t\t}"),
	sandgateOpt("\t\tkubernetes {\n\t\t\tnamespace ARGS\n\t\t}"),
	sandgateOpt("\t\tkubernetes {\n\t\t\tin_cluster ARGS\n\t\t}"),
	nodesOpt("\t\t\thello_timeout ARGS"),
	nodesOpt("\t\t\tstore ARGS"),
	nodesOpt("\t\t\tpool ARGS {\n\t\t\t}"),
	nodesOpt("\t\t\tpool p {\n\t\t\t\tgeneration ARGS\n\t\t\t}"),
	nodesOpt("\t\t\tpresence kubernetes {\n\t\t\t\tlease_duration ARGS\n\t\t\t}"),
	nodesOpt("\t\t\tapi ARGS {\n\t\t\t}"),
	nodesOpt("\t\t\tapi 127.0.0.1:30087 {\n\t\t\t\ttoken_sha256 ARGS\n\t\t\t}"),
	nodeSite("\tsandgate_health ARGS"),
	nodeSite("\tsandbox_node_api {\n\t\ttoken_sha256 ARGS\n\t}"),
	nodeSite("\tfixed_entry_probe {\n\t\ttoken_sha256 ARGS\n\t}"),
	dataplaneSite("\t\tuser ARGS"),
	dataplaneSite("\t\thosts ARGS"),
	dataplaneSite("\t\tmax_message_size ARGS"),
	dataplaneSite("\t\ttransport ARGS {\n\t\t}"),
	tlsSite("\t\tget_certificate key_pair_files ARGS"),
}

// FuzzDirectiveArguments adapts a directive of sandgate's given any
// arguments (each word prefixed with a marker that stands for a secret
// pasted into the line): adapting never panics, and an argument-count
// error (one that carries argcount.Hint) quotes none of them. The words
// are kept on the directive's line (no newline, brace, quote, comment or
// escape), so the line's structure is the template's.
func FuzzDirectiveArguments(f *testing.F) {
	for i := range argLines {
		f.Add(uint8(i), "")
		f.Add(uint8(i), "a")
		f.Add(uint8(i), "a b")
		f.Add(uint8(i), "1s 2 3 4 5")
		f.Add(uint8(i), "{$UNSET} http://x")
	}
	const marker = "s3cr3t"
	f.Fuzz(func(t *testing.T, which uint8, args string) {
		if len(args) > 256 {
			return
		}
		var words []string
		for _, w := range strings.Fields(strings.Map(func(r rune) rune {
			switch r {
			case '\n', '\r', '{', '}', '"', '`', '#', '\\':
				return ' '
			}
			return r
		}, args)) {
			words = append(words, marker+w)
		}
		body := strings.Replace(argLines[int(which)%len(argLines)], "ARGS", strings.Join(words, " "), 1)
		_, _, err := adapter().Adapt([]byte(body), map[string]any{"filename": "Caddyfile"})
		if err != nil && strings.Contains(err.Error(), argcount.Hint) && strings.Contains(err.Error(), marker) {
			t.Fatalf("an argument-count error quotes an argument: %v\n%s", err, body)
		}
	})
}
