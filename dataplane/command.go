package dataplane

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// shellQuote quotes s for POSIX sh and bash: it is wrapped in single quotes
// and each ' becomes '\”. The result is one word whatever s contains.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commandLine joins cmd and args into the one string execd's /command
// accepts (execd runs it as bash -c <string>), each word quoted so that the
// argv the SDK asked for is the argv that runs.
func commandLine(cmd string, args []string) string {
	var b strings.Builder
	b.WriteString(shellQuote(cmd))
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(shellQuote(a))
	}
	return b.String()
}

// newMarker returns a random end-of-output marker.
func newMarker() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "__sandgate_eof_" + hex.EncodeToString(b[:]) + "__"
}

// wrapCommand appends to line a marker printed on stdout and on stderr
// after the command, keeping its exit status. execd reports output line by
// line without terminators and flushes a partial last line at exit
// (execd-wire.md §1.4), so without the marker "b" and "b\n" look alike; with
// it, a last line without a newline arrives as "b<marker>" and one with a
// newline as "b" then "<marker>". The marker is printed by bash's builtin
// printf, so it needs nothing in the sandbox image.
func wrapCommand(line, marker string) string {
	return line + "; __sandgate_rc=$?; printf '%s\\n' " + shellQuote(marker) +
		"; printf '%s\\n' " + shellQuote(marker) + " >&2; exit $__sandgate_rc"
}

// outputStream restores the exact bytes of one output stream (stdout or
// stderr) from execd's line events. A line's terminator is emitted lazily,
// at the start of the next chunk, so every line still reaches the SDK as
// soon as execd reports it; the marker line says whether the last line had
// a terminator. Terminators are restored as "\n" (execd also ends lines at
// "\r"; those become "\n").
type outputStream struct {
	marker    string
	pendingNL bool
	done      bool
}

// line returns the bytes to send for one execd line event text, and
// whether the marker ended the stream. An empty line arrives as text "\n".
func (o *outputStream) line(text string) (out []byte, end bool) {
	if o.done {
		return nil, true
	}
	content, isMarker := strings.CutSuffix(text, o.marker)
	if !isMarker && text == "\n" {
		content = ""
	}
	var b []byte
	if o.pendingNL {
		b = append(b, '\n')
	}
	b = append(b, content...)
	if isMarker {
		o.done = true
		o.pendingNL = false
		return b, true
	}
	o.pendingNL = true
	return b, false
}

// flush returns the bytes still owed when the command ended without
// printing the marker (it was killed): the pending terminator, assumed "\n".
func (o *outputStream) flush() []byte {
	if o.done || !o.pendingNL {
		return nil
	}
	o.pendingNL = false
	o.done = true
	return []byte{'\n'}
}
