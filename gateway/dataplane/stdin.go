package dataplane

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sandgate/sandgate/gateway/admission"

	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/envd"
	"github.com/sandgate/sandgate/gateway/execd"
)

// A writable stdin (Config.ExtendedOperations; StartRequest.stdin, the
// SDKs' `stdin: true`, then SendInput with input.stdin and CloseStdin).
//
// execd starts every command with /dev/null as its stdin and has no call
// that writes to a running command, so the gateway gives such a process
// its stdin through two FIFOs in the process directory, created beside its
// output files (outputScript) and owned by the user it runs as:
//
//   - <pid>.in is the command's stdin. The background wrapper
//     (wrapBackgroundStdin) opens it read-write first, starts a holder (a
//     subshell of the wrapper, in the command's process group) that keeps
//     that descriptor, closes its own, and gives the command the FIFO
//     opened read-only. The holder is then the one writer that lasts, so
//     the command reads what SendInput writes and sees no end of file
//     between two writes.
//   - <pid>.ctl is the holder's own stdin. CloseStdin writes a line to it
//     (stdinCloseScript); the holder reads it and exits, and the command
//     reads end of file once the bytes already in the FIFO are read. The
//     wrapper ends the holder when the command ends; execd's kill and
//     timeout signal the whole process group, holder included.
//
// SendInput writes the bytes with one short execd command per chunk
// (stdinWriteScript), run as execd's identity like the other scripts:
// printf with every byte that is not plain ASCII given as an octal escape,
// so NUL and any other byte arrive as sent, and the text fits a shell
// word (execd hands the script to `sh -c`, one argument of at most
// 128 KiB: chunks of stdinChunkBytes escaped bytes). A write blocks while
// the FIFO is full (64 KiB in Linux) and the command does not read, as a
// write to envd's pipe does, until execd's deadline for the script
// (execd.Shell's 60 s). The write script opens the FIFO read-write first,
// which never waits for a reader, then write-only, and closes the
// read-write one, so that it is no reader itself: once the command, its
// wrapper and the holder are gone (a kill or execd's timeout ends their
// whole process group, the wrapper's drain with them), a write blocked in
// the full FIFO fails at once (EPIPE) instead of waiting for the deadline.
// The close script opens it read-write. Both open it only once they have
// checked it is a FIFO: the process directory is execd's identity's
// (outputScript), so only that identity could swap it.

// wrapFor is the background wrapper of a process with files f: with a
// stdin when f.stdin is set.
func wrapFor(line string, f procFiles, cwd string) string {
	if f.stdin {
		return wrapBackgroundStdin(line, f, cwd)
	}
	return wrapBackground(line, f, cwd)
}

// wrapBackgroundStdin is wrapBackground for a process with a writable
// stdin: fds 5 (<pid>.in, read-write) and 6 (<pid>.ctl, read-write) are
// opened with the output files; the holder keeps fd 5 and reads a line
// from fd 6 as its stdin; the wrapper then opens <pid>.in read-only on
// fd 6 (the holder's fd 5 is a writer, so the open does not wait), closes
// fd 5, and runs the command with fd 6 as its stdin. When the command
// ends, the holder is ended and what is still in the FIFO is read and
// dropped until no writer is left: a stdinWriteScript blocked in a full
// FIFO when the command ended (it opened the FIFO read-write, so it is a
// reader itself and would wait for execd's deadline) finishes.
func wrapBackgroundStdin(line string, f procFiles, cwd string) string {
	return "exec 3>>" + execd.Quote(relative(f.out)) + " 4>>" + execd.Quote(relative(f.err)) +
		" 5<>" + execd.Quote(relative(f.in)) + " 6<>" + execd.Quote(relative(f.ctl)) + " || exit 1; " +
		"{ read -r __sandgate_eof; } <&6 >/dev/null 2>&1 3>&- 4>&- 6>&- & __sandgate_holder=$!; " +
		"exec 6<" + execd.Quote(relative(f.in)) + " 5>&- || exit 1; " +
		"cd -- " + execd.Quote(relative(cwd)) + " 2>&4 || { kill $__sandgate_holder 2>/dev/null; exit 1; }; " +
		"{ " + line + " 2>&4 3>&- 4>&- 6>&-; } <&6 >&3 2>/dev/null; __sandgate_rc=$?; " +
		"kill $__sandgate_holder 2>/dev/null; cat <&6 >/dev/null 2>&1; " +
		"case $__sandgate_rc in 129|130|137|141|142|143) kill -$((__sandgate_rc-128)) $$;; esac; " +
		"exit $__sandgate_rc"
}

// stdinWriteScript writes the printf format $3 to the FIFO $1 while the
// FIFO $2 (the holder's) exists, as a writer only; exit 4 when either is
// gone or not a FIFO (the stdin was closed, or the process's files
// removed), 5 when the FIFO has no reader left (the process ended).
const stdinWriteScript = `[ -p "$1" ] && [ -p "$2" ] || exit 4
trap '' PIPE
exec 3<>"$1" || exit 1
exec 1>"$1" 3<&- || exit 1
printf "$3" || exit 5
`

// stdinCloseScript ends the holder of a process's stdin by writing a line
// to its FIFO $1, then removes that FIFO, so later writes find the stdin
// closed; exit 4 when it is already gone or not a FIFO.
const stdinCloseScript = `[ -p "$1" ] || exit 4
printf '\n' 1<>"$1" || exit 1
rm -f -- "$1"
`

// maxStdinWrites, maxStdinWritesPerSandbox and maxStdinWritesPerCredential
// bound the SendInput stdin writes in progress at a gateway process, in
// all, per sandbox and per credential (so one tenant's writes to commands
// that do not read cannot hold every place for a minute). A write holds no
// answer slot (it may wait a minute on a command that does not read), but
// it holds its message (up to MaxMessageBytes, 4 MiB by default): 32 of
// them, 128 MiB at most.
const (
	maxStdinWrites              = 32
	maxStdinWritesPerSandbox    = 1
	maxStdinWritesPerCredential = 8
)

// stdinChunkBytes bounds the escaped text of one stdinWriteScript (bytes):
// well under the 128 KiB Linux allows one argument, with the script and
// the paths, and under a FIFO's 64 KiB, so the bytes of one script fit an
// empty FIFO that nobody reads any more (the command has ended) and the
// script does not wait.
const stdinChunkBytes = 60 << 10

// appendPrintfFormat appends b as a printf format that prints exactly b:
// printable ASCII as itself ("%" doubled, "\" escaped), every other byte
// as a three-digit octal escape, which POSIX printf (bash's and dash's
// builtins, coreutils) reads as that byte, NUL included. "-" is escaped
// too: a format that starts with it is read as an option by bash's and
// dash's printf, which then fail ("invalid option"), and a chunk of the
// input may start anywhere. So is "'": execd.Shell single-quotes the
// format, where each "'" takes 4 bytes (close, escaped quote, reopen), so
// escaped as 4 bytes here it keeps a chunk's quoted text within its
// 4-bytes-a-byte budget.
func appendPrintfFormat(dst, b []byte) []byte {
	for _, c := range b {
		switch {
		case c == '%':
			dst = append(dst, '%', '%')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c >= 0x20 && c < 0x7f && c != '-' && c != '\'':
			dst = append(dst, c)
		default:
			dst = append(dst, '\\', '0'+c>>6, '0'+c>>3&7, '0'+c&7)
		}
	}
	return dst
}

// nextStdinChunk escapes the start of b into buf[:0] (appendPrintfFormat),
// as much as fits stdinChunkBytes, and returns that format and the rest of
// b. One buffer serves every chunk of an input, so what a SendInput holds
// besides its message is one chunk, however large the input.
func nextStdinChunk(buf, b []byte) (chunk, rest []byte) {
	buf = buf[:0]
	// A byte takes at most 4 escaped bytes: n more bytes always fit.
	for len(b) > 0 && len(buf) <= stdinChunkBytes-4 {
		n := min(len(b), (stdinChunkBytes-len(buf))/4)
		buf = appendPrintfFormat(buf, b[:n])
		b = b[n:]
	}
	return buf, b
}

// errStdinUnavailable is envd's answer to a write to a process whose
// stdin was not asked for or is closed.
func errStdinUnavailable(pid uint32) *Error {
	return fail(CodeStdinUnavailable, "stdin of process with pid "+strconv.FormatUint(uint64(pid), 10)+" not enabled or closed")
}

// stdinRecord selects a running process for a stdin call: PROCESS_NOT_FOUND
// when no record names it or its command has ended.
func (h *Handler) stdinRecord(ctx context.Context, rq *request, sel *envd.ProcessSelector) (procRecord, *Error) {
	rec, e := h.selectProcess(ctx, rq, sel)
	if e != nil {
		return rec, e
	}
	running, err := h.recordRunning(ctx, rq.target, rec)
	switch {
	case err != nil && !execd.IsNotFound(err):
		return rec, fromExecd(err, "process status")
	case err != nil || !running:
		return rec, fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" not found")
	}
	return rec, nil
}

// sendStdin serves Process/SendInput with input.stdin: the bytes (at most
// MaxMessageBytes, the message's bound) written to the process's stdin
// FIFO in order, one execd command per stdinChunkBytes of escaped text.
// Bytes sent after the command has ended are read by nobody and dropped.
// Errors: PROCESS_NOT_FOUND (no such running process), STDIN_UNAVAILABLE
// (a PTY process, one started without stdin, or its stdin closed), and
// execd's failures.
func (h *Handler) sendStdin(w http.ResponseWriter, r *http.Request, rq *request, req envd.SendInputRequest) *Error {
	ctx := r.Context()
	rec, e := h.stdinRecord(ctx, rq, req.Process)
	if e != nil {
		return e
	}
	if rec.PTY != "" {
		return fail(CodeStdinUnavailable, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+
			" has a pty: its input is input.pty, not input.stdin")
	}
	if !rec.Stdin {
		return errStdinUnavailable(rec.PID)
	}
	// The writes wait on the command (a full FIFO) rather than read
	// answers: the call gives its answer slot back and writes under the
	// stdin bound instead (maxStdinWrites; one at a time per sandbox, so
	// two calls' bytes do not interleave), its scripts' small answers
	// read without a slot.
	releaseCred, why := h.shared.stdinCreds.Acquire(ctx, rq.cred.ID, h.cfg.UpstreamWait)
	switch {
	case why != admission.Admitted && ctx.Err() != nil:
		return fail(CodeCanceled, "the client went away while the stdin write waited for its turn")
	case why == admission.KeyFull:
		return busy(BoundStdinWritesPerCredential, "this credential had "+strconv.Itoa(maxStdinWritesPerCredential)+
			" stdin writes in progress for "+h.cfg.UpstreamWait.String()+" (are their processes reading their stdin?); retry when some have finished")
	case why == admission.GlobalFull:
		return busy(BoundStdinWrites, "the gateway had "+strconv.Itoa(maxStdinWrites)+" stdin writes in progress for "+
			h.cfg.UpstreamWait.String()+"; retry shortly")
	}
	defer releaseCred()
	release, why := h.shared.stdinWrites.Acquire(ctx, rq.sandboxID, h.cfg.UpstreamWait)
	switch {
	case why != admission.Admitted && ctx.Err() != nil:
		return fail(CodeCanceled, "the client went away while the stdin write waited for its turn")
	case why == admission.KeyFull:
		return busy(BoundStdinWritesPerSandbox, "another stdin write to this sandbox went on for "+h.cfg.UpstreamWait.String()+
			" (is its process reading its stdin?); retry when it has finished")
	case why == admission.GlobalFull:
		return busy(BoundStdinWrites, "the gateway had "+strconv.Itoa(maxStdinWrites)+" stdin writes in progress for "+
			h.cfg.UpstreamWait.String()+"; retry shortly")
	}
	defer release()
	if rq.slot != nil {
		rq.slot.giveBack()
	}
	wt := rq.target
	wt.Admit = nil
	f := h.recordFiles(rec)
	// ended is the answer when the FIFOs or their readers went between
	// two scripts or during one: closed, or the process ended (its
	// files then removed at the next List).
	ended := func() *Error {
		if _, e := h.stdinRecord(ctx, rq, req.Process); e != nil {
			if e.Code == CodeProcessNotFound {
				e = fail(CodeProcessNotFound, "process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+" ended while its stdin was written")
			}
			return e
		}
		return errStdinUnavailable(rec.PID)
	}
	buf := make([]byte, 0, stdinChunkBytes)
	rest := req.Input.Stdin
	// At least one script, which checks that the stdin is open.
	for first := true; first || len(rest) > 0; first = false {
		var c []byte
		c, rest = nextStdinChunk(buf, rest)
		res, err := h.deps.Execd.Shell(ctx, wt, 4<<10, "/", stdinWriteScript, relative(f.in), relative(f.ctl), string(c))
		switch {
		case err != nil:
			return fromExecd(err, "send stdin")
		case res.ExitCode == 4 && !first, res.ExitCode == 5:
			return ended()
		case res.ExitCode == 4:
			return errStdinUnavailable(rec.PID)
		case res.ExitCode != 0:
			return fail(CodeExecdFailed, "send stdin: writing to the process's stdin failed with exit status "+strconv.Itoa(res.ExitCode))
		}
	}
	_ = connect.WriteUnary(w, envd.Empty{})
	return nil
}

// processCloseStdin serves Process/CloseStdin: the process's stdin holder
// is ended, so the command reads end of file after what was sent. As in
// envd, closing a stdin that is closed or was never opened succeeds, and a
// PTY process's is refused (STDIN_UNAVAILABLE: its end of input is Ctrl+D
// on the terminal); PROCESS_NOT_FOUND when no such process runs.
func (h *Handler) processCloseStdin(w http.ResponseWriter, r *http.Request, rq *request) *Error {
	_, req, e := readUnary(h, r, envd.DecodeCloseStdinRequest)
	if e != nil {
		return e
	}
	rec, e := h.stdinRecord(r.Context(), rq, req.Process)
	if e != nil {
		return e
	}
	if rec.PTY != "" {
		return fail(CodeStdinUnavailable, "cannot close the stdin of process with pid "+strconv.FormatUint(uint64(rec.PID), 10)+
			": it has a pty; send Ctrl+D (0x04) as its input instead")
	}
	if rec.Stdin {
		res, err := h.deps.Execd.Shell(r.Context(), rq.target, 4<<10, "/", stdinCloseScript, relative(h.recordFiles(rec).ctl))
		switch {
		case err != nil:
			return fromExecd(err, "close stdin")
		case res.ExitCode != 0 && res.ExitCode != 4:
			return fail(CodeExecdFailed, "close stdin: ending the process's stdin failed with exit status "+strconv.Itoa(res.ExitCode))
		}
	}
	_ = connect.WriteUnary(w, envd.Empty{})
	return nil
}
