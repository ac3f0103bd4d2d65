package e2bdataplane

import (
	"io"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// downloadWriter is dataplane.Deps.DownloadWriter: where a download's
// body is relayed from the data plane's own client, which hands the
// writer's ReadFrom the upstream connection limited to the body
// (*io.LimitedReader over *net.TCPConn) for net/http to splice(2) into
// the client's connection.
//
// Caddy's write idle timeout (server write_idle_timeout, default 1 min)
// wraps the ResponseWriter in a caddyhttp.IdleTimeoutWriter whose
// ReadFrom wraps its source in a second io.LimitReader of MaxChunk bytes;
// net/http splices only a single *io.LimitedReader over the connection,
// so through it the bytes would be copied, with a 32 KiB buffer made per
// chunk. So when that writer is the data plane's w itself (no access-log
// or metrics recorder between, which would count the bytes they see),
// the answer is an idleSplicer beneath it, which keeps its rule: the
// write deadline set to now + the idle timeout (capped by the server's
// write_timeout) before each MaxChunk bytes. With a recorder between,
// with WriteMinRate set, or over HTTP/2 or 3, the bytes are copied
// through w's Write (no ReadFrom). Without an idle writer, w's own
// ReadFrom is used: Caddy's other wrappers pass it on and count it.
func downloadWriter(w http.ResponseWriter, r *http.Request) io.Writer {
	_, iw := caddyhttp.IdleTimeoutsFromContext(r.Context())
	switch {
	case r.ProtoMajor != 1:
		return writeOnly{w}
	case iw == nil:
		return w
	case w != http.ResponseWriter(iw) || iw.Deadline.MinRate > 0 || iw.ClearBetweenWrites:
		return writeOnly{w}
	}
	return &idleSplicer{iw: iw}
}

// writeOnly hides a ResponseWriter's ReadFrom: the body is copied.
type writeOnly struct{ w io.Writer }

func (w writeOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

// idleSplicer writes beneath a Caddy IdleTimeoutWriter with its idle
// rule; see downloadWriter.
type idleSplicer struct{ iw *caddyhttp.IdleTimeoutWriter }

func (s *idleSplicer) Write(p []byte) (int, error) { return s.iw.Write(p) }

// ReadFrom moves an *io.LimitedReader source MaxChunk bytes at a time
// through the writer beneath the idle writer, each under a write deadline
// of now + the idle timeout (no later than the hard deadline); it stops at
// the first error or the source's early end, and then leaves the idle
// deadline armed, as the idle writer does over HTTP/1. Other sources go to the idle
// writer's own ReadFrom.
func (s *idleSplicer) ReadFrom(src io.Reader) (int64, error) {
	lr, ok := src.(*io.LimitedReader)
	if !ok {
		return s.iw.ReadFrom(src)
	}
	chunk := int64(s.iw.MaxChunk)
	if chunk <= 0 {
		chunk = caddyhttp.DefaultMaxWriteChunk
	}
	var total int64
	for lr.N > 0 {
		d := time.Now().Add(s.iw.Deadline.Timeout)
		if hard := s.iw.Deadline.HardDeadline; !hard.IsZero() && d.After(hard) {
			d = hard
		}
		if err := s.iw.Ctrl.SetWriteDeadline(d); err != nil {
			n, err := s.iw.ReadFrom(lr)
			return total + n, err
		}
		part := &io.LimitedReader{R: lr.R, N: min(lr.N, chunk)}
		before := part.N
		n, err := s.iw.ResponseWriterWrapper.ReadFrom(part)
		lr.N -= before - part.N
		total += n
		if err != nil || part.N > 0 {
			return total, err
		}
	}
	// Every byte is on the connection: put the server's hard deadline (or
	// none) back, so the idle one does not outlive the response.
	if hard := s.iw.Deadline.HardDeadline; hard.IsZero() || time.Now().Before(hard) {
		_ = s.iw.Ctrl.SetWriteDeadline(hard)
	}
	return total, nil
}
