package upstream

import (
	"io"
	"net"
)

// WriteTo copies the rest of the body to w (io.WriterTo, which io.Copy
// and io.CopyBuffer prefer) and then ends it as a Read to its end would:
// the connection goes back to the pool only when the whole body was
// read, otherwise it is closed.
//
// For a body framed by Content-Length on a plain TCP connection, when w
// implements io.ReaderFrom, it writes the bytes already in the
// connection's read buffer and then hands w.ReadFrom the connection
// itself as an *io.LimitedReader of exactly the bytes still due: a
// net/http server's ResponseWriter over a TCP connection then moves them
// with splice(2), through a kernel pipe, never through this process's
// memory, and reads no byte past the body; until its last 256 KiB the
// socket's receive low-water mark makes each wake-up move at least that
// much (Linux). A body that ends before its
// length is io.ErrUnexpectedEOF. The request context's cancellation
// still reaches the connection (its deadline is set to the past), so a
// ReadFrom blocked on a silent host returns. A chunked body, one ended by
// the connection's close, a connection that is not a *net.TCPConn, or a
// w without ReadFrom is copied through Read.
func (b *body) WriteTo(w io.Writer) (int64, error) {
	rf, isRF := w.(io.ReaderFrom)
	tc, isTCP := b.c.nc.(*net.TCPConn)
	if !isRF || !isTCP || b.left <= 0 || b.r != io.Reader(b.c.br) || b.done.Load() {
		return io.Copy(w, readOnly{b})
	}
	var n int64
	if k := b.c.br.Buffered(); k > 0 {
		p, _ := b.c.br.Peek(int(min(int64(k), b.left)))
		m, err := w.Write(p)
		_, _ = b.c.br.Discard(m)
		n += int64(m)
		b.left -= int64(m)
		if err != nil {
			b.finish(false, err)
			return n, err
		}
	}
	// While more than twice lowWater is due, the socket wakes the reader
	// only once lowWater bytes are queued (SO_RCVLOWAT): a fixed entry
	// writing 32 KiB at a time would otherwise cost a wake-up and two
	// splices per 32 KiB. The last lowWater bytes go with the mark back
	// at 1, so no wait is for more bytes than are still due.
	if b.left > 2*lowWater && setRcvLowat(tc, lowWater) == nil {
		part := b.left - lowWater
		lr := &io.LimitedReader{R: tc, N: part}
		m, err := rf.ReadFrom(lr)
		n += m
		b.left -= part - lr.N
		if rerr := setRcvLowat(tc, 1); err == nil && rerr != nil {
			err = rerr
		}
		if err == nil && lr.N > 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			b.finish(false, err)
			return n, err
		}
	}
	if b.left > 0 {
		lr := &io.LimitedReader{R: tc, N: b.left}
		m, err := rf.ReadFrom(lr)
		n += m
		b.left = lr.N
		if err == nil && b.left > 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			b.finish(false, err)
			return n, err
		}
	}
	b.finish(b.keep, io.EOF)
	return n, nil
}

// lowWater is the receive low-water mark (bytes) set on the connection
// while the bulk of a body is handed over: 256 KiB.
const lowWater = 256 << 10

// readOnly hides a body's WriteTo from io.Copy.
type readOnly struct{ r io.Reader }

func (r readOnly) Read(p []byte) (int, error) { return r.r.Read(p) }
