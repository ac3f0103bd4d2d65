// Package execd is a client for the Alibaba OpenSandbox execd HTTP API
// (port 44772 inside a sandbox pod), reached through a compute cluster's
// fixed entry and the OpenSandbox Ingress in URI mode:
//
//	<fixed entry>/<sandboxID>/44772/<execd path>?<query>
//
// The wire facts it relies on, quirks included, are those measured from the
// real programs in docs/wire-facts.md: the /command event stream is
// bare JSON objects separated by blank lines (§X1.4), uploads need a metadata
// *file* part (§X1.5), the ingress answers text/plain "OpenSandbox Ingress: …"
// errors (§X2.6). Every failure is returned as an *Error whose Kind says which
// hop failed, so the gateway can map it to a stable code.
package execd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is execd's listening port inside the sandbox pod
// (docs/wire-facts.md §X1.1).
const DefaultPort = 44772

// AccessTokenHeader carries execd's optional access token (docs/wire-facts.md §X1.2).
const AccessTokenHeader = "X-EXECD-ACCESS-TOKEN"

// maxErrorBody bounds how much of an error response is read (bytes).
const maxErrorBody = 4 << 10

// Target names one sandbox's execd behind one cluster's fixed entry.
type Target struct {
	// FixedEntry is the cluster's fixed entry, e.g. http://10.0.0.5:80. A
	// path prefix in it is kept before /<sandboxID>.
	FixedEntry *url.URL
	// SandboxID is the OpenSandbox sandbox ID (the BatchSandbox name).
	SandboxID string
	// Port is execd's port in the URI; 0 means DefaultPort.
	Port int
	// AccessToken, when not empty, is sent as X-EXECD-ACCESS-TOKEN.
	AccessToken string
	// Host, when not empty, is the Host header sent to the fixed entry
	// (the host of its Ingress rules); empty sends FixedEntry's host.
	Host string
	// Admit, when not nil, is called by every call that reads an answer
	// (all but Do and the upload; ReadAt, which reads through Do, too) once the answer's head has arrived and
	// before any byte of its body is read, error bodies included: the
	// data plane takes its slot for reading and decoding answers there
	// (docs/dataplane.md "Bounded cost per request and per tenant"), so a
	// call waiting for execd holds none. An error from Admit is the
	// call's error, the answer closed unread.
	Admit func() error
}

// URL returns the upstream URL for an execd path such as "/files/info".
// path is in its escaped form: a segment that holds data (a command id)
// is escaped once by the caller with url.PathEscape, and sent as it is.
func (t Target) URL(path string, query url.Values) *url.URL {
	return t.url(path, query.Encode())
}

// url is URL with the query already encoded.
func (t Target) url(path, rawQuery string) *url.URL {
	port := t.Port
	if port == 0 {
		port = DefaultPort
	}
	u := *t.FixedEntry
	escaped := strings.TrimRight(u.EscapedPath(), "/") + "/" + t.SandboxID + "/" + strconv.Itoa(port) + path
	if p, err := url.PathUnescape(escaped); err == nil {
		u.Path, u.RawPath = p, escaped
	} else {
		u.Path, u.RawPath = escaped, ""
	}
	u.RawQuery = rawQuery
	u.Fragment = ""
	return &u
}

// Client sends execd requests over an http.RoundTripper (in the gateway:
// Caddy's reverse_proxy HTTP transport, for its pooling and timeouts).
//
// Code in a sandbox can answer on execd's port, so every answer is read
// against a limit sized for its operation before it is decoded: file info
// by the paths asked for (infoLimit), a command's status by the command
// the caller sent (CommandStatus's maxBytes), a listing by MaxListingBytes
// and MaxListingEntries, error bodies by 4 KiB. An answer past its limit is
// an *Error with KindUnexpected that says so; nothing of it is decoded.
type Client struct {
	// Transport carries the requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Unary, when set, carries the bodyless requests whose answers are
	// read whole before they are decoded: ping, file info, listings,
	// search, deletes, interrupts, command status (in the gateway the
	// data plane's own HTTP/1.1 client, package gateway/upstream). nil
	// means Transport.
	Unary http.RoundTripper
	// MaxListingBytes bounds a directory listing's answer (bytes):
	// /directories/list's JSON, or the listing script's output on execd
	// v1.0.18. 0 means DefaultMaxListingBytes.
	MaxListingBytes int64
	// MaxListingEntries bounds the entries of one listing. 0 means
	// DefaultMaxListingEntries.
	MaxListingEntries int
}

// Listing bounds by default: 4 MiB of answer and 16,384 entries (an
// execd entry takes about 200 bytes of JSON; a tiny hostile one 13).
const (
	DefaultMaxListingBytes   = 4 << 20
	DefaultMaxListingEntries = 1 << 14
)

func (c *Client) listingBytes() int64 {
	if c.MaxListingBytes <= 0 {
		return DefaultMaxListingBytes
	}
	return c.MaxListingBytes
}

func (c *Client) listingEntries() int {
	if c.MaxListingEntries <= 0 {
		return DefaultMaxListingEntries
	}
	return c.MaxListingEntries
}

func (c *Client) transport() http.RoundTripper {
	if c.Transport == nil {
		return http.DefaultTransport
	}
	return c.Transport
}

func (c *Client) unary() http.RoundTripper {
	if c.Unary == nil {
		return c.transport()
	}
	return c.Unary
}

// Do sends one request to the execd path of t and returns the response,
// whatever its status. Header values in hdr are added. Transport failures
// are returned as *Error with KindUnreachable, KindTimeout or KindCanceled.
func (c *Client) Do(ctx context.Context, t Target, method, path string, query url.Values, hdr http.Header, body io.Reader) (*http.Response, error) {
	return c.do(ctx, c.transport(), t, method, path, query.Encode(), hdr, body, -1)
}

// userAgent is the User-Agent sent upstream when the caller sets none;
// one slice for every request (net/http only reads it).
var userAgent = []string{"sandgate"}

// do is Do with the query encoded (rawQuery, "" for none) and the body's
// length: n >= 0 is sent as Content-Length (the body must then yield
// exactly n bytes), -1 leaves it to net/http (known for bytes, strings and
// nil bodies, else chunked). The request takes the URL built from t as it
// is, not through its string form and a second parse.
func (c *Client) do(ctx context.Context, rt http.RoundTripper, t Target, method, path, rawQuery string, hdr http.Header, body io.Reader, n int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "", body)
	if err != nil {
		return nil, &Error{Kind: KindUnexpected, Message: "building the execd request failed"}
	}
	req.URL = t.url(path, rawQuery)
	req.Host = strings.TrimSuffix(req.URL.Host, ":") // as NewRequest sets it
	if n >= 0 && body != nil {
		req.ContentLength = n
	}
	if t.Host != "" {
		req.Host = t.Host
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if t.AccessToken != "" {
		req.Header.Set(AccessTokenHeader, t.AccessToken)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header["User-Agent"] = userAgent
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	return resp, nil
}

// doOK is Do followed by CheckResponse; the caller owns the body on success.
func (c *Client) doOK(ctx context.Context, t Target, method, path, rawQuery string, hdr http.Header, body io.Reader) (*http.Response, error) {
	return t.checked(c.do(ctx, c.transport(), t, method, path, rawQuery, hdr, body, -1))
}

// unaryOK is doOK for a bodyless request whose answer is read whole,
// sent with Unary.
func (c *Client) unaryOK(ctx context.Context, t Target, method, path, rawQuery string) (*http.Response, error) {
	return t.checked(c.do(ctx, c.unary(), t, method, path, rawQuery, nil, nil, -1))
}

// admitted is t.Admit on a do's answer: the answer closed unread and
// Admit's error returned when it refuses.
func (t Target) admitted(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	if t.Admit != nil {
		if err := t.Admit(); err != nil {
			_ = resp.Body.Close()
			return nil, err
		}
	}
	return resp, nil
}

// checked is t.Admit, then CheckResponse, on a do's answer.
func (t Target) checked(resp *http.Response, err error) (*http.Response, error) {
	resp, err = t.admitted(resp, err)
	if err != nil {
		return nil, err
	}
	if err := CheckResponse(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func transportError(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return &Error{Kind: KindCanceled, Message: "the request was canceled"}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{Kind: KindTimeout, Message: "the request deadline passed"}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &Error{Kind: KindTimeout, Message: "the fixed entry did not answer in time"}
	}
	return &Error{Kind: KindUnreachable, Message: "the fixed entry could not be reached"}
}

// Ping calls GET /ping; nil means execd answered 200 (spec §4.2 readiness).
func (c *Client) Ping(ctx context.Context, t Target) error {
	resp, err := c.unaryOK(ctx, t, http.MethodGet, "/ping", "")
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// unsized returns b as a request body whose length net/http does not
// know, so it is sent chunked (Transfer-Encoding: chunked, no
// Content-Length). The bodies execd answers at once (/command, small
// uploads, /files/mv, /directories) go this way because of the
// OpenSandbox ingress in front of execd: it proxies with
// httputil.ReverseProxy and http.DefaultTransport on net/http's HTTP/1
// server. With a Content-Length, execd can have the whole request and
// answer while the ingress's Transport still makes one last read of the
// inbound body; when the ingress starts writing execd's answer, the server
// closes that body, the read fails, and the Transport drops the upstream
// connection mid-answer (golang/go#40747): a command stream cut just after
// its start, EXECD_PROTOCOL (measured through the ingress stand-in: 12 of
// 6,000 commands at a load average of about 11). Chunked, execd cannot
// have the whole request before the ingress has read its end.
func unsized(b []byte) io.Reader { return struct{ io.Reader }{bytes.NewReader(b)} }

// drain discards a bounded amount of the body and closes it so the
// connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// FileInfo is execd's FileInfo (docs/wire-facts.md §X1.3). Type is absent on
// execd v1.0.18. Mode is an int whose decimal digits are the octal
// permission bits (644 means 0o644).
type FileInfo struct {
	// Path is the entry's absolute path.
	Path string `json:"path"`
	// Type is one of the Type* constants; empty on execd v1.0.18.
	Type string `json:"type,omitempty"`
	// Size is the size in bytes.
	Size int64 `json:"size"`
	// ModifiedAt is the last modification time.
	ModifiedAt time.Time `json:"modified_at"`
	// CreatedAt is the time execd reports as the creation time.
	CreatedAt time.Time `json:"created_at"`
	// Owner is the owning user's name.
	Owner string `json:"owner"`
	// Group is the owning group's name.
	Group string `json:"group"`
	// Mode is the octal permission written in decimal digits (644).
	Mode int `json:"mode"`
	// Link is what a symlink of a listing resolves to (not execd's: set by
	// ListDirectory's extra request); nil for any other entry, and for a
	// symlink that request did not see (removed or replaced since execd
	// listed it, or named with a "\r").
	Link *Link `json:"-"`
}

// File types execd reports in FileInfo.Type (HEAD only).
const (
	TypeFile      = "file"
	TypeDirectory = "directory"
	TypeSymlink   = "symlink"
	TypeOther     = "other"
)

// Perm converts Mode to permission bits: 644 → 0o644. A value with a digit
// above 7 gives an error.
// It reads the decimal digits as octal ones without formatting them (as
// strconv.ParseUint(strconv.Itoa(Mode), 8, 32) would, with its errors:
// a negative Mode, or digits whose octal value passes 32 bits).
func (fi FileInfo) Perm() (uint32, error) {
	var n uint64
	for m, shift := fi.Mode, 0; m > 0; m, shift = m/10, shift+3 {
		d := m % 10
		if d > 7 {
			return 0, fmt.Errorf("execd: mode %d is not octal digits", fi.Mode)
		}
		n |= uint64(d) << shift // at most 19 digits: 57 bits
	}
	if fi.Mode < 0 || n > math.MaxUint32 {
		return 0, fmt.Errorf("execd: mode %d is not octal digits", fi.Mode)
	}
	return uint32(n) & 0o7777, nil
}

// readLimited reads resp's body whole when it holds at most limit bytes;
// a longer body (by Content-Length, or once limit+1 bytes have arrived)
// is an *Error with KindUnexpected naming what and the limit. The body is
// drained and closed.
func readLimited(resp *http.Response, limit int64, what string) ([]byte, error) {
	defer drain(resp)
	tooLarge := func() error { // built only when needed: three allocations
		return &Error{Kind: KindUnexpected, Status: resp.StatusCode,
			Message: "execd's answer to " + what + " is larger than the " + strconv.FormatInt(limit, 10) + " bytes it can need"}
	}
	if resp.ContentLength > limit {
		return nil, tooLarge()
	}
	var buf []byte
	if resp.ContentLength > 0 {
		buf = make([]byte, 0, resp.ContentLength+1) // +1: the read that sees the end
	}
	buf, err := appendBody(buf, resp.Body, limit+1)
	if err != nil {
		return nil, &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "reading execd's answer to " + what + " failed"}
	}
	if int64(len(buf)) > limit {
		return nil, tooLarge()
	}
	return buf, nil
}

// decodeJSON decodes resp's JSON body into v once readLimited has read it
// within limit bytes.
func decodeJSON(resp *http.Response, v any, limit int64, what string) error {
	b, err := readLimited(resp, limit, what)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "execd sent a response that is not the expected JSON"}
	}
	return nil
}

// infoLimit is the most a /files/info answer for paths ps can need
// (bytes): each path appears twice (key and "path"), JSON-escaped at most
// six bytes per byte, with 1 KiB per entry for the other members.
func infoLimit(ps []string) int64 {
	n := int64(0)
	for _, p := range ps {
		n += 1<<10 + 12*int64(len(p))
	}
	return n
}

// StatusLimit is the most a /command/status answer can need for a
// command whose text (CommandRequest.Command) is n bytes: the text comes
// back as "content", JSON-escaped at most six bytes per byte, and 4 KiB
// covers the other members.
func StatusLimit(n int) int64 { return 4<<10 + 6*int64(n) }

// Stat calls GET /files/info?path=p and returns the entry for p. A missing
// path is an *Error with KindNotFound; execd v1.0.18 reports it as
// 500 RUNTIME_ERROR "file not found", which is mapped to KindNotFound too.
func (c *Client) Stat(ctx context.Context, t Target, p string) (FileInfo, error) {
	m, err := c.info(ctx, t, []string{p})
	if err != nil {
		return FileInfo{}, err
	}
	return m[p], nil
}

// info calls GET /files/info with every path of ps and returns execd's map,
// which must name each of them.
func (c *Client) info(ctx context.Context, t Target, ps []string) (map[string]FileInfo, error) {
	resp, err := c.unaryOK(ctx, t, http.MethodGet, "/files/info", url.Values{"path": ps}.Encode())
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Kind == KindExecd && e.Code == "RUNTIME_ERROR" && strings.Contains(e.Message, "file not found") {
			e.Kind = KindNotFound
		}
		return nil, err
	}
	var m map[string]FileInfo
	if err := decodeJSON(resp, &m, infoLimit(ps), "a file info request"); err != nil {
		return nil, err
	}
	for _, p := range ps {
		if _, ok := m[p]; !ok {
			return nil, &Error{Kind: KindUnexpected, Message: "execd's file info did not name the requested path"}
		}
	}
	return m, nil
}

// Download calls GET /files/download?path=p, passing the Range and
// conditional headers found in hdr. On 200 or 206 the caller owns the
// response body; other statuses are returned as *Error.
func (c *Client) Download(ctx context.Context, t Target, p string, hdr http.Header) (*http.Response, error) {
	return c.doOK(ctx, t, http.MethodGet, "/files/download", url.Values{"path": {p}}.Encode(), hdr, nil)
}

// Upload calls POST /files/upload with a multipart body already framed by
// the caller. length is the body's exact length in bytes, sent as
// Content-Length, or -1 when unknown (the body goes chunked). It returns
// nil on execd's empty 200.
func (c *Client) Upload(ctx context.Context, t Target, contentType string, body io.Reader, length int64) error {
	resp, err := c.do(ctx, c.transport(), t, http.MethodPost, "/files/upload", "", http.Header{"Content-Type": {contentType}}, body, length)
	if err == nil {
		err = CheckResponse(resp)
	}
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// DeleteFile calls DELETE /files?path=p. execd ignores a missing file and
// answers 500 RUNTIME_ERROR for a directory (docs/wire-facts.md §X1.3).
func (c *Client) DeleteFile(ctx context.Context, t Target, p string) error {
	resp, err := c.unaryOK(ctx, t, http.MethodDelete, "/files", url.Values{"path": {p}}.Encode())
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// DeleteDirectory calls DELETE /directories?path=p (recursive; a missing
// path succeeds).
func (c *Client) DeleteDirectory(ctx context.Context, t Target, p string) error {
	resp, err := c.unaryOK(ctx, t, http.MethodDelete, "/directories", url.Values{"path": {p}}.Encode())
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// ListDirectory calls GET /directories/list?path=&depth= (execd HEAD). When
// execd has no such route (v1.0.18 answers gin's "404 page not found") the
// listing is built with listWithShell, in the same order and shape. A
// missing path is KindNotFound, a path that is not a directory KindExecd
// with status 400. A path that is a symlink to a directory, which execd
// refuses to list, is listed through with listWithShell (its entries under
// the path asked for, as envd's). When the listing holds symlinks, one
// more request (resolveLinks) sets their FileInfo.Link.
func (c *Client) ListDirectory(ctx context.Context, t Target, p string, depth int) ([]FileInfo, error) {
	list, _, err := c.ListDirectoryView(ctx, t, p, depth, nil)
	return list, err
}

// CommandRequest is execd's RunCommandRequest (docs/wire-facts.md §X1.4).
// Timeout is in milliseconds; 0 means none. GID needs UID.
type CommandRequest struct {
	// Command is the shell command line; required.
	Command string `json:"command"`
	// Cwd is the working directory.
	Cwd string `json:"cwd,omitempty"`
	// Background starts the command detached: the stream is init and
	// then execution_complete at once; GET /command/status follows it.
	Background bool `json:"background,omitempty"`
	// Timeout kills the command after this many milliseconds; 0 is none.
	Timeout int64 `json:"timeout,omitempty"`
	// UID runs the command as this user ID.
	UID *uint32 `json:"uid,omitempty"`
	// GID runs the command with this group ID; it needs UID.
	GID *uint32 `json:"gid,omitempty"`
	// Envs are environment variables added to the command's.
	Envs map[string]string `json:"envs,omitempty"`
}

// Interrupt calls DELETE /command?id=: execd sends SIGTERM to the command's
// process group and SIGKILL 3 s later. A client disconnect alone does not
// stop a foreground command (docs/wire-facts.md §X1.4); nor does the gateway,
// whose commands live as long as envd's processes do.
func (c *Client) Interrupt(ctx context.Context, t Target, id string) error {
	resp, err := c.unaryOK(ctx, t, http.MethodDelete, "/command", url.Values{"id": {id}}.Encode())
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// CommandStatus is the body of GET /command/status/{id} (docs/wire-facts.md
// §X1.4). ExitCode is set once the command has finished; it is -1 when a
// signal killed it, and Error then names the signal ("signal: killed").
type CommandStatus struct {
	// ID is the command ID of its init event. execd's "content" (the
	// command text) is not decoded: it is as large as the command and the
	// gateway has it already.
	ID string `json:"id"`
	// Running reports that the command has not finished.
	Running bool `json:"running"`
	// ExitCode is the exit status once finished; -1 for a signal.
	ExitCode *int `json:"exit_code,omitempty"`
	// Error names the failure, e.g. "signal: killed".
	Error string `json:"error,omitempty"`
	// StartedAt is when the command started.
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is when it finished; nil while it runs.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CommandStatus calls GET /command/status/{id}, for foreground and
// background commands alike. An id execd does not know (execd answers 404
// INVALID_REQUEST_BODY "command not found: <id>") is an *Error with
// KindNotFound. An answer over maxBytes (StatusLimit of the command's text
// length) is an *Error with KindUnexpected.
func (c *Client) CommandStatus(ctx context.Context, t Target, id string, maxBytes int64) (CommandStatus, error) {
	resp, err := c.unaryOK(ctx, t, http.MethodGet, "/command/status/"+url.PathEscape(id), "")
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Kind == KindExecd && e.Status == http.StatusNotFound {
			e.Kind = KindNotFound
		}
		return CommandStatus{}, err
	}
	var st CommandStatus
	if err := decodeJSON(resp, &st, maxBytes, "a command status request"); err != nil {
		return CommandStatus{}, err
	}
	return st, nil
}

// RunCommand calls POST /command and returns the event stream. Validation
// failures (400 INVALID_REQUEST_BODY, e.g. a missing cwd) come back as *Error
// before any event. The caller must Close the stream.
func (c *Client) RunCommand(ctx context.Context, t Target, req CommandRequest) (*CommandStream, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &Error{Kind: KindUnexpected, Message: "encoding the execd command failed"}
	}
	resp, err := c.doOK(ctx, t, http.MethodPost, "/command", "", http.Header{"Content-Type": {"application/json"}}, unsized(body))
	if err != nil {
		return nil, err
	}
	return newCommandStream(resp.Body), nil
}
