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
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "corectl serving" {
				addr <- l.Addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	return addr
}
