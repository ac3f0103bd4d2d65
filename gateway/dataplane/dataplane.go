// Package dataplane is sandgate's E2B data plane: it serves the envd
// operations the official E2B SDKs call on the fixed address
// http://<portal>:30083, checks who may call them, and translates them into
// the OpenSandbox execd API behind the credential's compute cluster's fixed
// entry (spec §3.3, §4.3; docs/dataplane.md, docs/wire-facts.md).
//
// Every request passes the checks in this order (spec §3.3):
//
//  1. operation and method: one of the six supported operations, else
//     Connect unimplemented (or 404 for envd-internal and unknown routes);
//  2. E2b-Sandbox-Id present and a DNS-1123 label, E2b-Sandbox-Port exactly
//     49983 (a logical service name, never a TCP port);
//  3. X-Access-Token: signature, pinned algorithm, expiry;
//  4. the token's claims (sandbox ID, logical port) equal the request target;
//  5. the resource credential named by the token is re-read and enabled;
//  6. the credential's ClusterID selects the cluster, and so its fixed entry;
//  7. when an authorizer is configured (Deps.Authorizer, package
//     authorizer), the token's credential must still reach the sandbox: it
//     exists, the credential created it (or is project-wide), it is not
//     being deleted and has not expired.
//
// The sandbox ID never selects a cluster; there is no pod-IP fallback and no
// cross-cluster search. Each failure has a stable Code (see errors.go).
package dataplane

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/connect"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/drain"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	"github.com/sandgate/sandgate/gateway/token"
)

// Routing headers the SDKs send (docs/wire-facts.md §E1.2).
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	HeaderAccessToken = "X-Access-Token"
)

// EnvdPort is the logical envd service the SDKs name in E2b-Sandbox-Port.
const EnvdPort = 49983

// Operation names, used in metrics, logs and error messages.
const (
	OpProcessStart = "process.Start"
	OpFilesRead    = "files.read"
	OpFilesWrite   = "files.write"
	OpFilesDelete  = "files.delete"
	OpListDir      = "filesystem.ListDir"
	OpRemove       = "filesystem.Remove"
	OpHealth       = "health"

	// With Config.ExtendedOperations.
	OpProcessList       = "process.List"
	OpProcessConnect    = "process.Connect"
	OpProcessSendSignal = "process.SendSignal"
	OpProcessSendInput  = "process.SendInput"
	OpProcessUpdate     = "process.Update"
	OpProcessCloseStdin = "process.CloseStdin"
	OpWatchDir          = "filesystem.WatchDir"
	OpCreateWatcher     = "filesystem.CreateWatcher"
	OpGetWatcherEvents  = "filesystem.GetWatcherEvents"
	OpRemoveWatcher     = "filesystem.RemoveWatcher"
	OpStat              = "filesystem.Stat"
	OpMakeDir           = "filesystem.MakeDir"
	OpMove              = "filesystem.Move"
)

// Config is the data plane's behaviour. The zero value of each field means
// its documented default.
type Config struct {
	// HomeDir resolves relative paths and is the default working directory
	// of commands when the user has no Home. Default "/home/user", the E2B
	// default user's home.
	HomeDir string
	// Users maps user names to identities. A name the SDK sends that is not
	// here is refused with USER_UNKNOWN (invalid_argument).
	Users map[string]User
	// DefaultUser is the user assumed when the SDK names none (envd ≥ 0.4.0
	// sends no user by default). Empty means commands run as execd's own
	// identity and files get execd's ownership.
	DefaultUser string
	// KeepaliveInterval is the keepalive period of Process/Start streams when
	// the request has no valid Keepalive-Ping-Interval header. Default 90 s,
	// envd's default.
	KeepaliveInterval time.Duration
	// MaxMessageBytes bounds a Connect request message (bytes). Default 4 MiB.
	MaxMessageBytes uint32
	// MaxDecompressedBytes bounds what one gzip-encoded file write
	// (Content-Encoding: gzip) may decompress to, in bytes; more is refused
	// with WRITE_TOO_LARGE (507, the SDKs' NotEnoughSpaceError) and nothing
	// is written. Default DefaultMaxDecompressedBytes (1 GiB).
	MaxDecompressedBytes int64
	// MaxDecompressionRatio bounds the decompressed bytes of a gzip write
	// per compressed byte, checked past DecompressionRatioFloor (16 MiB);
	// more is refused like MaxDecompressedBytes. Default
	// DefaultMaxDecompressionRatio (100).
	MaxDecompressionRatio int64
	// TokenTarget, when true, lets a request that carries neither
	// E2b-Sandbox-Id nor E2b-Sandbox-Port take its target from the verified
	// token (Python SDK 2.24 Sandbox.connect() sends no routing headers).
	// Default false. See README "Routing without headers".
	TokenTarget bool
	// ExtendedOperations, when true, also serves the envd operations that
	// manage processes which outlive their stream and the filesystem
	// reads/changes beyond spec §3.3's six: Process List, Connect,
	// SendSignal, SendInput (a PTY's terminal input, or the stdin of a
	// process started with stdin: true), CloseStdin and Update on PTY
	// processes (StreamInput is answered unsupported), Filesystem Stat,
	// MakeDir, Move, WatchDir and the watchers (CreateWatcher,
	// GetWatcherEvents, RemoveWatcher), by listing the directory
	// (docs/dataplane.md "Watching a directory"); and it runs Process/Start as an
	// execd background command so those work on it, or, with a pty, on an
	// execd PTY session (docs/dataplane.md "PTY processes").
	// Default false (docs/dataplane.md "Extended operations").
	ExtendedOperations bool
	// ProcessDir is the sandbox directory where, with ExtendedOperations,
	// each process started through the gateway keeps its record
	// (<pid>.json) and its output (<pid>.out, <pid>.err). Default
	// "/tmp/.sandgate/processes".
	ProcessDir string
	// MaxListingBytes bounds execd's answer to one directory listing
	// (bytes); a larger one is EXECD_PROTOCOL. Default
	// execd.DefaultMaxListingBytes (4 MiB).
	MaxListingBytes int64
	// MaxListingEntries bounds the entries of one listing; more is
	// EXECD_PROTOCOL. Default execd.DefaultMaxListingEntries (16,384).
	MaxListingEntries int
	// MaxUpstreamCalls bounds the unary calls (and the polls of command
	// streams) that read and decode execd answers at once, over all
	// sandboxes; one more waits up to UpstreamWait for a slot, then is
	// GATEWAY_BUSY (a stream's poll skips to its next turn instead). A
	// unary call takes its slot when execd's first answer to it arrives
	// (or before reading a request message over 64 KiB) and holds it to
	// its end; waiting for execd takes none. Default
	// DefaultMaxUpstreamCalls (16).
	MaxUpstreamCalls int
	// UpstreamWait is how long a call waits for a slot of
	// MaxUpstreamCalls, MaxUpstreamCallsPerSandbox or
	// MaxProcessCallsPerCredential. Default DefaultUpstreamWait (30 s).
	UpstreamWait time.Duration
	// MaxUpstreamCallsPerSandbox is MaxUpstreamCalls for one sandbox.
	// Default DefaultMaxUpstreamCallsPerSandbox (4).
	MaxUpstreamCallsPerSandbox int
	// MaxProcessCallsPerCredential bounds the extended calls that read the
	// process records (Process List, and Connect and SendSignal) running at
	// once for one resource credential; one more is GATEWAY_BUSY. Default
	// DefaultMaxProcessCallsPerCredential (2).
	MaxProcessCallsPerCredential int
	// MaxRequestsPerCredential bounds the requests of one resource
	// credential (one tenant) in progress at once over all its sandboxes:
	// every operation from its checks' end to its answer's end (a command
	// stream, a download or a write for as long as it lasts). One more is
	// refused at once with GATEWAY_BUSY, not queued. Default
	// DefaultMaxRequestsPerCredential (1024).
	MaxRequestsPerCredential int
	// MaxRequests is MaxRequestsPerCredential over all credentials.
	// Default DefaultMaxRequests (4096), or MaxRequestsPerCredential when
	// that is larger. Both are counted in Deps.Requests.
	MaxRequests int
}

// Defaults of the concurrency bounds (docs/dataplane.md "Bounded cost per
// request and per tenant").
const (
	DefaultMaxUpstreamCalls             = 16
	DefaultMaxUpstreamCallsPerSandbox   = 4
	DefaultMaxProcessCallsPerCredential = 2
	DefaultUpstreamWait                 = 30 * time.Second
	// DefaultMaxRequestsPerCredential and DefaultMaxRequests: each held
	// request costs the gateway its goroutines, buffers and two
	// connections (a command stream whose sandbox sent a partial line
	// about 140 KiB with its stacks, a stalled write about 230 KiB:
	// docs/dataplane.md "Requests in progress"), so one tenant holds at
	// most about 140–230 MiB at the default, the gateway four times that.
	DefaultMaxRequestsPerCredential = 1024
	DefaultMaxRequests              = 4096
)

func (c *Config) defaults() {
	if c.HomeDir == "" {
		c.HomeDir = "/home/user"
	}
	if c.KeepaliveInterval <= 0 {
		c.KeepaliveInterval = 90 * time.Second
	}
	if c.ProcessDir == "" {
		c.ProcessDir = "/tmp/.sandgate/processes"
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 4 << 20
	}
	if c.MaxDecompressedBytes <= 0 {
		c.MaxDecompressedBytes = DefaultMaxDecompressedBytes
	}
	if c.MaxDecompressionRatio <= 0 {
		c.MaxDecompressionRatio = DefaultMaxDecompressionRatio
	}
	if c.MaxListingBytes <= 0 {
		c.MaxListingBytes = execd.DefaultMaxListingBytes
	}
	if c.MaxListingEntries <= 0 {
		c.MaxListingEntries = execd.DefaultMaxListingEntries
	}
	if c.MaxUpstreamCalls <= 0 {
		c.MaxUpstreamCalls = DefaultMaxUpstreamCalls
	}
	if c.MaxUpstreamCallsPerSandbox <= 0 {
		c.MaxUpstreamCallsPerSandbox = DefaultMaxUpstreamCallsPerSandbox
	}
	if c.UpstreamWait <= 0 {
		c.UpstreamWait = DefaultUpstreamWait
	}
	if c.MaxProcessCallsPerCredential <= 0 {
		c.MaxProcessCallsPerCredential = DefaultMaxProcessCallsPerCredential
	}
	if c.MaxRequestsPerCredential <= 0 {
		c.MaxRequestsPerCredential = DefaultMaxRequestsPerCredential
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = max(DefaultMaxRequests, c.MaxRequestsPerCredential)
	}
}

// TokenVerifier verifies an X-Access-Token; *token.Verifier implements it.
type TokenVerifier interface {
	// Verify checks the token's signature and times and returns its
	// target; errors are token's (ErrMalformed, ErrExpired, …).
	Verify(raw string) (token.Target, error)
}

// Cluster is one compute cluster as the data plane needs it.
type Cluster struct {
	// ID is the credential's ClusterID.
	ID string
	// FixedEntry is the cluster's fixed entry base URL.
	FixedEntry *url.URL
	// ExecdAccessToken, if set, is sent to execd as X-EXECD-ACCESS-TOKEN:
	// one token for every sandbox of the cluster, which a sandbox's root
	// can read (docs/dataplane.md "Threat model").
	ExecdAccessToken string
	// ExecdTokenSecrets, if set (instead of ExecdAccessToken), derive each
	// sandbox's own token: execdtoken.Derive(secret, sandboxID). With one
	// secret it is that secret's; with several (a rotation, at most
	// execdtoken.MaxSecrets) it is the one the sandbox's execd accepts,
	// found with execd's /ping after the request's checks passed and
	// remembered per sandbox (execdtoken.Chooser).
	ExecdTokenSecrets [][]byte
	// Host, if set, is the Host header of every request to the fixed
	// entry (the host of the managed Ingresses' rules); empty sends the
	// fixed entry URL's host.
	Host string
}

// Clusters looks up a cluster by ID.
type Clusters interface {
	// Cluster returns the cluster with this ID; false when none.
	Cluster(id string) (Cluster, bool)
}

// Outcome describes one finished request, for metrics and logs.
type Outcome struct {
	// Operation names the call, e.g. "filesystem.ListDir".
	Operation string
	// SandboxID, CredentialID and ClusterID are what the request
	// resolved to; empty when it was refused before.
	SandboxID    string
	CredentialID string
	ClusterID    string
	// Code is empty on success.
	Code Code
	// Bound names the bound a GATEWAY_BUSY met; "" for any other
	// outcome.
	Bound Bound
	// Duration is the request's time in the handler.
	Duration time.Duration
	// Context is the request's context, for an adapter that annotates
	// the request it answers (the Caddy adapter sets the access log's
	// level from Code).
	Context context.Context
}

// OwnBound reports that Code (GATEWAY_BUSY) refused the request at its
// credential's own bound (max_requests_per_credential), not at the
// gateway's: the tenant's matter, as a sandbox that is gone is.
func (o Outcome) OwnBound() bool { return o.Bound == BoundRequestsPerCredential }

// Deps are the collaborators of a Handler.
type Deps struct {
	// Tokens verifies X-Access-Token.
	Tokens TokenVerifier
	// Credentials is the resource credential source, read on every call.
	Credentials credential.Source
	// Clusters maps a credential's clusterId to its fixed entry.
	Clusters Clusters
	// Execd sends the translated calls; its Transport is Caddy's HTTP
	// transport in the gateway.
	Execd *execd.Client
	// Logger receives one line per request at info level (debug for
	// success); nil means no logs.
	Logger *zap.Logger
	// Observe, if set, is called once per request (metrics).
	Observe func(Outcome)
	// Authorizer, if set, is asked last (check 7) whether the token's
	// credential may still reach the sandbox (spec §3.3
	// ProviderAuthorizer; package authorizer). nil skips the check.
	Authorizer authorizer.Authorizer
	// Drain, if set, tracks the command streams and file transfers so a
	// shutdown can drain them (package drain): once it has begun they are
	// refused with GATEWAY_DRAINING, and those still running when its
	// grace is over end with GATEWAY_DRAINING. nil: no draining.
	Drain *drain.Drainer
	// Requests counts the requests in progress per credential ID and in
	// all (NewRequestCounts), each Handler checking its own
	// Config.MaxRequestsPerCredential and MaxRequests against it: the
	// gateway keeps one for the process, so that after a `caddy reload`
	// the streams and transfers the replaced configuration still runs
	// count against the new one's bounds. nil: the Handler's own.
	Requests *admission.Limiter
	// Shared is what outlives the request that started it and so must
	// outlive a configuration (NewShared): the PTY WebSockets the streams
	// hold and the bounds of the work that runs on after a request
	// ended or while a stream lasts. The gateway keeps one for the
	// process, so that after a `caddy reload` the new Handler relays a
	// terminal's input through the WebSocket a stream of the replaced
	// one holds (not PTY_ATTACHED), and the deferred cleanups, PTY kills,
	// PTY streams and large lines of the replaced configuration count
	// against the same bounds. nil: the Handler's own.
	Shared *Shared
}

// Handler serves the data plane. Create it with New.
type Handler struct {
	cfg  Config
	deps Deps
	// upstream counts the calls decoding execd answers (per sandbox);
	// processCalls the calls reading process records (per credential).
	upstream, processCalls *admission.Limiter
	// execdTokens remembers which of a cluster's execd token secrets each
	// sandbox's execd accepts, when a cluster has several.
	execdTokens *execdtoken.Chooser
	// cleanupGrace is how long a process's files stay after its Start
	// stream delivered its end (cleanupGrace, the constant, from New;
	// 0: removed at once).
	cleanupGrace time.Duration
	// shared is Deps.Shared: the held terminals and the bounds of the
	// work that outlives a request.
	shared *Shared
}

// New returns a Handler. It returns an error if a dependency is missing or
// the default user is not in Users.
func New(cfg Config, deps Deps) (*Handler, error) {
	cfg.defaults()
	if deps.Tokens == nil || deps.Credentials == nil || deps.Clusters == nil || deps.Execd == nil {
		return nil, errors.New("dataplane: tokens, credentials, clusters and execd client are required")
	}
	if cfg.DefaultUser != "" {
		if _, ok := cfg.Users[cfg.DefaultUser]; !ok {
			return nil, errors.New("dataplane: default user " + cfg.DefaultUser + " is not among the users")
		}
	}
	if !path.IsAbs(cfg.HomeDir) {
		return nil, errors.New("dataplane: home directory must be absolute")
	}
	if !path.IsAbs(cfg.ProcessDir) || path.Clean(cfg.ProcessDir) != cfg.ProcessDir || cfg.ProcessDir == "/" {
		return nil, errors.New("dataplane: the process directory must be an absolute, clean path below /")
	}
	for name, u := range cfg.Users {
		if u.Home != "" && !path.IsAbs(u.Home) {
			return nil, errors.New("dataplane: home of user " + name + " must be absolute")
		}
	}
	if cfg.MaxRequestsPerCredential > cfg.MaxRequests {
		return nil, errors.New("dataplane: the requests in progress per credential must be at most those of the gateway")
	}
	if deps.Logger == nil {
		deps.Logger = zap.NewNop()
	}
	if deps.Requests == nil {
		deps.Requests = NewRequestCounts()
	}
	if deps.Shared == nil {
		deps.Shared = NewShared()
	}
	xc := *deps.Execd
	xc.MaxListingBytes, xc.MaxListingEntries = cfg.MaxListingBytes, cfg.MaxListingEntries
	deps.Execd = &xc
	return &Handler{cfg: cfg, deps: deps, execdTokens: &execdtoken.Chooser{}, cleanupGrace: cleanupGrace,
		upstream:     admission.New(cfg.MaxUpstreamCalls, cfg.MaxUpstreamCallsPerSandbox),
		processCalls: admission.New(cfg.MaxUpstreamCalls, cfg.MaxProcessCallsPerCredential),
		shared:       deps.Shared}, nil
}

// operation is one supported envd route.
type operation struct {
	name  string
	shape shape
	serve func(h *Handler, w http.ResponseWriter, r *http.Request, rq *request) *Error
}

// request is what the checks established about one call.
type request struct {
	op *operation
	// slot is a unary call's answer slot (nil for other shapes), which an
	// operation whose rest waits on the sandbox gives back (sendStdin).
	slot      *answerSlot
	sandboxID string
	tokenTgt  token.Target
	cred      credential.Credential
	cluster   Cluster
	target    execd.Target
}

var (
	opStart   = &operation{OpProcessStart, shapeStream, (*Handler).processStart}
	opRead    = &operation{OpFilesRead, shapeREST, (*Handler).filesRead}
	opWrite   = &operation{OpFilesWrite, shapeREST, (*Handler).filesWrite}
	opDelete  = &operation{OpFilesDelete, shapeREST, (*Handler).filesDelete}
	opListDir = &operation{OpListDir, shapeUnary, (*Handler).listDir}
	opRemove  = &operation{OpRemove, shapeUnary, (*Handler).remove}
	opHealth  = &operation{OpHealth, shapeHealth, (*Handler).health}

	opList             = &operation{OpProcessList, shapeUnary, (*Handler).processList}
	opConnect          = &operation{OpProcessConnect, shapeStream, (*Handler).processConnect}
	opSendSignal       = &operation{OpProcessSendSignal, shapeUnary, (*Handler).processSendSignal}
	opSendInput        = &operation{OpProcessSendInput, shapeUnary, (*Handler).processSendInput}
	opUpdate           = &operation{OpProcessUpdate, shapeUnary, (*Handler).processUpdate}
	opCloseStdin       = &operation{OpProcessCloseStdin, shapeUnary, (*Handler).processCloseStdin}
	opWatchDir         = &operation{OpWatchDir, shapeStream, (*Handler).watchDir}
	opCreateWatcher    = &operation{OpCreateWatcher, shapeUnary, (*Handler).createWatcher}
	opGetWatcherEvents = &operation{OpGetWatcherEvents, shapeUnary, (*Handler).getWatcherEvents}
	opRemoveWatcher    = &operation{OpRemoveWatcher, shapeUnary, (*Handler).removeWatcher}
	opStat             = &operation{OpStat, shapeUnary, (*Handler).stat}
	opMakeDir          = &operation{OpMakeDir, shapeUnary, (*Handler).makeDir}
	opMove             = &operation{OpMove, shapeUnary, (*Handler).move}
)

// connectOperations are the Connect routes served by default (spec §3.3).
var connectOperations = map[string]*operation{
	"/process.Process/Start":         opStart,
	"/filesystem.Filesystem/ListDir": opListDir,
	"/filesystem.Filesystem/Remove":  opRemove,
}

// extendedOperations are the Connect routes served with
// Config.ExtendedOperations, besides connectOperations.
var extendedOperations = map[string]*operation{
	"/process.Process/List":                   opList,
	"/process.Process/Connect":                opConnect,
	"/process.Process/SendSignal":             opSendSignal,
	"/process.Process/SendInput":              opSendInput,
	"/process.Process/Update":                 opUpdate,
	"/process.Process/CloseStdin":             opCloseStdin,
	"/filesystem.Filesystem/WatchDir":         opWatchDir,
	"/filesystem.Filesystem/CreateWatcher":    opCreateWatcher,
	"/filesystem.Filesystem/GetWatcherEvents": opGetWatcherEvents,
	"/filesystem.Filesystem/RemoveWatcher":    opRemoveWatcher,
	"/filesystem.Filesystem/Stat":             opStat,
	"/filesystem.Filesystem/MakeDir":          opMakeDir,
	"/filesystem.Filesystem/Move":             opMove,
}

// noStdin are the envd routes that write a process's stdin and are not
// served: Process/StreamInput, a client stream (no SDK sends it; SendInput
// and CloseStdin are served with Config.ExtendedOperations, stdin.go).
var noStdin = map[string]bool{"/process.Process/StreamInput": true}

// connectRoute matches /<package>.<Service>/<Method>.
var connectRoute = regexp.MustCompile(`^/[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+/[A-Za-z_][A-Za-z0-9_]*$`)

// reservedRoutes are envd's orchestrator-only routes; E2B's own proxy
// refuses them from outside with 404 (docs/wire-facts.md §E6.2).
var reservedRoutes = map[string]bool{"/init": true, "/freeze": true, "/unfreeze": true, "/collapse": true,
	"/fsfreeze": true, "/fsthaw": true, "/upgrade": true}

// route decides the operation (check 1). It returns the operation, or the
// shape and error to answer with.
func (h *Handler) route(r *http.Request) (*operation, shape, *Error) {
	p := r.URL.Path
	switch p {
	case "/files":
		switch r.Method {
		case http.MethodGet:
			return opRead, 0, nil
		case http.MethodPost:
			return opWrite, 0, nil
		case http.MethodDelete:
			return opDelete, 0, nil
		}
		return nil, shapeREST, fail(CodeMethodNotAllowed, r.Method+" /files is not supported")
	case "/health":
		// A liveness probe, not an operation (envd answers it without a
		// token); the SDK still sends its routing headers and token, which
		// the gateway needs to find the sandbox's cluster.
		if r.Method != http.MethodGet {
			return nil, shapeREST, fail(CodeMethodNotAllowed, r.Method+" /health is not supported")
		}
		return opHealth, 0, nil
	}
	op := connectOperations[p]
	if op == nil && h.cfg.ExtendedOperations {
		op = extendedOperations[p]
	}
	if op != nil {
		if r.Method != http.MethodPost {
			return nil, shapeREST, fail(CodeMethodNotAllowed, "Connect calls use POST")
		}
		return op, 0, nil
	}
	if reservedRoutes[p] {
		return nil, shapeREST, fail(CodeReservedRoute, "This endpoint is reserved for the E2B control plane and is not reachable through the sandbox URL")
	}
	if connectRoute.MatchString(p) {
		sh := shapeUnary
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
			sh = shapeStream
		}
		method := strings.TrimPrefix(p, "/")
		if h.cfg.ExtendedOperations && noStdin[p] {
			return nil, sh, fail(CodeUnsupportedOperation, method+" is not supported: a client stream of input; send it with process.Process/SendInput")
		}
		return nil, sh, fail(CodeUnsupportedOperation, method+" is not implemented by this gateway")
	}
	switch p {
	case "/metrics", "/envs", "/files/compose":
		return nil, shapeREST, fail(CodeUnsupportedOperation, p+" is not implemented by this gateway")
	}
	return nil, shapeREST, fail(CodeUnknownRoute, "no such route")
}

// validSandboxID reports whether id is a DNS-1123 label, what the regular
// expression ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ matches: an OpenSandbox
// sandbox ID is a BatchSandbox name (docs/wire-facts.md §X2.4), and E2B IDs
// ([a-z0-9]+) fit it. Checked by hand, once per request, without the
// regular expression's matcher (TestValidSandboxID compares the two).
func validSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] == '-' || id[len(id)-1] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ServeHTTP runs the checks and the operation and always writes a response.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tw := &trackingWriter{ResponseWriter: w}
	w = tw
	rq := &request{}
	op, sh, e := h.route(r)
	opName := "unsupported"
	if op != nil {
		rq.op = op
		opName = op.name
		sh = op.shape
		e = h.authorize(r, rq)
		end := func() {}
		if e == nil {
			r, end, e = h.begin(w, r, rq, op)
			// Called below, before the outcome is reported; deferred too
			// (a no-op then), should the operation panic.
			defer end()
		}
		var slot *answerSlot
		if e == nil && op.shape == shapeUnary {
			// A unary call decodes execd's answers and builds its own whole
			// (a listing): one slot for the call, from its first answer
			// on (answerSlot).
			slot = &answerSlot{h: h, rq: rq, ctx: r.Context()}
			rq.slot = slot
			e = slot.admitLazily(r)
		}
		if e == nil {
			e = op.serve(h, w, r, rq)
		}
		if slot != nil {
			if busy := slot.end(); busy != nil && !tw.wrote {
				e = busy
			}
		}
		if e != nil && e.Code != CodeGatewayDraining && drainEnded(r.Context()) {
			// A transfer whose context the drain cancelled fails with
			// the copy's error; say why it was cut.
			e = drainingError("ended the " + opName + " still running at the end of its drain grace")
		}
		end()
	}
	if e != nil && !tw.wrote {
		writeError(w, sh, e)
	}
	h.finish(r.Context(), opName, rq, e, time.Since(start))
	if tw.abort {
		// The response was cut off after its header: abort it so the client
		// sees a broken body, never a clean end (with chunked encoding a
		// normal return would end a truncated download as if complete).
		panic(http.ErrAbortHandler)
	}
}

// trackingWriter remembers whether the response was started, so an error
// found after a stream or download began is not written twice.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
	abort bool
}

// abortResponse marks w's response to be aborted once the request is
// finished (logged and counted).
func abortResponse(w http.ResponseWriter) {
	if t, ok := w.(*trackingWriter); ok {
		t.abort = true
	}
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (h *Handler) finish(ctx context.Context, op string, rq *request, e *Error, d time.Duration) {
	out := Outcome{Operation: op, SandboxID: rq.sandboxID, CredentialID: rq.cred.ID, ClusterID: rq.cluster.ID, Duration: d, Context: ctx}
	level := zapcore.DebugLevel
	if e != nil {
		out.Code, out.Bound = e.Code, e.bound
		level = zapcore.InfoLevel
		if e.Code == CodeExecdUnauthorized && len(rq.cluster.ExecdTokenSecrets) > 1 {
			// The next request asks execd again which secret is its.
			h.execdTokens.Forget(rq.cluster.ID, rq.sandboxID)
		}
	}
	if h.deps.Observe != nil {
		h.deps.Observe(out)
	}
	if c := h.deps.Logger.Check(level, "e2b data plane request"); c != nil {
		outcome := "ok"
		if e != nil {
			outcome = string(e.Code)
		}
		fields := []zap.Field{zap.String("operation", op), zap.String("sandbox", rq.sandboxID),
			zap.String("credential", rq.cred.ID), zap.String("cluster", rq.cluster.ID),
			zap.String("outcome", outcome), zap.Duration("duration", d)}
		if e != nil {
			fields = append(fields, zap.String("class", string(e.Code.Class())), zap.String("error", e.Message))
			if e.cause != "" {
				fields = append(fields, zap.String("cause", e.cause))
			}
			if e.bound != "" {
				fields = append(fields, zap.String("bound", string(e.bound)))
			}
		}
		c.Write(fields...)
	}
}

// authorize runs checks 2 to 6 and fills rq.
func (h *Handler) authorize(r *http.Request, rq *request) *Error {
	if r.URL.Query().Has("signature") && len(r.Header.Values(HeaderAccessToken)) == 0 {
		// A signed file URL (the SDKs' downloadUrl/uploadUrl): envd's own
		// signature over its access token, which the gateway never sees,
		// so it cannot be checked; refused as a whole rather than as a
		// request that forgot its headers (docs/errors.md).
		return fail(CodeUnsupportedOperation, "signed file URLs (downloadUrl, uploadUrl) are not supported: use files.read and files.write, which send "+HeaderAccessToken)
	}
	idHdr, portHdr := r.Header.Values(HeaderSandboxID), r.Header.Values(HeaderSandboxPort)
	fromToken := false
	switch {
	case len(idHdr) == 0 && len(portHdr) == 0 && h.cfg.TokenTarget:
		fromToken = true
	case len(idHdr) == 0:
		return fail(CodeSandboxHeaderMissing, "the "+HeaderSandboxID+" header is required")
	case len(portHdr) == 0:
		return fail(CodeSandboxHeaderMissing, "the "+HeaderSandboxPort+" header is required")
	case len(idHdr) > 1 || !validSandboxID(idHdr[0]):
		return fail(CodeSandboxIDInvalid, "the "+HeaderSandboxID+" header is not a valid sandbox ID")
	case len(portHdr) > 1 || portHdr[0] != "49983":
		return fail(CodeSandboxPortInvalid, "the "+HeaderSandboxPort+" header must be 49983, the envd service")
	default:
		rq.sandboxID = idHdr[0]
	}

	raw := r.Header.Values(HeaderAccessToken)
	if len(raw) == 0 || raw[0] == "" {
		return fail(CodeTokenMissing, "the "+HeaderAccessToken+" header is required")
	}
	if len(raw) > 1 {
		return fail(CodeTokenInvalid, "more than one "+HeaderAccessToken+" header")
	}
	tgt, err := h.deps.Tokens.Verify(raw[0])
	if err != nil {
		if errors.Is(err, token.ErrExpired) {
			return fail(CodeTokenExpired, "the access token has expired")
		}
		return fail(CodeTokenInvalid, "the access token is not valid ("+tokenReason(err)+")")
	}
	rq.tokenTgt = tgt
	if fromToken {
		if !validSandboxID(tgt.SandboxID) {
			return fail(CodeTokenInvalid, "the access token names an invalid sandbox ID")
		}
		rq.sandboxID = tgt.SandboxID
	}
	if tgt.SandboxID != rq.sandboxID || tgt.Port != EnvdPort {
		return fail(CodeTargetMismatch, "the access token does not authorise this sandbox and service")
	}

	cred, err := h.deps.Credentials.Lookup(r.Context(), tgt.CredentialID)
	switch {
	case errors.Is(err, credential.ErrNotFound):
		return fail(CodeCredentialNotFound, "the token's resource credential does not exist")
	case errors.Is(err, credential.ErrDisabled):
		rq.cred.ID = tgt.CredentialID
		return fail(CodeCredentialDisabled, "the token's resource credential is disabled")
	case err != nil:
		return failCause(CodeCredentialUnavailable, "the resource credential could not be read", err)
	case !cred.Enabled:
		rq.cred.ID = tgt.CredentialID
		return fail(CodeCredentialDisabled, "the token's resource credential is disabled")
	}
	rq.cred = cred

	cl, ok := h.deps.Clusters.Cluster(cred.ClusterID)
	if !ok || cl.FixedEntry == nil {
		rq.cluster.ID = cred.ClusterID
		return fail(CodeClusterUnknown, "the credential's compute cluster is not configured on this gateway")
	}
	rq.cluster = cl
	rq.target = execd.Target{FixedEntry: cl.FixedEntry, SandboxID: rq.sandboxID, AccessToken: cl.ExecdAccessToken, Host: cl.Host}
	if len(cl.ExecdTokenSecrets) == 1 {
		rq.target.AccessToken = execdtoken.Derive(cl.ExecdTokenSecrets[0], rq.sandboxID)
	}
	return h.authorizeSandbox(r.Context(), rq)
}

// begin starts an authorized request: its place among the requests in
// progress (admitRequest), the drain's tracking of a stream or transfer
// (track), then its execd token (chooseExecdToken). end gives back what
// was taken, once however often it is called; on an error nothing stays
// taken. A stream or transfer refused by the bound while the gateway
// drains is answered GATEWAY_DRAINING, as track would answer it: the
// retry the SDK makes then goes to another replica, where the bound (a
// replica's own count) may not be reached.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request, rq *request, op *operation) (_ *http.Request, end func(), _ *Error) {
	release, e := h.admitRequest(rq)
	if e != nil {
		if kind, tracked := drainKinds[op]; tracked && h.deps.Drain != nil && h.deps.Drain.Draining() {
			e = drainingRefusal(kind)
		}
		return r, func() {}, e
	}
	r, untrack, e := h.track(w, r, op)
	if e != nil {
		release()
		return r, func() {}, e
	}
	h.chooseExecdToken(r, rq)
	return r, sync.OnceFunc(func() { untrack(); release() }), nil
}

// chooseExecdToken sets rq's execd token when its cluster holds several
// execd token secrets (a rotation): the one the sandbox's execd accepts,
// asked with execd's /ping unless remembered (execdtoken.Chooser). The
// pings are execd calls, which the sandbox's code can hold as long as any
// other, so only a request that passed every check and holds its place
// among the requests in progress (admitRequest) sends them.
func (h *Handler) chooseExecdToken(r *http.Request, rq *request) {
	if cl := rq.cluster; len(cl.ExecdTokenSecrets) > 1 {
		rq.target.AccessToken = h.execdTokens.Token(r.Context(), cl.ID, rq.sandboxID, cl.ExecdTokenSecrets, func(ctx context.Context, tok string) (bool, error) {
			t := rq.target
			t.AccessToken = tok
			err := h.deps.Execd.Ping(ctx, t)
			var xe *execd.Error
			switch {
			case err == nil:
				return true, nil
			case errors.As(err, &xe) && xe.Kind == execd.KindUnauthorized:
				return false, nil
			}
			return false, err
		})
	}
}

// authorizeSandbox is check 7: the sandbox authorizer, when configured.
// Another credential's sandbox and a missing one are both
// SANDBOX_NOT_FOUND with the same message, so a token cannot probe which
// sandboxes exist.
func (h *Handler) authorizeSandbox(ctx context.Context, rq *request) *Error {
	if h.deps.Authorizer == nil {
		return nil
	}
	d, err := h.deps.Authorizer.Authorize(ctx, rq.cred.ID, rq.sandboxID)
	if err != nil {
		return failCause(CodeAuthorizerUnavailable, "the sandbox authorizer could not answer", err)
	}
	return refusal(d)
}

// refusal is the error of an authorizer's decision; nil when allowed.
func refusal(d authorizer.Decision) *Error {
	switch {
	case d.Allowed:
		return nil
	case d.Reason == authorizer.ReasonDeleting:
		return fail(CodeSandboxDeleting, "the sandbox is being deleted")
	case d.Reason == authorizer.ReasonExpired:
		return fail(CodeSandboxExpired, "the sandbox has reached its timeout")
	case d.Reason == authorizer.ReasonNotReady:
		// The code the fixed entry's ingress gives a sandbox whose pod
		// is not ready (spec §3.3: the authorizer checks "running").
		return fail(CodeSandboxNotReady, "the sandbox is not ready")
	default:
		return fail(CodeSandboxNotFound, "the sandbox was not found")
	}
}

// goneCheckTimeout bounds sandboxGone's questions.
const goneCheckTimeout = 2 * time.Second

// sandboxGone is what a command stream that broke with e ends with. A
// sandbox deleted (or expired) while its command runs takes execd with it,
// which cuts the stream; that is not execd misbehaving, so when the
// authorizer (asked afresh: authorizer.Rechecker, else Authorize) refuses
// the sandbox, or the cluster's fixed entry answers execd's /ping with a
// sandbox that is missing, not ready or unreachable, the stream ends with
// that code (SANDBOX_NOT_FOUND, SANDBOX_DELETING, SANDBOX_EXPIRED,
// SANDBOX_NOT_READY, SANDBOX_UNREACHABLE: unavailable, the SDKs' timeout
// error) instead of e (EXECD_PROTOCOL, the SDKs' generic error). Otherwise
// (the sandbox is there, or nobody can say) e is returned unchanged. Only
// network and execution errors are looked into; e.g. COMMAND_TIMEOUT and
// CANCELED are returned as they are.
func (h *Handler) sandboxGone(ctx context.Context, rq *request, e *Error) *Error {
	switch c := e.Code; {
	case codes[c].gone, c == CodeCommandTimeout, c.Class() != ClassNetwork && c.Class() != ClassExecution:
		return e
	}
	ctx, cancel := context.WithTimeout(ctx, goneCheckTimeout)
	defer cancel()
	gone := func(g *Error) *Error {
		return fail(g.Code, g.Message+" (the command's stream ended: "+e.Message+")")
	}
	if a := h.deps.Authorizer; a != nil {
		ask := a.Authorize
		if rc, ok := a.(authorizer.Rechecker); ok {
			ask = rc.Recheck
		}
		if d, err := ask(ctx, rq.cred.ID, rq.sandboxID); err == nil && !d.Allowed {
			return gone(refusal(d))
		}
	}
	if err := h.deps.Execd.Ping(ctx, rq.target); err != nil {
		if g := fromExecd(err, "ping"); codes[g.Code].gone {
			return gone(g)
		}
	}
	return e
}

// tokenReason names the token failure without echoing the token.
func tokenReason(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{{token.ErrMalformed, "malformed"}, {token.ErrUnknownKey, "unknown key"}, {token.ErrAlgorithm, "algorithm not allowed"},
		{token.ErrSignature, "bad signature"}, {token.ErrNotYetValid, "not yet valid"}, {token.ErrClaims, "claims"}} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "rejected"
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// readUnary reads a unary call's SDK user (basicUser) and message
// (readMessage, within MaxMessageBytes), and decodes the message with
// decode; a message decode refuses is BAD_REQUEST with its error.
func readUnary[T any](h *Handler, r *http.Request, decode func([]byte) (T, error)) (sdkUser, T, *Error) {
	var zero T
	user, e := h.basicUser(r)
	if e != nil {
		return user, zero, e
	}
	msg, e := h.readMessage(r)
	if e != nil {
		return user, zero, e
	}
	req, err := decode(msg)
	if err != nil {
		return user, zero, fail(CodeBadRequest, err.Error())
	}
	return user, req, nil
}

// readMessage reads a unary Connect request message with the size limit.
func (h *Handler) readMessage(r *http.Request) ([]byte, *Error) {
	ct := r.Header.Get("Content-Type")
	if mt, _, _ := strings.Cut(ct, ";"); strings.TrimSpace(mt) != connect.ContentTypeUnaryJSON {
		return nil, fail(CodeBadRequest, "unary calls must be application/json (the Connect JSON codec)")
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return nil, fail(CodeBadRequest, "compressed requests are not supported")
	}
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, int64(h.cfg.MaxMessageBytes)))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fail(CodeBadRequest, "the request message is too large")
		}
		return nil, fail(CodeBadRequest, "the request body could not be read")
	}
	return b, nil
}
