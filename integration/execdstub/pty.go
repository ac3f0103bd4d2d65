package execdstub

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/gorilla/websocket"
)

// PTY sessions (docs/wire-facts.md §X1.8): POST /pty, GET and DELETE
// /pty/{id}, GET /pty/{id}/ws. The stand-in has no terminal: the shell
// (bash --norc --noprofile, with -c and the command on HEAD) runs on pipes,
// its stdout and stderr merged into the one output channel as a terminal
// merges them, and every input byte is also written to the output, as a
// terminal's echo would. A resize is recorded (PTYSize) and otherwise
// ignored. The replay buffer keeps the last PTYReplayBytes of output.

// PTYReplayBytes is the replay buffer of a stand-in session (execd's is
// 1 MiB).
const PTYReplayBytes = 1 << 20

// codeContextNotFound is execd's code for an unknown PTY session.
const codeContextNotFound = "CONTEXT_NOT_FOUND"

// RawFrame is one WebSocket message the stand-in sends as it is
// (Config.PTYFrames).
type RawFrame struct {
	// Binary selects a binary message; else a text message.
	Binary bool
	// Data is the message.
	Data []byte
}

type ptySession struct {
	id, cwd, command string

	mu       sync.Mutex
	attached bool
	started  bool
	running  bool
	exitCode int
	done     chan struct{}
	stdin    io.WriteCloser
	pid      int
	replay   []byte // the last PTYReplayBytes of output
	total    int64
	sub      chan []byte // the attached connection's output; nil: none
	subDone  chan struct{}
	held     bool // output waits for the attached connection to take it
	cols     int
	rows     int
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *Server) ptySession(id string) *ptySession {
	s.ptyMu.Lock()
	defer s.ptyMu.Unlock()
	return s.ptys[id]
}

// handleCreatePTY answers POST /pty {"cwd","command"} with 201
// {"session_id"}; v1.0.18 ignores command. A missing cwd is created.
func (s *Server) handleCreatePTY(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	var req struct {
		Cwd     string `json:"cwd"`
		Command string `json:"command"`
	}
	if b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20)); len(b) > 0 {
		if err := json.Unmarshal(b, &req); err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "error parsing request: "+err.Error())
			return
		}
	}
	cwd := ""
	if req.Cwd != "" {
		cwd = s.HostPath(req.Cwd)
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			writeError(w, http.StatusInternalServerError, CodeRuntimeError, "error creating pty session: "+err.Error())
			return
		}
	}
	ps := &ptySession{id: newSessionID(), cwd: cwd, exitCode: -1}
	if !s.v1018 {
		ps.command = req.Command
	}
	s.ptyMu.Lock()
	if s.ptys == nil {
		s.ptys = map[string]*ptySession{}
	}
	s.ptys[ps.id] = ps
	s.ptyMu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]string{"session_id": ps.id})
}

// handlePTYStatus answers GET /pty/{id}.
func (s *Server) handlePTYStatus(w http.ResponseWriter, _ *http.Request, p map[string]string) {
	ps := s.ptySession(p["id"])
	if ps == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "pty session "+p["id"]+" not found")
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"session_id": ps.id, "running": ps.running, "output_offset": ps.total})
}

// handleDeletePTY answers DELETE /pty/{id}: SIGKILL to the shell's group.
func (s *Server) handleDeletePTY(w http.ResponseWriter, _ *http.Request, p map[string]string) {
	s.ptyMu.Lock()
	ps := s.ptys[p["id"]]
	delete(s.ptys, p["id"])
	s.ptyMu.Unlock()
	if ps == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "pty session "+p["id"]+" not found")
		return
	}
	ps.mu.Lock()
	if ps.running && ps.pid > 0 {
		_ = killGroup(ps.pid, sigKill)
	}
	ps.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// PTYSize returns the last size a resize frame set on session id (0, 0:
// none).
func (s *Server) PTYSize(id string) (cols, rows int) {
	ps := s.ptySession(id)
	if ps == nil {
		return 0, 0
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.cols, ps.rows
}

// PTYOutput reports session id's output so far (bytes) and whether the
// shell's output is waiting for the attached connection to take the next
// chunk (its WebSocket is not being read).
func (s *Server) PTYOutput(id string) (total int64, held bool) {
	ps := s.ptySession(id)
	if ps == nil {
		return 0, false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.total, ps.held
}

// PTYSessions returns the ids of the sessions the stand-in keeps.
func (s *Server) PTYSessions() []string {
	s.ptyMu.Lock()
	defer s.ptyMu.Unlock()
	var ids []string
	for id := range s.ptys {
		ids = append(ids, id)
	}
	return ids
}

// start runs the shell; ps.mu is held.
func (s *Server) startPTY(ps *ptySession) error {
	args := []string{"--norc", "--noprofile"}
	if ps.command != "" {
		args = append(args, "-c", ps.command)
	}
	cmd := exec.Command("bash", args...)
	cmd.Dir = ps.cwd
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = inR.Close()
		_ = inW.Close()
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, outW
	if err := cmd.Start(); err != nil {
		_ = inR.Close()
		_ = inW.Close()
		_ = outR.Close()
		_ = outW.Close()
		return err
	}
	_ = inR.Close()
	_ = outW.Close()
	ps.started, ps.running, ps.pid, ps.stdin = true, true, cmd.Process.Pid, inW
	ps.done = make(chan struct{})
	s.running.Add(1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				ps.output(append([]byte(nil), buf[:n]...))
			}
			if err != nil {
				_ = outR.Close()
				return
			}
		}
	}()
	go func() {
		defer s.running.Done()
		_ = cmd.Wait()
		<-readDone
		_ = inW.Close()
		ps.mu.Lock()
		ps.running, ps.pid = false, 0
		ps.exitCode = cmd.ProcessState.ExitCode()
		ps.mu.Unlock()
		close(ps.done)
	}()
	return nil
}

// output keeps b for replay and hands it to the attached connection,
// waiting for it (a slow connection holds the shell's output).
func (ps *ptySession) output(b []byte) {
	ps.mu.Lock()
	ps.replay = append(ps.replay, b...)
	if over := len(ps.replay) - PTYReplayBytes; over > 0 {
		ps.replay = append([]byte(nil), ps.replay[over:]...)
	}
	ps.total += int64(len(b))
	sub, subDone := ps.sub, ps.subDone
	ps.held = sub != nil
	ps.mu.Unlock()
	if sub != nil {
		select {
		case sub <- b:
		case <-subDone:
		}
		ps.mu.Lock()
		ps.held = false
		ps.mu.Unlock()
	}
}

// handlePTYWebSocket serves GET /pty/{id}/ws as execd does: 404 for an
// unknown session and 409 for one with a connection, before the upgrade;
// then the shell starts if it is not running, the replay from ?since=
// (default 0) goes first as a 0x03 frame, then the connected frame, the
// Config.PTYFrames, output as 0x01 frames, and the exit frame and a close
// when the shell ends.
func (s *Server) handlePTYWebSocket(w http.ResponseWriter, r *http.Request, p map[string]string) {
	ps := s.ptySession(p["id"])
	if ps == nil {
		writeError(w, http.StatusNotFound, codeContextNotFound, "pty session "+p["id"]+" not found")
		return
	}
	ps.mu.Lock()
	if ps.attached {
		ps.mu.Unlock()
		writeError(w, http.StatusConflict, "ALREADY_CONNECTED", "another client is already connected to pty session "+ps.id)
		return
	}
	ps.attached = true
	ps.mu.Unlock()
	defer func() {
		ps.mu.Lock()
		ps.attached = false
		ps.mu.Unlock()
	}()
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	sub, subDone := make(chan []byte), make(chan struct{})
	ps.mu.Lock()
	if !ps.running {
		if err := s.startPTY(ps); err != nil {
			ps.mu.Unlock()
			_ = conn.WriteJSON(map[string]string{"type": "error", "code": "START_FAILED", "error": err.Error()})
			return
		}
	}
	var snap []byte
	var snapOff int64
	if since < ps.total {
		oldest := ps.total - int64(len(ps.replay))
		snapOff = max(since, oldest)
		snap = append([]byte(nil), ps.replay[snapOff-oldest:]...)
	}
	ps.sub, ps.subDone = sub, subDone
	done := ps.done
	ps.mu.Unlock()
	defer func() {
		ps.mu.Lock()
		if ps.sub == sub {
			ps.sub, ps.subDone = nil, nil
		}
		ps.mu.Unlock()
		close(subDone)
	}()
	var wmu sync.Mutex
	write := func(mt int, b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.WriteMessage(mt, b)
	}
	if len(snap) > 0 {
		f := make([]byte, 9+len(snap))
		f[0] = 0x03
		binary.BigEndian.PutUint64(f[1:9], uint64(snapOff))
		copy(f[9:], snap)
		if write(websocket.BinaryMessage, f) != nil {
			return
		}
	}
	if write(websocket.TextMessage, []byte(`{"type":"connected","session_id":"`+ps.id+`","mode":"pty"}`)) != nil {
		return
	}
	for _, f := range s.cfg.PTYFrames {
		mt := websocket.TextMessage
		if f.Binary {
			mt = websocket.BinaryMessage
		}
		if write(mt, f.Data) != nil {
			return
		}
	}
	stop := make(chan struct{})
	var pumps sync.WaitGroup
	pumps.Add(1)
	go func() {
		defer pumps.Done()
		for {
			select {
			case b := <-sub:
				if write(websocket.BinaryMessage, append([]byte{0x01}, b...)) != nil {
					_ = conn.Close()
					return
				}
			case <-done:
				// What the shell wrote last was handed over before done.
				ps.mu.Lock()
				code := ps.exitCode
				ps.mu.Unlock()
				_ = write(websocket.TextMessage, []byte(`{"type":"exit","exit_code":`+strconv.Itoa(code)+`}`))
				_ = write(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "process exited"))
				_ = conn.Close()
				return
			case <-stop:
				return
			}
		}
	}()
	defer pumps.Wait()
	defer close(stop)
	for {
		mt, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		switch mt {
		case websocket.BinaryMessage:
			if len(data) == 0 || data[0] != 0x00 {
				continue
			}
			ps.mu.Lock()
			in := ps.stdin
			ps.mu.Unlock()
			if _, err := in.Write(data[1:]); err != nil {
				_ = write(websocket.TextMessage, []byte(`{"type":"error","code":"STDIN_WRITE_FAILED","error":"write failed"}`))
				return
			}
			ps.output(append([]byte(nil), data[1:]...)) // the terminal's echo
		case websocket.TextMessage:
			var f struct {
				Type       string
				Cols, Rows int
				Signal     string
			}
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			switch f.Type {
			case "resize":
				if f.Cols > 0 && f.Rows > 0 {
					ps.mu.Lock()
					ps.cols, ps.rows = f.Cols, f.Rows
					ps.mu.Unlock()
				}
			case "ping":
				_ = write(websocket.TextMessage, []byte(`{"type":"pong"}`))
			case "signal":
				sig := map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL,
					"SIGQUIT": syscall.SIGQUIT, "SIGHUP": syscall.SIGHUP}[f.Signal]
				ps.mu.Lock()
				if sig != 0 && ps.running && ps.pid > 0 {
					_ = killGroup(ps.pid, sig)
				}
				ps.mu.Unlock()
			default:
				_ = write(websocket.TextMessage, []byte(`{"type":"error","code":"INVALID_FRAME","error":"unknown frame type"}`))
			}
		}
	}
}
