//go:build !unix

package upstream

import "net"

// alive cannot peek at a socket here: every idle connection counts as
// alive, and a failure on it is handled as RoundTrip's retry rules say.
func alive(net.Conn) bool { return true }
