package execd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// execd's PTY sessions (docs/wire-facts.md §X1.8): POST /pty creates one,
// GET /pty/{id} reports it, DELETE /pty/{id} kills its shell's process
// group and forgets it, and GET /pty/{id}/ws attaches the one WebSocket a
// session allows; the shell starts with the first one.

// PTYSession is execd's answer to GET /pty/{id}.
type PTYSession struct {
	// SessionID is the session's id (a UUID).
	SessionID string `json:"session_id"`
	// Running reports that the session's shell is running: false before
	// the first WebSocket started it and after it ended.
	Running bool `json:"running"`
	// OutputOffset is how many bytes of output the shell has written in
	// all (the offset a replay from "now" starts at).
	OutputOffset int64 `json:"output_offset"`
}

// ptyAnswerLimit bounds execd's answers to POST /pty and GET /pty/{id}
// (bytes): a UUID, a boolean and a number.
const ptyAnswerLimit = 4 << 10

// ValidPTYSessionID reports whether id is a session id as execd makes
// them: a UUID in its canonical lowercase form (8-4-4-4-12 hex digits).
func ValidPTYSessionID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// notFoundPTY turns execd's 404 CONTEXT_NOT_FOUND for a PTY session into
// KindNotFound.
func notFoundPTY(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Kind == KindExecd && e.Status == http.StatusNotFound {
		e.Kind = KindNotFound
	}
	return err
}

// CreatePTY calls POST /pty with cwd and command (both optional; execd
// HEAD runs `bash --norc --noprofile -c command` when command is set,
// v1.0.18 ignores it and runs the bash alone) and returns the session id.
// The shell does not start until the first WebSocket (DialPTY). execd
// creates cwd when it is missing. An answer that names no valid session id
// is an *Error with KindUnexpected.
func (c *Client) CreatePTY(ctx context.Context, t Target, cwd, command string) (string, error) {
	body, err := json.Marshal(struct {
		Cwd     string `json:"cwd,omitempty"`
		Command string `json:"command,omitempty"`
	}{cwd, command})
	if err != nil {
		return "", &Error{Kind: KindUnexpected, Message: "encoding the execd PTY request failed"}
	}
	resp, err := c.doOK(ctx, t, http.MethodPost, "/pty", "", http.Header{"Content-Type": {"application/json"}}, unsized(body))
	if err != nil {
		return "", err
	}
	// execd answers an internal failure with its error body and then,
	// in the same body, the created answer (201 already sent as 500): a
	// body that is not one JSON object is refused below.
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := decodeJSON(resp, &out, ptyAnswerLimit, "a PTY create request"); err != nil {
		return "", err
	}
	if !ValidPTYSessionID(out.SessionID) {
		return "", &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "execd's PTY create answer names no valid session id"}
	}
	return out.SessionID, nil
}

// PTYStatus calls GET /pty/{id}. A session execd does not know is an
// *Error with KindNotFound.
func (c *Client) PTYStatus(ctx context.Context, t Target, id string) (PTYSession, error) {
	resp, err := c.unaryOK(ctx, t, http.MethodGet, "/pty/"+url.PathEscape(id), "")
	if err != nil {
		return PTYSession{}, notFoundPTY(err)
	}
	var st PTYSession
	if err := decodeJSON(resp, &st, ptyAnswerLimit, "a PTY status request"); err != nil {
		return PTYSession{}, err
	}
	if st.OutputOffset < 0 {
		return PTYSession{}, &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "execd reported a negative PTY output offset"}
	}
	return st, nil
}

// DeletePTY calls DELETE /pty/{id}: execd sends SIGKILL to the shell's
// process group, closes the terminal and forgets the session. A session
// execd does not know is an *Error with KindNotFound.
func (c *Client) DeletePTY(ctx context.Context, t Target, id string) error {
	resp, err := c.unaryOK(ctx, t, http.MethodDelete, "/pty/"+url.PathEscape(id), "")
	if err != nil {
		return notFoundPTY(err)
	}
	drain(resp)
	return nil
}

// PTY WebSocket bounds.
const (
	// MaxPTYFrameBytes bounds one WebSocket message read from execd
	// (bytes): execd's largest is a replay, its 1 MiB buffer with a
	// 9-byte header; a larger message fails the connection.
	MaxPTYFrameBytes = 1<<20 + 64
	// maxPTYTextFrame bounds a JSON frame (bytes): execd's are under 200.
	maxPTYTextFrame = 4 << 10
	// ptyWriteTimeout bounds one write to the WebSocket.
	ptyWriteTimeout = 10 * time.Second
	// ptyHandshakeTimeout bounds the WebSocket handshake.
	ptyHandshakeTimeout = 30 * time.Second
)

// ErrPTYAttached is wrapped by DialPTY's error when execd answers 409:
// another WebSocket holds the session (execd allows one at a time).
var ErrPTYAttached = errors.New("execd: another WebSocket is attached to the PTY session")

// PTYConn is one WebSocket to an execd PTY session (GET /pty/{id}/ws in
// PTY mode). Next reads frames (one goroutine at a time); SendInput,
// Resize, Signal and Ping may be called from any goroutine.
type PTYConn struct {
	ws      *websocket.Conn
	writeMu sync.Mutex
	closed  sync.Once
}

// DialPTY opens the session's WebSocket with since (a replay of the
// output from that byte offset; execd's default, 0, replays all it kept,
// so callers always pass one). It starts the session's shell when it is
// not running: callers check PTYStatus first where that matters. The
// execd access token is sent as on every call, and reaches execd through
// the OpenSandbox Ingress (upgradeConn). A session execd does not
// know is KindNotFound; a session another WebSocket holds is an *Error
// with KindExecd and status 409 that wraps ErrPTYAttached.
func (c *Client) DialPTY(ctx context.Context, t Target, id string, since int64) (*PTYConn, error) {
	u := t.url("/pty/"+url.PathEscape(id)+"/ws", url.Values{"since": {strconv.FormatInt(since, 10)}}.Encode())
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	hdr := http.Header{}
	if t.Host != "" {
		hdr.Set("Host", t.Host)
	}
	if t.AccessToken != "" {
		hdr.Set(AccessTokenHeader, t.AccessToken)
	}
	hdr["User-Agent"] = userAgent
	var nd net.Dialer
	d := websocket.Dialer{HandshakeTimeout: ptyHandshakeTimeout, ReadBufferSize: 32 << 10, WriteBufferSize: 4 << 10,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := nd.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &upgradeConn{Conn: c}, nil
		},
		NetDialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			td := tls.Dialer{NetDialer: &nd, Config: &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}}
			c, err := td.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &upgradeConn{Conn: c}, nil
		}}
	ws, resp, err := d.DialContext(ctx, u.String(), hdr)
	if err != nil {
		if resp != nil {
			// gorilla keeps at most 1 KiB of a refused handshake's body.
			if resp.StatusCode == http.StatusSwitchingProtocols {
				_ = resp.Body.Close()
				return nil, &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "execd's PTY WebSocket handshake is not valid"}
			}
			e := responseError(resp)
			if e.Status == http.StatusConflict && e.Kind == KindExecd {
				return nil, &ptyAttachedError{e: e}
			}
			return nil, notFoundPTY(e)
		}
		return nil, transportError(ctx, err)
	}
	ws.SetReadLimit(MaxPTYFrameBytes)
	return &PTYConn{ws: ws}, nil
}

// upgradeConn sends the WebSocket handshake with "Connection: upgrade"
// where gorilla writes "Connection: Upgrade" (the same bytes otherwise).
// The OpenSandbox Ingress relays an upgrade whose Connection is exactly
// "Upgrade" through its own WebSocket client, which drops every header but
// a few, X-EXECD-ACCESS-TOKEN included; any other upgrade it tunnels with
// all headers, byte for byte (docs/wire-facts.md §X2.5). execd, like every
// WebSocket server, reads the token case-insensitively.
type upgradeConn struct {
	net.Conn
	sent bool
}

func (c *upgradeConn) Write(b []byte) (int, error) {
	if !c.sent {
		c.sent = true
		if i := bytes.Index(b, []byte("\r\nConnection: Upgrade\r\n")); i >= 0 && bytes.Index(b, []byte("\r\n\r\n")) > i {
			fixed := append([]byte(nil), b...)
			copy(fixed[i+len("\r\nConnection: "):], "upgrade")
			return c.Conn.Write(fixed)
		}
	}
	return c.Conn.Write(b)
}

// ptyAttachedError is execd's 409 on a PTY WebSocket; it is an *Error and
// wraps ErrPTYAttached.
type ptyAttachedError struct{ e *Error }

func (e *ptyAttachedError) Error() string   { return e.e.Error() }
func (e *ptyAttachedError) Unwrap() []error { return []error{e.e, ErrPTYAttached} }

// PTYFrameKind says what a frame from execd carries.
type PTYFrameKind int

// The frames execd sends on a PTY WebSocket (docs/wire-facts.md §X1.8).
const (
	// PTYOutput is terminal output (binary, channel 0x01).
	PTYOutput PTYFrameKind = iota + 1
	// PTYReplay is output kept from before the connection (binary,
	// channel 0x03 with the big-endian int64 offset of its first byte).
	PTYReplay
	// PTYConnected is the JSON {"type":"connected"} frame.
	PTYConnected
	// PTYExit is the JSON {"type":"exit","exit_code":N} frame: the shell
	// ended with N (-1: a signal killed it).
	PTYExit
	// PTYPong answers a ping frame.
	PTYPong
	// PTYFailure is the JSON {"type":"error"} frame: Code and Message.
	PTYFailure
)

// PTYFrame is one parsed frame from execd.
type PTYFrame struct {
	// Kind says which frame it is.
	Kind PTYFrameKind
	// Data is the output of PTYOutput and PTYReplay (it aliases the
	// message read).
	Data []byte
	// Offset is the output offset of a PTYReplay's first byte.
	Offset int64
	// ExitCode is PTYExit's exit code.
	ExitCode int
	// Code and Message are PTYFailure's execd error code and text.
	Code, Message string
}

// ParsePTYFrame parses one WebSocket message execd sent on a PTY session
// in PTY mode: binary is the message type. Anything else than the frames
// of PTYFrameKind is an *Error with KindUnexpected saying what: an empty
// binary frame, a channel other than 0x01 and 0x03 (0x02 is pipe mode's
// stderr, which the gateway never asks for), a replay shorter than its
// header or with a negative offset, a JSON frame over 4 KiB, not an
// object, of an unknown type, or an exit frame without an integer
// exit_code.
func ParsePTYFrame(binaryFrame bool, data []byte) (PTYFrame, error) {
	bad := func(msg string) (PTYFrame, error) {
		return PTYFrame{}, &Error{Kind: KindUnexpected, Message: "execd's PTY WebSocket sent " + msg}
	}
	if binaryFrame {
		if len(data) == 0 {
			return bad("an empty binary frame")
		}
		switch data[0] {
		case 0x01:
			return PTYFrame{Kind: PTYOutput, Data: data[1:]}, nil
		case 0x03:
			if len(data) < 9 {
				return bad("a replay frame shorter than its 9-byte header")
			}
			off := int64(binary.BigEndian.Uint64(data[1:9]))
			if off < 0 {
				return bad("a replay frame with a negative offset")
			}
			return PTYFrame{Kind: PTYReplay, Data: data[9:], Offset: off}, nil
		}
		return bad("a binary frame on channel " + strconv.Itoa(int(data[0])))
	}
	if len(data) > maxPTYTextFrame {
		return bad("a JSON frame over " + strconv.Itoa(maxPTYTextFrame) + " bytes")
	}
	var f struct {
		Type     string          `json:"type"`
		ExitCode json.RawMessage `json:"exit_code"`
		Error    string          `json:"error"`
		Code     string          `json:"code"`
	}
	if json.Unmarshal(data, &f) != nil {
		return bad("a text frame that is not a JSON object")
	}
	switch f.Type {
	case "connected":
		return PTYFrame{Kind: PTYConnected}, nil
	case "pong":
		return PTYFrame{Kind: PTYPong}, nil
	case "error":
		return PTYFrame{Kind: PTYFailure, Code: truncated(f.Code, 64), Message: truncated(f.Error, 256)}, nil
	case "exit":
		n, err := strconv.ParseInt(string(f.ExitCode), 10, 32)
		if err != nil {
			return bad("an exit frame without an integer exit_code")
		}
		return PTYFrame{Kind: PTYExit, ExitCode: int(n)}, nil
	}
	return bad("a JSON frame of an unknown type")
}

func truncated(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Next reads and parses the next frame (ParsePTYFrame); ping, pong and
// close control frames are handled by the WebSocket. A clean close by
// execd is ErrPTYClosed, a message over MaxPTYFrameBytes an *Error with
// KindUnexpected (the connection is then unusable), any other read
// failure an *Error with KindUnreachable.
func (p *PTYConn) Next() (PTYFrame, error) {
	for {
		mt, data, err := p.ws.ReadMessage()
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				return PTYFrame{}, &Error{Kind: KindUnexpected, Message: "execd's PTY WebSocket sent a message over " + strconv.Itoa(MaxPTYFrameBytes) + " bytes"}
			case websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway):
				return PTYFrame{}, ErrPTYClosed
			}
			return PTYFrame{}, &Error{Kind: KindUnreachable, Message: "the PTY WebSocket to execd broke"}
		}
		if mt != websocket.BinaryMessage && mt != websocket.TextMessage {
			continue
		}
		return ParsePTYFrame(mt == websocket.BinaryMessage, data)
	}
}

// ErrPTYClosed is Next's error once execd closed the WebSocket cleanly.
var ErrPTYClosed = errors.New("execd: the PTY WebSocket was closed")

func (p *PTYConn) write(mt int, b []byte) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	_ = p.ws.SetWriteDeadline(time.Now().Add(ptyWriteTimeout))
	if err := p.ws.WriteMessage(mt, b); err != nil {
		return &Error{Kind: KindUnreachable, Message: "writing to the PTY WebSocket to execd failed"}
	}
	return nil
}

// SendInput writes b to the terminal (a binary frame on channel 0x00).
func (p *PTYConn) SendInput(b []byte) error {
	msg := make([]byte, 1+len(b))
	copy(msg[1:], b)
	return p.write(websocket.BinaryMessage, msg)
}

// Resize sets the terminal's size; execd ignores a zero cols or rows.
func (p *PTYConn) Resize(cols, rows uint16) error {
	return p.write(websocket.TextMessage, []byte(`{"type":"resize","cols":`+strconv.Itoa(int(cols))+`,"rows":`+strconv.Itoa(int(rows))+`}`))
}

// Signal sends a signal by name (SIGINT, SIGTERM, SIGKILL, SIGQUIT,
// SIGHUP) to the shell's process group; execd ignores other names.
func (p *PTYConn) Signal(name string) error {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Signal string `json:"signal"`
	}{"signal", name})
	return p.write(websocket.TextMessage, b)
}

// Ping sends a {"type":"ping"} frame; execd answers pong once it has
// handled every frame sent before it (it reads them in order).
func (p *PTYConn) Ping() error {
	return p.write(websocket.TextMessage, []byte(`{"type":"ping"}`))
}

// Close closes the WebSocket (a close frame, then the connection); the
// session's shell keeps running. It is safe to call more than once.
func (p *PTYConn) Close() {
	p.closed.Do(func() {
		p.writeMu.Lock()
		_ = p.ws.SetWriteDeadline(time.Now().Add(time.Second))
		_ = p.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		p.writeMu.Unlock()
		_ = p.ws.Close()
	})
}

// PTYTakesCommand reports whether execd runs POST /pty's command (HEAD)
// or ignores it (v1.0.18). execd has no version route; the two builds
// the gateway knows differ in GET /directories/list too, which HEAD has
// (it answers this bodyless probe with a 400 for its missing query) and
// v1.0.18 answers with gin's 404 "404 page not found". Failures to reach
// execd are returned as they are.
func (c *Client) PTYTakesCommand(ctx context.Context, t Target) (bool, error) {
	resp, err := t.admitted(c.do(ctx, c.unary(), t, http.MethodGet, "/directories/list", "", nil, nil, -1))
	if err != nil {
		return false, err
	}
	if err := CheckResponse(resp); err != nil {
		var e *Error
		if errors.As(err, &e) && (e.Kind == KindExecd || e.Kind == KindNotFound) {
			return true, nil
		}
		if errors.As(err, &e) && e.Kind == KindNoRoute {
			return false, nil
		}
		return false, err
	}
	drain(resp)
	return true, nil
}
