package httpapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandboxlogs"
	"github.com/sandgate/sandgate/gateway/admission"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Log page sizes of E2B's log routes.
const (
	// DefaultLogLimit is the page size when limit is not given (E2B's
	// default).
	DefaultLogLimit = 1000
	// MaxLogLimitV2 is the largest limit of the v2 route (E2B's maximum).
	MaxLogLimitV2 = 1000
	// MaxLogSearch is the longest search string (E2B's maxLength).
	MaxLogSearch = 256
)

// Log reads in progress: each may hold up to sandboxlogs.MaxReadBytes of
// each of its sandbox's pods' logs (more once parsed into entries), so
// corectl reads at most MaxLogReads at once, and at most
// MaxLogReadsPerCredential for one credential; a read past either bound
// is 429 rate_limited at once (counted as corectl_api_refusals_total
// {reason="log_reads_busy"}).
const (
	MaxLogReads              = 16
	MaxLogReadsPerCredential = 2
)

// logReads returns the Limiter of the log reads in progress, made on first
// use.
func (s *Server) logReads() *admission.Limiter {
	s.logReadsOnce.Do(func() { s.logReadsLimiter = admission.New(MaxLogReads, MaxLogReadsPerCredential) })
	return s.logReadsLimiter
}

// SandboxLog is E2B's SandboxLog (v1's logs).
type SandboxLog struct {
	// Timestamp is when the line was recorded (RFC 3339).
	Timestamp string `json:"timestamp"`
	// Line is the line.
	Line string `json:"line"`
}

// SandboxLogEntry is E2B's SandboxLogEntry.
type SandboxLogEntry struct {
	// Timestamp is when the line was recorded (RFC 3339).
	Timestamp string `json:"timestamp"`
	// Level is always "info": a container's output has no levels.
	Level string `json:"level"`
	// Message is the line.
	Message string `json:"message"`
	// Fields is always empty.
	Fields map[string]string `json:"fields"`
}

// SandboxLogs is E2B's SandboxLogs, the answer of GET
// /sandboxes/{sandboxID}/logs.
type SandboxLogs struct {
	// Logs are the lines.
	Logs []SandboxLog `json:"logs"`
	// LogEntries are the same lines as entries.
	LogEntries []SandboxLogEntry `json:"logEntries"`
}

// SandboxLogsV2 is E2B's SandboxLogsV2Response, the answer of GET
// /v2/sandboxes/{sandboxID}/logs.
type SandboxLogsV2 struct {
	// Logs are the entries.
	Logs []SandboxLogEntry `json:"logs"`
}

// logLevels are E2B's LogLevel values, lowest first.
var logLevels = []string{"debug", "info", "warn", "error"}

// logsQuery reads the query of the log routes (E2B's parameters) into a
// selection, and whether the level filter excludes every line (level
// warn or error: every line is info). v1: start (Unix ms, the oldest
// entry), limit (default 1000), oldest first. v2: cursor (Unix ms),
// direction (backward, the default: newest first, entries at or before
// the cursor; forward: oldest first, at or after it), limit (0 to 1000,
// default 1000), level, search (at most 256 bytes). A malformed or
// repeated parameter is an error naming it.
func logsQuery(q url.Values, v2 bool) (sandboxlogs.Query, sandboxlogs.ReadOptions, bool, error) {
	var sel sandboxlogs.Query
	var ro sandboxlogs.ReadOptions
	for k, vs := range q {
		if len(vs) > 1 {
			return sel, ro, false, fmt.Errorf("query parameter %s is repeated", k)
		}
	}
	millis := func(name string) (time.Time, bool, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, false, fmt.Errorf("%s must be a Unix time in milliseconds", name)
		}
		return time.UnixMilli(n), true, nil
	}
	maxLimit := math.MaxInt32
	if v2 {
		maxLimit = MaxLogLimitV2
	}
	sel.Limit = DefaultLogLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxLimit {
			return sel, ro, false, fmt.Errorf("limit must be a whole number from 0 to %d", maxLimit)
		}
		sel.Limit = n
	}
	if !v2 {
		start, ok, err := millis("start")
		if err != nil {
			return sel, ro, false, err
		}
		if ok {
			sel.From, ro.Since = start, start
		}
		return sel, ro, false, nil
	}
	cursor, hasCursor, err := millis("cursor")
	if err != nil {
		return sel, ro, false, err
	}
	switch q.Get("direction") {
	case "", "backward":
		sel.Backward, ro.Tail = true, true
		sel.To = cursor
	case "forward":
		sel.From, ro.Since = cursor, cursor
	default:
		return sel, ro, false, errors.New("direction must be forward or backward")
	}
	if !hasCursor {
		sel.From, sel.To, ro.Since = time.Time{}, time.Time{}, time.Time{}
	}
	none := false
	if lv := q.Get("level"); lv != "" {
		i := -1
		for j, l := range logLevels {
			if l == lv {
				i = j
			}
		}
		if i < 0 {
			return sel, ro, false, errors.New("level must be debug, info, warn or error")
		}
		none = i > 1
	}
	sel.Search = q.Get("search")
	if len(sel.Search) > MaxLogSearch {
		return sel, ro, false, fmt.Errorf("search must be at most %d bytes", MaxLogSearch)
	}
	return sel, ro, none, nil
}

// sandboxLogs is GET /sandboxes/{sandboxID}/logs (E2B's SandboxLogs) and
// GET /v2/sandboxes/{sandboxID}/logs (E2B's SandboxLogsV2Response): the
// sandbox container's log of each of its pods, read through the
// Kubernetes API (pods/log; package sandboxlogs has what is kept and the
// bounds), selected by logsQuery. A pod whose log cannot be read (not
// scheduled yet, its node unreachable) adds nothing; corectl lacking
// the RBAC to read pods/log is 503, so a missing rule is not taken for
// an empty log. A missing, another owner's or a deleting sandbox is 404.
func (s *Server) sandboxLogs(w http.ResponseWriter, r *http.Request) {
	v2 := strings.HasPrefix(r.URL.Path, "/v2/")
	ch, cred, id, read, ok := s.sandboxRead(w, r, true)
	if !ok {
		return
	}
	sel, ro, none, err := logsQuery(r.URL.Query(), v2)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	if ch.Logs == nil {
		s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "corectl has no pods/log client for this cluster")
		return
	}
	release, why := s.logReads().TryAcquire(cred.ID)
	if why != admission.Admitted {
		s.Metrics.Refused(metrics.RefusalLogReadsBusy)
		msg := fmt.Sprintf("too many log reads in progress: this credential's %d are; retry when one has finished", MaxLogReadsPerCredential)
		if why == admission.GlobalFull {
			msg = fmt.Sprintf("too many log reads in progress: corectl's %d are; retry when one has finished", MaxLogReads)
		}
		s.fail(w, r, http.StatusTooManyRequests, CodeRateLimited, msg)
		return
	}
	defer release()
	ctx, cancel := requestContext(r)
	defer cancel()
	sources, err := ch.Lifecycle.LogSources(ctx, cred.ProjectNamespace, id, read)
	if err != nil {
		s.lifecycleError(w, r, err)
		return
	}
	var all []sandboxlogs.Entry
	for _, src := range sources {
		if none {
			break
		}
		rc, err := ch.Logs.Stream(ctx, cred.ProjectNamespace, src.Pod, src.Container, ro)
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			s.fail(w, r, http.StatusServiceUnavailable, CodeUnavailable, "corectl may not read the sandbox's pod log (RBAC: get pods/log)")
			return
		case err != nil:
			continue
		}
		entries, err := sandboxlogs.Parse(rc)
		rc.Close()
		if err == nil {
			all = append(all, entries...)
		}
	}
	picked := sandboxlogs.Select(all, sel)
	v1 := SandboxLogs{Logs: make([]SandboxLog, 0, len(picked)), LogEntries: make([]SandboxLogEntry, 0, len(picked))}
	for _, e := range picked {
		ts := e.Time.UTC().Format(time.RFC3339Nano)
		v1.Logs = append(v1.Logs, SandboxLog{Timestamp: ts, Line: e.Line})
		v1.LogEntries = append(v1.LogEntries, SandboxLogEntry{Timestamp: ts, Level: "info", Message: e.Line, Fields: map[string]string{}})
	}
	if v2 {
		writeJSON(w, http.StatusOK, SandboxLogsV2{Logs: v1.LogEntries})
		return
	}
	writeJSON(w, http.StatusOK, v1)
}
