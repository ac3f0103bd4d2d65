// Package freeport picks loopback TCP ports for test and benchmark
// servers whose address must be written into a configuration (a
// Caddyfile, corectl's cluster file, a node's config) before the server
// binds it.
//
// Binding ":0" and closing the listener, the usual way, leaves a window in
// which the port can be taken: the kernel hands out the same ephemeral
// range for every other process's outgoing connections and ":0"
// listeners, and on a machine running a test suite in parallel one of
// them sometimes gets it ("bind: address already in use" in CI). The
// ports here are picked at random below the ephemeral range
// (net.ipv4.ip_local_port_range, read from /proc), where nothing is
// handed out automatically; only an explicit bind to the same number can
// still collide, so callers that bind later may still see EADDRINUSE,
// rarely, and should pick again.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked; below it live well-known and
// registered services.
const lowest = 10000

// Addr returns "127.0.0.1:<port>" with a port that was free a moment ago:
// one below the ephemeral range when the range can be read and starts
// above lowest+1, else one the kernel picks. The error is the listen
// error of the fallback (the loopback interface is unusable).
func Addr() (string, error) {
	if low := ephemeralLow(); low > lowest+1 {
		for range 100 {
			port := lowest + rand.IntN(low-lowest)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				addr := l.Addr().String()
				l.Close()
				return addr, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Port returns the port of Addr, as decimal text.
func Port() (string, error) {
	addr, err := Addr()
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(addr)
	return port, err
}

// ephemeralLow returns the first port of the kernel's ephemeral range,
// 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
