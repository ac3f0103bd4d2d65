//go:build !linux

package upstream

import (
	"errors"
	"net"
)

// setRcvLowat is not used outside Linux: the body is handed over without
// a low-water mark.
func setRcvLowat(*net.TCPConn, int) error { return errors.New("upstream: no SO_RCVLOWAT here") }
