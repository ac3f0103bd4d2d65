package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// stampConn is a TCP connection whose reads also take the kernel's
// receive timestamp (SO_TIMESTAMPNS): the wall-clock time at which the
// last segment a read returned was queued for this socket. On loopback
// the sending process's write queues the segment within its own system
// call, so the stamp is when the peer wrote the bytes, and a read's time
// less its stamp is how long the bytes waited for this process to read
// them (its network poller, its scheduler, a CPU). The tool uses it to
// tell, in a round trip's "out" and "back", the gateway's part from the
// part of the process that reads. Reads go through recvmsg on the
// runtime's poller (syscall.RawConn), as net.Conn's own reads go through
// read; writes and the rest are the connection's.
type stampConn struct {
	net.Conn
	raw syscall.RawConn
	oob []byte
	// last is the stamp of the last read that returned bytes, Unix
	// nanoseconds; 0 before any.
	last atomic.Int64
}

// newStampConn turns on SO_TIMESTAMPNS for c, a *net.TCPConn, and wraps
// it. Errors: c is not a TCP connection, or the option is refused.
func newStampConn(c net.Conn) (*stampConn, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, fmt.Errorf("receive timestamps: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("receive timestamps: SO_TIMESTAMPNS: %w", serr)
	}
	return &stampConn{Conn: c, raw: raw, oob: make([]byte, unix.CmsgSpace(16))}, nil
}

// Read reads as net.Conn's Read does (waiting on the runtime's poller,
// honouring the read deadline) and keeps the read's receive stamp.
func (s *stampConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n, oobn int
	var rerr error
	err := s.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, s.oob, 0)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	if ts, ok := rxStamp(s.oob[:oobn]); ok {
		s.last.Store(ts)
	}
	return n, nil
}

// Stamp is the receive stamp of the last read that returned bytes, Unix
// nanoseconds (0: none yet).
func (s *stampConn) Stamp() int64 { return s.last.Load() }

// rxStamp finds the SCM_TIMESTAMPNS message (a struct timespec: seconds
// and nanoseconds, two 64-bit words on a 64-bit Linux) in a recvmsg's
// control data and returns it in Unix nanoseconds.
func rxStamp(oob []byte) (int64, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			return sec*1e9 + nsec, true
		}
	}
	return 0, false
}
