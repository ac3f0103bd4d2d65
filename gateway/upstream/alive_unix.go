//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection can carry a request: its host
// has not closed it and sent nothing on it since its last answer. It peeks
// at the socket without waiting (one recv system call); a connection that
// cannot be inspected counts as alive, and a failure on it is then
// handled as RoundTrip's retry rules say.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	ok = true
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK // nothing to read yet
		return true
	})
	return ok
}
