// Package execdstub is an in-process stand-in for the Alibaba OpenSandbox
// execd daemon (the HTTP API on port 44772 inside every sandbox), for tests
// of the sandgate gateway.
//
// No registry serves execd, so this package reproduces the behaviour that
// docs/wire-facts.md (sections X1 and X3) measured on the
// real program, quirks included: the bare-JSON "SSE" stream of POST /command
// with its lazy header commit and trailing graceful-shutdown delay, stdout
// and stderr captured in files and polled, a client disconnect that does not
// kill the command, multipart uploads that need a metadata *file* part, the
// broken response for a directory download, and the v1.0.18 differences.
// Where the reference is silent the behaviour follows the execd source at
// the snapshot named in the sources table of docs/wire-facts.md (re-implemented, not copied); every such choice
// is documented on the identifier concerned.
//
// The sandbox filesystem "/" is a host directory (Config.Root). Sandbox path
// P maps to filepath.Join(Root, P) and every path the stub reports is a
// sandbox path. Commands, however, run directly on the host (there is no
// chroot), so inside a command `pwd` prints the host directory and absolute
// paths in the command text are host paths.
//
// Only these routes exist (docs/wire-facts.md §X1.3): GET /ping, POST and DELETE
// /command, GET /command/status/{id}, GET /command/{id}/logs, GET
// /files/info, DELETE /files, POST /files/upload, GET /files/download, GET
// /files/search, POST /files/mv, GET /directories/list (HEAD build only),
// POST and DELETE /directories, POST /pty, GET and DELETE /pty/{id}, GET
// /pty/{id}/ws (pty.go). Anything else answers like gin's default 404.
package execdstub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Versions of execd the stub can imitate (Config.Version). docs/wire-facts.md
// §X1.6 lists the differences between them.
const (
	// VersionHEAD is the execd at the reference snapshot: it has
	// GET /directories/list, FileInfo.type, Lstat-based /files/info, and a
	// 404 FILE_NOT_FOUND for a missing /files/info path.
	VersionHEAD = "HEAD"
	// Version1018 is the released docker/execd/v1.0.18: no
	// /directories/list (gin 404 "404 page not found"), no FileInfo.type,
	// Stat-based /files/info, and 500 RUNTIME_ERROR "error accessing file:
	// file not found: <path>" for a missing /files/info path.
	Version1018 = "v1.0.18"
)

// Wire names used by execd (docs/wire-facts.md §X1.2, §X1.4).
const (
	// AccessTokenHeader carries the access token; it is checked on every
	// route, unmatched ones included, when Config.AccessToken is set (§X1.2).
	AccessTokenHeader = "X-EXECD-ACCESS-TOKEN"
	// TailCursorHeader is the canonical wire form of the
	// EXECD-COMMANDS-TAIL-CURSOR header of GET /command/{id}/logs: the byte
	// offset to pass as ?cursor= next time (§X1.4).
	TailCursorHeader = "Execd-Commands-Tail-Cursor"
)

// Error codes of the {"code","message"} error body (docs/wire-facts.md §X1.3).
const (
	// CodeInvalidRequest: bad JSON or validation failure (400), and
	// unknown command ids (status 404, logs 400).
	CodeInvalidRequest = "INVALID_REQUEST_BODY"
	// CodeMissingQuery: a required query parameter is absent (400).
	CodeMissingQuery = "MISSING_QUERY"
	// CodeRuntimeError: a failure while serving the request (500).
	CodeRuntimeError = "RUNTIME_ERROR"
	// CodeInvalidFile: the upload is not a usable multipart form (400).
	CodeInvalidFile = "INVALID_FILE"
	// CodeInvalidFileContent: the upload has no "file" file part (400).
	CodeInvalidFileContent = "INVALID_FILE_CONTENT"
	// CodeInvalidFileMetadata: the upload's metadata file part is missing
	// or invalid (400).
	CodeInvalidFileMetadata = "INVALID_FILE_METADATA"
	// CodeFileNotFound: the path does not exist (404).
	CodeFileNotFound = "FILE_NOT_FOUND"
	// CodeUnknown: used for the 416 of a malformed Range header.
	CodeUnknown = "UNKNOWN"
)

// Config configures a Server. The zero value of every field except Root
// selects execd's default.
type Config struct {
	// Root is the host directory that stands for the sandbox filesystem
	// "/". Sandbox path P maps to filepath.Join(Root, P); paths reported
	// in responses are sandbox paths. Required; it must exist.
	Root string
	// AccessToken, when non-empty, must arrive verbatim in the
	// X-EXECD-ACCESS-TOKEN header of every request, else 401
	// {"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}
	// (§X1.2). Empty disables auth, as in a default K8s deployment.
	AccessToken string
	// GracefulShutdown is how long POST /command keeps the response open
	// after its last event (execd's --graceful-shutdown-timeout, §X1.4).
	// 0 selects execd's default of 1s; a negative value means no delay.
	// Close cuts the delay short.
	GracefulShutdown time.Duration
	// PingInterval is the period of the {"type":"ping","text":"pong"}
	// keep-alive events (§X1.4). 0 selects 3s. The first ping is always
	// written right after init.
	PingInterval time.Duration
	// PollInterval is how often the stdout/stderr capture files are polled
	// for new lines (§X1.4). 0 selects execd's 100ms.
	PollInterval time.Duration
	// KillGrace is how long DELETE /command waits for the process group to
	// exit after SIGTERM before sending SIGKILL (§X1.3). 0 selects 3s.
	KillGrace time.Duration
	// Version selects the imitated execd build: VersionHEAD ("" too) or
	// Version1018.
	Version string
	// TempDir is where the per-command capture files <id>.stdout,
	// <id>.stderr and <id>.output go (execd uses $TMPDIR, §X1.1). Empty:
	// New creates a private directory that Close removes.
	TempDir string
	// Home is the sandbox path a leading "~" in a request path expands to
	// (execd expands "~" to its user's home), and commands get its host
	// directory as HOME. Empty selects "/root".
	Home string
	// Hostile, when set, makes the Server answer the gateway's JSON reads
	// as code in the sandbox standing in for execd can (see Hostile).
	Hostile *Hostile
	// DirectoriesOnTmpfs makes a download of a directory answer as execd
	// does where the directory lives on tmpfs, which cannot seek it: 500
	// text/plain "seeker can't seek" (default false: ext4's broken 200,
	// docs/wire-facts.md §X1.5).
	DirectoriesOnTmpfs bool
	// PTYFrames are sent as they are on every PTY WebSocket, right after
	// its connected frame (messages execd is not documented to send, for
	// the gateway's tests).
	PTYFrames []RawFrame
}

// Server is the execd stand-in. It is an http.Handler; serve it with
// httptest.NewServer or any http.Server bound to 127.0.0.1. Create it with
// New and stop it with Close.
type Server struct {
	cfg     Config
	root    string
	tmpDir  string
	ownTmp  bool
	grace   time.Duration
	ping    time.Duration
	poll    time.Duration
	kill    time.Duration
	v1018   bool
	routes  []route
	closed  chan struct{}
	closeMu sync.Once

	mu      sync.Mutex
	cmds    map[string]*command
	order   []string
	changed chan struct{}
	running sync.WaitGroup

	ptyMu sync.Mutex
	ptys  map[string]*ptySession
}

// New returns a Server for cfg. It panics if cfg.Root is empty or not a
// directory, if cfg.Version is unknown, or if the private temp directory
// cannot be created: these are test-setup mistakes.
func New(cfg Config) *Server {
	if cfg.Root == "" {
		panic("execdstub: Config.Root is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		panic(fmt.Sprintf("execdstub: Config.Root: %v", err))
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		panic(fmt.Sprintf("execdstub: Config.Root %q is not a directory (%v)", root, err))
	}
	s := &Server{
		cfg:     cfg,
		root:    filepath.Clean(root),
		grace:   pick(cfg.GracefulShutdown, time.Second),
		ping:    pick(cfg.PingInterval, 3*time.Second),
		poll:    pick(cfg.PollInterval, 100*time.Millisecond),
		kill:    pick(cfg.KillGrace, 3*time.Second),
		closed:  make(chan struct{}),
		cmds:    make(map[string]*command),
		changed: make(chan struct{}),
	}
	if s.grace < 0 {
		s.grace = 0
	}
	switch cfg.Version {
	case "", VersionHEAD:
	case Version1018:
		s.v1018 = true
	default:
		panic(fmt.Sprintf("execdstub: unknown Config.Version %q", cfg.Version))
	}
	if s.cfg.Home == "" {
		s.cfg.Home = "/root"
	}
	if cfg.TempDir != "" {
		s.tmpDir = cfg.TempDir
	} else {
		dir, err := os.MkdirTemp("", "execdstub-")
		if err != nil {
			panic(fmt.Sprintf("execdstub: temp dir: %v", err))
		}
		s.tmpDir, s.ownTmp = dir, true
	}
	s.routes = s.buildRoutes()
	return s
}

func pick(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Root returns the absolute host directory that stands for sandbox "/".
func (s *Server) Root() string { return s.root }

// HostPath maps a sandbox path to the host path the stub uses for it: a
// relative path is taken relative to sandbox "/", and ".." cannot climb
// above Root.
func (s *Server) HostPath(sandboxPath string) string {
	return filepath.Join(s.root, sandboxAbs(sandboxPath))
}

// Close kills (SIGKILL to the process group) every command still running,
// waits for them to be reaped, cuts short any graceful-shutdown delay, and
// removes the private temp directory. It is safe to call more than once.
// Close the Server before the http server that serves it: an open
// /command stream holds its handler until the command ends.
func (s *Server) Close() {
	s.closeMu.Do(func() {
		close(s.closed)
		s.mu.Lock()
		for _, c := range s.cmds {
			if c.rec.Running && c.pid > 0 {
				killGroup(c.pid, sigKill)
			}
		}
		s.mu.Unlock()
		s.ptyMu.Lock()
		for _, ps := range s.ptys {
			ps.mu.Lock()
			if ps.running && ps.pid > 0 {
				killGroup(ps.pid, sigKill)
			}
			ps.mu.Unlock()
		}
		s.ptyMu.Unlock()
		s.running.Wait()
		if s.ownTmp {
			_ = os.RemoveAll(s.tmpDir)
		}
	})
}

// route is one method+path of the router; segments starting with ':' match
// any non-empty segment and are passed to h by name.
type route struct {
	method string
	segs   []string
	h      func(w http.ResponseWriter, r *http.Request, params map[string]string)
}

func (s *Server) buildRoutes() []route {
	rs := []route{
		{http.MethodGet, split("/ping"), s.handlePing},
		{http.MethodPost, split("/command"), s.handleRunCommand},
		{http.MethodDelete, split("/command"), s.handleInterrupt},
		// Static "status" wins over the :id segment, as in gin's tree.
		{http.MethodGet, split("/command/status/:id"), s.handleCommandStatus},
		{http.MethodGet, split("/command/:id/logs"), s.handleCommandLogs},
		{http.MethodDelete, split("/files"), s.handleRemoveFiles},
		{http.MethodGet, split("/files/info"), s.handleFilesInfo},
		{http.MethodGet, split("/files/search"), s.handleSearchFiles},
		{http.MethodPost, split("/files/mv"), s.handleRenameFiles},
		{http.MethodPost, split("/files/upload"), s.handleUpload},
		{http.MethodGet, split("/files/download"), s.handleDownload},
		{http.MethodPost, split("/directories"), s.handleMakeDirs},
		{http.MethodDelete, split("/directories"), s.handleRemoveDirs},
		{http.MethodPost, split("/pty"), s.handleCreatePTY},
		{http.MethodGet, split("/pty/:id"), s.handlePTYStatus},
		{http.MethodDelete, split("/pty/:id"), s.handleDeletePTY},
		{http.MethodGet, split("/pty/:id/ws"), s.handlePTYWebSocket},
	}
	if !s.v1018 {
		rs = append(rs, route{http.MethodGet, split("/directories/list"), s.handleListDirectory})
	}
	return rs
}

func split(p string) []string { return strings.Split(strings.TrimPrefix(p, "/"), "/") }

func (s *Server) match(method, p string) (*route, map[string]string) {
	segs := split(p)
	for i := range s.routes {
		rt := &s.routes[i]
		if rt.method != method || len(rt.segs) != len(segs) {
			continue
		}
		params := map[string]string{}
		ok := true
		for j, want := range rt.segs {
			if strings.HasPrefix(want, ":") {
				if segs[j] == "" {
					ok = false
					break
				}
				params[want[1:]] = segs[j]
				continue
			}
			if want != segs[j] {
				ok = false
				break
			}
		}
		if ok {
			return rt, params
		}
	}
	return nil, nil
}

// ServeHTTP routes like execd's gin engine: an unmatched path that matches
// a route once a trailing slash is added or removed is redirected (301 for
// GET, 307 otherwise) before any middleware runs; then the access token is
// checked (on every route, unmatched ones included); then an unmatched
// request gets gin's 404 "404 page not found" as text/plain. HEAD and other
// unrouted methods are 404, never 405 (§X1.3).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	rt, params := s.match(r.Method, p)
	if rt == nil && p != "/" {
		alt := p + "/"
		if strings.HasSuffix(p, "/") {
			alt = strings.TrimSuffix(p, "/")
		}
		if other, _ := s.match(r.Method, alt); other != nil {
			u := *r.URL
			u.Path, u.RawPath = alt, ""
			code := http.StatusMovedPermanently
			if r.Method != http.MethodGet {
				code = http.StatusTemporaryRedirect
			}
			http.Redirect(w, r, u.String(), code)
			return
		}
	}
	if s.cfg.AccessToken != "" {
		if got := r.Header.Get(AccessTokenHeader); got == "" || got != s.cfg.AccessToken {
			writeJSON(w, http.StatusUnauthorized, map[string]any{
				"error": "Unauthorized: invalid or missing header " + AccessTokenHeader,
			})
			return
		}
	}
	if s.serveHostile(w, r) {
		return
	}
	if rt == nil {
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("404 page not found"))
		return
	}
	rt.h(w, r, params)
}

// handlePing answers GET /ping with 200 and an empty body (§X1.3).
func (s *Server) handlePing(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
	w.WriteHeader(http.StatusOK)
}

// errorBody is execd's error shape (§X1.3).
type errorBody struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// writeJSON renders v like gin's c.JSON: a Content-Type already set on w is
// kept, the body is json.Marshal output without a trailing newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	if len(w.Header()["Content-Type"]) == 0 {
		w.Header()["Content-Type"] = []string{"application/json; charset=utf-8"}
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Code: code, Message: message})
}

// queryFirst is gin's c.Query: the first value, or "".
func queryFirst(q url.Values, key string) string {
	if v := q[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
