package harness

import (
	"bufio"
	"encoding/json"
	"io"
)

// CorectlServingAddr reads the JSON log of a bin/corectl process from r
// (one JSON object per line, as corectl's slog handler writes it) and
// sends, once, the "addr" of its "corectl serving" line
// (corectl/cmd/corectl logs it when the control API listens) on the
// returned channel, which has room for it. It then reads r to its end, so
// the process never blocks on a full log pipe; the channel stays empty
// when the process ends without serving. Lines over 1 MiB end the scan.
func CorectlServingAddr(r io.Reader) <-chan string {
	addr := make(chan string, 1)
	go scanServing(r, func(s CorectlServing) { addr <- s.Addr })
	return addr
}

// CorectlServing is what a bin/corectl process's "corectl serving" line
// says: the control API's bound address and its probe listener's ("" when
// it runs without -probe-listen). With "-listen 127.0.0.1:0" and
// "-probe-listen 127.0.0.1:0" the process picks both ports and binds them
// at once, and this line is how a caller learns them.
type CorectlServing struct {
	Addr      string
	ProbeAddr string
}

// CorectlServingAddrs is CorectlServingAddr sending both addresses of the
// "corectl serving" line.
func CorectlServingAddrs(r io.Reader) <-chan CorectlServing {
	out := make(chan CorectlServing, 1)
	go scanServing(r, func(s CorectlServing) { out <- s })
	return out
}

// scanServing reads r as CorectlServingAddr does and calls found with the
// first "corectl serving" line's addresses.
func scanServing(r io.Reader, found func(CorectlServing)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct{ Msg, Addr, ProbeAddr string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "corectl serving" {
			found(CorectlServing{Addr: l.Addr, ProbeAddr: l.ProbeAddr})
			break
		}
	}
	_, _ = io.Copy(io.Discard, r)
}
