package execdstub

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// Hostile is what code in a sandbox can do in execd's place on port 44772:
// answer every JSON read the gateway makes with as many bytes as it is
// willing to send. With Config.Hostile set, the Server answers
//
//   - GET /files/info with one entry per path asked for whose owner is
//     Bytes long (the entry a gateway needs is a few hundred bytes);
//   - GET /directories/list with a JSON array of Bytes of tiny entries
//     ({"path":"/a"}, 13 bytes each: the most entries per byte), or, with
//     ListingEntries, that many entries padded to fill ListingBytes (the
//     largest listing a gateway accepts, which it decodes whole);
//   - GET /command/status/{id} with a status whose content is Bytes long;
//   - GET /files/search with Bytes of tiny entries;
//
// always 200 with no Content-Length (chunked), so the size is known only
// as it arrives; with CommandLineBytes, also
//
//   - POST /command with execd's init event and one stdout event whose
//     text is CommandLineBytes long, then nothing more (no terminal event)
//     until the request goes away;
//
// with BackgroundLineBytes, also
//
//   - POST /command of a background command (background: true) with
//     execd's init event and one stdout event whose text is
//     BackgroundLineBytes long, then the end of the stream (no terminal
//     event; every other POST /command is execd's);
//
// and with DownloadBytes, GET /files/download with that many bytes
// whatever the file holds (and every other GET, file info included,
// answered as execd's, so that the download is reached). Every other route
// behaves as execd's.
type Hostile struct {
	// Bytes is how much each hostile answer holds; 0 means 64 MiB, the
	// most the gateway once read of any answer.
	Bytes int64
	// ListingEntries, when positive, makes a listing hold this many
	// entries whose paths pad it to about ListingBytes.
	ListingEntries int
	// ListingBytes is the size of a listing with ListingEntries.
	ListingBytes int64
	// CommandLineBytes, when positive, makes POST /command answer with one
	// stdout event of this many bytes of text and then hold the stream.
	CommandLineBytes int64
	// EarlyOutputBytes, when positive, makes POST /command answer with
	// about this many bytes of stdout events of 32 KiB each before any
	// init event, and then hold the stream (execd reports output before
	// init when a poll of its output files comes first).
	EarlyOutputBytes int64
	// BackgroundLineBytes, when positive, makes POST /command of a
	// background command answer with init and one stdout event of this
	// many bytes of text, and then end the stream (execd's own background
	// stream is init, then execution_complete, and never any output).
	BackgroundLineBytes int64
	// DownloadBytes, when positive, makes every download answer 200 with
	// this many bytes, chunked unless DownloadDeclared is set.
	DownloadBytes int64
	// DownloadDeclared, when positive, is the Content-Length a download
	// declares, whatever it sends (more than it sends: the body ends early).
	DownloadDeclared int64

	linesWritten atomic.Int64
}

// LinesWritten returns how many of CommandLineBytes' events were written
// in full (accepted by the connection: read by its peer or buffered in
// the kernel).
func (h *Hostile) LinesWritten() int64 { return h.linesWritten.Load() }

// serveDownload answers a download with DownloadBytes, declaring
// DownloadDeclared.
func (h *Hostile) serveDownload(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/octet-stream")
	if h.DownloadDeclared > 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(h.DownloadDeclared, 10))
	}
	w.WriteHeader(http.StatusOK)
	chunk := []byte(strings.Repeat("d", 64<<10))
	for left := h.DownloadBytes; left > 0; left -= int64(len(chunk)) {
		if _, err := w.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			return
		}
	}
}

// serveEarlyOutput answers POST /command with EarlyOutputBytes of stdout
// events and no init, then waits for the request to go away; LinesWritten
// counts the answers written in full.
func (h *Hostile) serveEarlyOutput(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	ev := []byte(`{"type":"stdout","text":"` + strings.Repeat("e", 32<<10) + `","timestamp":1}` + "\n\n")
	for left := h.EarlyOutputBytes; left > 0; left -= 32 << 10 {
		if _, err := w.Write(ev); err != nil {
			return
		}
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	h.linesWritten.Add(1)
	<-r.Context().Done()
}

// serveCommandLine answers POST /command with the init event and a stdout
// event of CommandLineBytes, then waits for the request to go away.
func (h *Hostile) serveCommandLine(w http.ResponseWriter, r *http.Request) {
	if h.writeLine(w, h.CommandLineBytes) {
		<-r.Context().Done()
	}
}

// isBackground reports whether r, a POST /command, starts a background
// command, reading up to 1 MiB of its body and leaving all of it for the
// handler.
func isBackground(r *http.Request) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	var req struct {
		Background bool `json:"background"`
	}
	return err == nil && json.Unmarshal(b, &req) == nil && req.Background
}

// writeLine writes the init event and a stdout event of n bytes of text,
// and reports whether they were all written and flushed (LinesWritten
// then counts it).
func (h *Hostile) writeLine(w http.ResponseWriter, n int64) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if _, err := w.Write([]byte(`{"type":"init","text":"0123456789abcdef0123456789abcdef","timestamp":1}` + "\n\n")); err != nil {
		return false
	}
	_ = rc.Flush()
	if _, err := w.Write([]byte(`{"type":"stdout","text":"`)); err != nil {
		return false
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for left := n; left > 0; left -= int64(len(chunk)) {
		if _, err := w.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			return false
		}
	}
	if _, err := w.Write([]byte(`"}` + "\n\n")); err != nil {
		return false
	}
	if err := rc.Flush(); err != nil {
		return false
	}
	h.linesWritten.Add(1)
	return true
}

func (h *Hostile) bytes() int64 {
	if h.Bytes <= 0 {
		return 64 << 20
	}
	return h.Bytes
}

// serveHostile answers r as Hostile says and reports whether it did.
func (s *Server) serveHostile(w http.ResponseWriter, r *http.Request) bool {
	h := s.cfg.Hostile
	if h != nil && h.EarlyOutputBytes > 0 && r.Method == http.MethodPost && r.URL.Path == "/command" {
		h.serveEarlyOutput(w, r)
		return true
	}
	if h != nil && h.CommandLineBytes > 0 && r.Method == http.MethodPost && r.URL.Path == "/command" {
		h.serveCommandLine(w, r)
		return true
	}
	if h != nil && h.BackgroundLineBytes > 0 && r.Method == http.MethodPost && r.URL.Path == "/command" && isBackground(r) {
		h.writeLine(w, h.BackgroundLineBytes)
		return true
	}
	if h == nil || r.Method != http.MethodGet || h.BackgroundLineBytes > 0 {
		return false
	}
	if h.DownloadBytes > 0 {
		if r.URL.Path != "/files/download" {
			return false
		}
		h.serveDownload(w)
		return true
	}
	n := h.bytes()
	bw := bufio.NewWriterSize(w, 64<<10)
	defer bw.Flush()
	pad := func(c byte) {
		chunk := strings.Repeat(string(c), 64<<10)
		for left := n; left > 0; left -= int64(len(chunk)) {
			if _, err := bw.WriteString(chunk[:min(int64(len(chunk)), left)]); err != nil {
				return
			}
		}
	}
	tiny := func() {
		_, _ = bw.WriteString("[")
		for left := n; left > 0; left -= 13 {
			_, _ = bw.WriteString(`{"path":"/a"},`)
		}
		_, _ = bw.WriteString(`{"path":"/a"}]`)
	}
	switch p := r.URL.Path; {
	case p == "/files/info":
		w.Header().Set("Content-Type", "application/json")
		_, _ = bw.WriteString("{")
		for i, q := range r.URL.Query()["path"] {
			if i > 0 {
				_, _ = bw.WriteString(",")
			}
			k := strconv.Quote(q)
			_, _ = bw.WriteString(k + `:{"path":` + k + `,"size":1,"mode":644,"owner":"`)
			pad('o')
			_, _ = bw.WriteString(`"}`)
		}
		_, _ = bw.WriteString("}")
	case p == "/directories/list" && h.ListingEntries > 0:
		w.Header().Set("Content-Type", "application/json")
		per := max(h.ListingBytes/int64(h.ListingEntries)-160, 1)
		name := strings.Repeat("n", int(per))
		_, _ = bw.WriteString("[")
		for i := range h.ListingEntries {
			if i > 0 {
				_, _ = bw.WriteString(",")
			}
			_, _ = bw.WriteString(`{"path":"/home/user/` + strconv.Itoa(i) + name + `","type":"file","size":1,` +
				`"modified_at":"2026-12-01T06:31:43Z","owner":"root","group":"root","mode":644}`)
		}
		_, _ = bw.WriteString("]")
	case p == "/directories/list", p == "/files/search":
		w.Header().Set("Content-Type", "application/json")
		tiny()
	case strings.HasPrefix(p, "/command/status/"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = bw.WriteString(`{"id":` + strconv.Quote(strings.TrimPrefix(p, "/command/status/")) + `,"running":true,"content":"`)
		pad('c')
		_, _ = bw.WriteString(`"}`)
	default:
		return false
	}
	return true
}
