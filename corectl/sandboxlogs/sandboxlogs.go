// Package sandboxlogs reads a sandbox container's log through the
// Kubernetes API (pods/log, the kubelet's copy of the container's
// stdout and stderr) and selects from it the entries of E2B's sandbox
// log routes: a time window, a direction, a substring, a page size.
//
// The kubelet keeps what the container runtime keeps (rotated by size),
// so a sandbox's log is its container's recent output, not E2B's
// retained history; every line is level "info" (the stream has no
// levels). Memory is bounded before parsing: at most MaxReadBytes of a
// container's log are read, at most MaxTailLines lines when reading
// backwards from the newest, and a line longer than MaxLineBytes is cut.
package sandboxlogs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Bounds of one container log read.
const (
	// MaxReadBytes is the most bytes of one container's log read per
	// request (the pods/log limitBytes).
	MaxReadBytes = 4 << 20
	// MaxTailLines is the most lines read when reading backwards from
	// the newest (the pods/log tailLines).
	MaxTailLines = 10000
	// MaxLineBytes is the longest line kept; the rest of a longer line
	// is dropped.
	MaxLineBytes = 16 << 10
)

// Entry is one line of the log.
type Entry struct {
	// Time is when the kubelet recorded the line.
	Time time.Time
	// Line is the line without its trailing newline.
	Line string
}

// ReadOptions say which part of a container log to read.
type ReadOptions struct {
	// Since reads the lines recorded at or after it (to the second: the
	// pods/log sinceTime); zero reads from the oldest kept.
	Since time.Time
	// Tail reads only the newest MaxTailLines lines.
	Tail bool
}

// Source streams one container's log with the kubelet's timestamps
// (each line "<RFC 3339 time> <text>").
type Source interface {
	// Stream opens the log of container in pod ns/pod.
	Stream(ctx context.Context, ns, pod, container string, o ReadOptions) (io.ReadCloser, error)
}

// Kube is a Source over the Kubernetes API's pods/log (RBAC: get on
// pods/log in the sandbox's namespace).
type Kube struct {
	// Pods is a client-go core/v1 client.
	Pods corev1client.PodsGetter
}

// Stream implements Source: pods/log with timestamps, limitBytes
// MaxReadBytes, sinceTime o.Since and, with o.Tail, tailLines
// MaxTailLines. Errors are client-go's (apierrors.IsForbidden tells a
// missing RBAC rule).
func (k Kube) Stream(ctx context.Context, ns, pod, container string, o ReadOptions) (io.ReadCloser, error) {
	limit := int64(MaxReadBytes)
	opts := &corev1.PodLogOptions{Container: container, Timestamps: true, LimitBytes: &limit}
	if !o.Since.IsZero() {
		opts.SinceTime = &metav1.Time{Time: o.Since.Truncate(time.Second)}
	}
	if o.Tail {
		tail := int64(MaxTailLines)
		opts.TailLines = &tail
	}
	return k.Pods.Pods(ns).GetLogs(pod, opts).Stream(ctx)
}

// ErrTooLarge: the stream held more than MaxReadBytes (a Source that
// ignores limitBytes); nothing is returned.
var ErrTooLarge = errors.New("sandboxlogs: the log stream is larger than the read limit")

// Parse reads a log stream of "<RFC 3339 time> <text>" lines, at most
// MaxReadBytes (more is ErrTooLarge). A line longer than MaxLineBytes is
// cut there; a line without a readable time (a continuation the runtime
// split) takes the time of the line before it, or is dropped when it is
// the first. Errors: ErrTooLarge, or the stream's read error.
func Parse(r io.Reader) ([]Entry, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, MaxReadBytes+1), 64<<10)
	var out []Entry
	var last time.Time
	read := 0
	for {
		line, err := readLine(br, &read)
		if read > MaxReadBytes {
			return nil, ErrTooLarge
		}
		if len(line) > 0 || err == nil {
			ts, text, ok := bytes.Cut(line, []byte(" "))
			at, perr := time.Parse(time.RFC3339Nano, string(ts))
			switch {
			case ok && perr == nil:
				last = at
				out = append(out, Entry{Time: at, Line: string(text)})
			case !last.IsZero():
				out = append(out, Entry{Time: last, Line: string(line)})
			}
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads one line without its newline, keeping at most
// MaxLineBytes of it; *read counts every byte consumed.
func readLine(br *bufio.Reader, read *int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		*read += len(frag)
		frag = bytes.TrimSuffix(frag, []byte("\n"))
		if room := MaxLineBytes - len(line); room > 0 {
			line = append(line, frag[:min(room, len(frag))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\r")), err
	}
}

// Query selects entries.
type Query struct {
	// From and To bound the entries' times, both included; zero: no
	// bound.
	From, To time.Time
	// Backward orders the newest first and keeps the newest Limit;
	// otherwise the oldest first and the oldest Limit.
	Backward bool
	// Limit is the most entries returned (0: none).
	Limit int
	// Search keeps the lines that contain it (case-sensitive; "": all).
	Search string
}

// Select returns the entries of all (from any number of pods, in any
// order) that q selects, ordered by time (ties keep all's order).
func Select(all []Entry, q Query) []Entry {
	out := make([]Entry, 0, min(len(all), max(q.Limit, 0)))
	sorted := slices.Clone(all)
	slices.SortStableFunc(sorted, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	if q.Backward {
		slices.Reverse(sorted)
	}
	for _, e := range sorted {
		if len(out) >= q.Limit {
			break
		}
		if !q.From.IsZero() && e.Time.Before(q.From) || !q.To.IsZero() && e.Time.After(q.To) || !strings.Contains(e.Line, q.Search) {
			continue
		}
		out = append(out, e)
	}
	return out
}
