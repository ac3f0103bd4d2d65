package dataplane

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/sandgate/sandgate/gateway/execd"
)

// commandLine joins cmd and args into the one string execd's /command
// accepts (execd runs it as bash -c <string>), each word quoted so that the
// argv the SDK asked for is the argv that runs.
func commandLine(cmd string, args []string) string {
	var b strings.Builder
	b.WriteString(execd.Quote(cmd))
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(execd.Quote(a))
	}
	return b.String()
}

// newMarker returns a random end-of-output marker.
func newMarker() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "__sandgate_eof_" + hex.EncodeToString(b[:]) + "__"
}

// wrapCommand wraps the SDK's command line for execd, which runs the
// result as bash -c <string> (docs/wire-facts.md §X1.4):
//
//   - After the command, a marker is printed on stdout and on stderr. execd
//     reports output line by line without terminators and flushes a partial
//     last line at exit, so "b" and "b\n" would look alike; with the marker,
//     a last line without a newline arrives as "b<marker>", one with a
//     newline as "b" then "<marker>". bash's builtin printf needs nothing in
//     the sandbox image.
//   - The command's stderr is kept on fd 2 while the wrapping shell's own
//     stderr is silenced, so bash's "Killed" job notice never reaches the
//     SDK.
//   - When the command died of SIGHUP, SIGINT, SIGKILL, SIGPIPE, SIGALRM or
//     SIGTERM (exit status 128+n), the wrapping shell kills itself with the
//     same signal, so execd reports the signal and the SDK sees envd's
//     exitCode -1 and "signal: killed". A command that exits 128+n on
//     purpose is reported as that signal too; other signals (those that dump
//     core or stop) are reported as exit status 128+n.
//   - The exit status is otherwise kept.
func wrapCommand(line, marker string) string {
	m := execd.Quote(marker)
	return "{ " + line + " 2>&3 3>&-; } 3>&2 2>/dev/null; __sandgate_rc=$?; " +
		"printf '%s\\n' " + m + "; printf '%s\\n' " + m + " >&2; " +
		"case $__sandgate_rc in 129|130|137|141|142|143) kill -$((__sandgate_rc-128)) $$;; esac; " +
		"exit $__sandgate_rc"
}

// outputStream restores the exact bytes of one output stream (stdout or
// stderr) from execd's line events, each as soon as execd reports it.
//
// execd reports a line only once its terminator has been written (a
// partial line is held until the next poll finds its end, or flushed when
// the process exits), and the wrapper always ends each stream with the
// marker line. So every event other than the marker's stands for its text
// plus a terminator, which is sent with it; a last line without a newline
// arrives glued to the marker ("b<marker>") and is sent without one. The
// marker event ends the stream. Terminators are restored as "\n" (execd
// also ends lines at "\r"; those become "\n"). A command killed before the
// wrapper printed the marker may have had a partial last line; it is sent
// with a "\n", the only case where a byte is added.
type outputStream struct {
	marker string
	done   bool
}

// line returns the bytes to send for one execd line event text, and
// whether the marker ended the stream. An empty line arrives as text "\n".
func (o *outputStream) line(text string) (out []byte, end bool) {
	if o.done {
		return nil, true
	}
	if content, isMarker := strings.CutSuffix(text, o.marker); isMarker {
		o.done = true
		return []byte(content), true
	}
	if text == "\n" {
		return []byte{'\n'}, false
	}
	b := make([]byte, len(text)+1)
	copy(b, text)
	b[len(text)] = '\n'
	return b, false
}
