package upstream

import (
	"net"
	"syscall"
)

// setRcvLowat sets the connection's SO_RCVLOWAT: a poll reports it
// readable once n bytes are queued, or at its end or an error.
func setRcvLowat(c *net.TCPConn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}
