package execd

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// Quote quotes s as one word for POSIX sh and bash: it is wrapped in single
// quotes, and each single quote inside becomes quote, backslash, quote,
// quote (closing the quoted part, adding an escaped quote, reopening it).
// The result is one word whatever s holds.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellResult is what a Shell script printed on stdout and how it ended.
type ShellResult struct {
	// Stdout holds each line execd reported followed by "\n" (execd ends
	// lines at "\n" and "\r" and drops the terminator, so a "\r" comes back
	// as "\n", and a last line without a newline gains one). Scripts that
	// must be exact print NUL-terminated records.
	Stdout []byte
	// ExitCode is the script's exit status; -1 when a signal ended it.
	ExitCode int
}

// shellEventBytes bounds what an output event line of execd holds besides
// its text (bytes): {"type":"stdout","text":"…","timestamp":<ms>} and the
// blank line after it.
const shellEventBytes = 256

// shellTimeoutMs is the lifetime execd gives a Shell script.
const shellTimeoutMs = 60_000

// Shell runs a short script with execd's POST /command (foreground, as
// execd's own identity, in directory cwd; empty means execd's) with args as
// its positional parameters, and returns its stdout once it has ended. It
// serves what execd has no route for (the directory listing of execd
// v1.0.18). Output over maxOutput bytes is an *Error with KindUnexpected;
// execd's refusals (a cwd that does not exist: 400) come back as *Error.
// When no line within maxOutput can make an event line over
// LargeLineBytes (its text JSON-escaped, up to 6 bytes a byte), such an
// event line is refused as it reaches that length, unread: what answers
// for execd cannot make a Shell of a few KiB read a 16 MiB line.
func (c *Client) Shell(ctx context.Context, t Target, maxOutput int64, cwd, script string, args ...string) (ShellResult, error) {
	var cmd strings.Builder
	if len(args) > 0 {
		cmd.WriteString("set --")
		for _, a := range args {
			cmd.WriteByte(' ')
			cmd.WriteString(Quote(a))
		}
		cmd.WriteString("\n")
	}
	cmd.WriteString(script)
	stream, err := c.RunCommand(ctx, t, CommandRequest{Command: cmd.String(), Cwd: cwd, Timeout: shellTimeoutMs})
	if err != nil {
		return ShellResult{}, err
	}
	defer stream.Close()
	tooMuch := &Error{Kind: KindUnexpected, Message: "the script printed more than " + strconv.FormatInt(maxOutput, 10) + " bytes"}
	if 6*maxOutput+shellEventBytes <= LargeLineBytes {
		stream.SetLargeLineGate(func() (func(), error) { return nil, tooMuch })
	}
	var res ShellResult
	for {
		ev, err := stream.Next()
		if err != nil {
			if errors.Is(err, ErrStreamEnded) {
				return ShellResult{}, &Error{Kind: KindUnexpected, Message: "execd closed the command stream before the command ended"}
			}
			var e *Error
			if errors.As(err, &e) {
				return ShellResult{}, err
			}
			return ShellResult{}, transportError(ctx, err)
		}
		switch {
		case ev.Type == EventStdout:
			text := ev.Text
			if text == "\n" {
				text = ""
			}
			// Checked before the line is copied: a line of up to 16 MiB
			// over the bound is not copied into the output as well.
			if int64(len(res.Stdout))+int64(len(text))+1 > maxOutput {
				return ShellResult{}, tooMuch
			}
			res.Stdout = append(res.Stdout, text...)
			res.Stdout = append(res.Stdout, '\n')
		case ev.Terminal():
			code, ok := ev.ExitCode()
			if !ok {
				return ShellResult{}, &Error{Kind: KindUnexpected, Message: "execd reported an exit code that is not a number"}
			}
			res.ExitCode = code
			return res, nil
		}
	}
}
