// Package machineclient is the node's client of Core's machine API
// (package node/machine, docs/node-machine-api.md): the enrolment preview
// and the enrolment, the node's authenticated configuration (the exact
// runtime of a generation), and the release downloads with resumption.
// Answers are decoded with node/machine's strict decoders; bodies are
// bounded before they are parsed; the credential and the enrolment token
// go only into the Authorization header and never into an error.
package machineclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/node/machine"
)

// Errors. Every error of the client wraps one of them.
var (
	// ErrRefused: Core refused the credential or the enrolment token
	// (401), for good.
	ErrRefused = errors.New("machineclient: Core refused the credential or enrolment token (HTTP 401)")
	// ErrGenerationUnknown: Core has no runtime of that generation for
	// the node's pool (404 generation_unknown).
	ErrGenerationUnknown = errors.New("machineclient: Core knows no runtime of that generation")
	// ErrEnrolmentChanged: Core would enrol the node with another
	// generation than the one it previewed (409 enrolment_changed; the
	// deployment changed meanwhile); the token was not used.
	ErrEnrolmentChanged = errors.New("machineclient: the pool's enrolled generation changed since the preview; the token was not used")
	// ErrTransfer: the request failed or the answer is not the one the
	// API promises (a network error, another status, a malformed or
	// oversized body, a short or long download).
	ErrTransfer = errors.New("machineclient: transfer failed")
	// ErrAnswered is wrapped, with ErrTransfer, by another status Core
	// answered with its own error code (a machine.Error body): Core
	// received the request and refused it. A network error, a malformed
	// answer or a status without Core's error body (a proxy's) does not
	// wrap it: whether Core acted on the request is then unknown.
	ErrAnswered = errors.New("machineclient: Core refused the request")
)

// Auth authenticates a request: a node credential with the node's ID, or
// an enrolment token.
type Auth struct {
	// NodeID and Credential: a node credential (Bearer) and the node's
	// UUID (X-Sandgate-Node-Id on downloads, node_id on config).
	NodeID, Credential string
	// Token is an enrolment token (Bearer), used when Credential is
	// empty.
	Token string
}

func (a Auth) header(h http.Header) {
	if a.Credential != "" {
		h.Set("Authorization", "Bearer "+a.Credential)
		if a.NodeID != "" {
			h.Set(machine.NodeIDHeader, a.NodeID)
		}
		return
	}
	h.Set("Authorization", "Bearer "+a.Token)
}

// Client talks to one Core origin.
type Client struct {
	origin *url.URL
	http   *http.Client
}

// New returns a client of Core at origin (http or https, optionally with
// a path prefix); tlsConf (optional) configures https. Redirects are not
// followed: a redirect is a transfer failure.
func New(origin *url.URL, tlsConf *tls.Config) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	tr.ResponseHeaderTimeout = time.Minute
	return &Client{origin: origin, http: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// url returns the absolute URL of path (which starts with "/") below the
// origin.
func (c *Client) url(path string, query url.Values) string {
	u := *c.origin
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = query.Encode()
	u.Fragment = ""
	return u.String()
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, auth Auth, body []byte, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, query), rd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTransfer, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	auth.header(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL in a url.Error holds no secret (the credential is a
		// header); the error is safe to log.
		return nil, fmt.Errorf("%w: %v", ErrTransfer, err)
	}
	return resp, nil
}

// refusal turns a non-success answer into an error.
func refusal(resp *http.Response) error {
	e := machine.DecodeError(resp.Body)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return ErrRefused
	case resp.StatusCode == http.StatusNotFound && e.Error == machine.CodeGenerationUnknown:
		return ErrGenerationUnknown
	case resp.StatusCode == http.StatusConflict && e.Error == machine.CodeEnrolmentChanged:
		return ErrEnrolmentChanged
	}
	if e.Error != "" {
		return fmt.Errorf("%w: %w: HTTP %d %s", ErrTransfer, ErrAnswered, resp.StatusCode, e.Error)
	}
	return fmt.Errorf("%w: HTTP %d", ErrTransfer, resp.StatusCode)
}

// Config reads the node's authenticated configuration; with generation >
// 0, the answer names exactly that generation's runtime
// (ErrGenerationUnknown when Core has none).
func (c *Client) Config(ctx context.Context, auth Auth, generation int64) (*machine.Config, error) {
	q := url.Values{"node_id": {auth.NodeID}}
	if generation > 0 {
		q.Set("generation", strconv.FormatInt(generation, 10))
	}
	resp, err := c.do(ctx, http.MethodGet, machine.ConfigPath, q, auth, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refusal(resp)
	}
	cfg, err := machine.DecodeConfig(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: configuration: %v", ErrTransfer, err)
	}
	if cfg.NodeID != auth.NodeID {
		return nil, fmt.Errorf("%w: the configuration names another node", ErrTransfer)
	}
	return cfg, nil
}

// Runtime returns generation g's runtime from the node's authenticated
// configuration: the answer must name g with exactly digest (a
// different digest is a provenance failure, ErrTransfer).
func (c *Client) Runtime(ctx context.Context, auth Auth, g int64, digest string) (machine.Runtime, error) {
	cfg, err := c.Config(ctx, auth, g)
	if err != nil {
		return machine.Runtime{}, err
	}
	return FindRuntime(cfg.Runtimes, g, digest)
}

// FindRuntime returns the runtime of generation g with digest from
// runtimes: ErrGenerationUnknown when none names g, ErrTransfer when the
// one that does binds another digest.
func FindRuntime(runtimes []machine.Runtime, g int64, digest string) (machine.Runtime, error) {
	for _, r := range runtimes {
		if r.Generation == g {
			if r.SpecificationDigest != digest {
				return machine.Runtime{}, fmt.Errorf("%w: Core's configuration binds generation %d to another specification", ErrTransfer, g)
			}
			return r, nil
		}
	}
	return machine.Runtime{}, ErrGenerationUnknown
}

// Preview reads, with an enrolment token and without consuming it, what
// a node enrolled with that token would get: GET machine.EnrolPath.
func (c *Client) Preview(ctx context.Context, token string) (*machine.EnrolPreview, error) {
	resp, err := c.do(ctx, http.MethodGet, machine.EnrolPath, nil, Auth{Token: token}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refusal(resp)
	}
	p, err := machine.DecodeEnrolPreview(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: enrolment preview: %v", ErrTransfer, err)
	}
	return p, nil
}

// Enrol enrols the node (POST machine.EnrolPath), consuming the token.
func (c *Client) Enrol(ctx context.Context, req *machine.EnrolRequest) (*machine.EnrolResponse, error) {
	body, err := machine.Encode(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodPost, machine.EnrolPath, nil, Auth{Token: req.EnrolmentToken}, body,
		http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return nil, refusal(resp)
	}
	out, err := machine.DecodeEnrolResponse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: enrolment answer: %v", ErrTransfer, err)
	}
	return out, nil
}

// Get downloads a small file (a manifest or a provider spec) of at most
// limit bytes.
func (c *Client) Get(ctx context.Context, path string, auth Auth, limit int64) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, path, nil, auth, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refusal(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTransfer, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrTransfer, limit)
	}
	return b, nil
}

// Size asks for the first byte of a download and returns the size Core
// states for the whole file (Content-Range), without transferring it.
func (c *Client) Size(ctx context.Context, path string, auth Auth) (int64, error) {
	resp, err := c.do(ctx, http.MethodGet, path, nil, auth, nil, http.Header{"Range": {"bytes=0-0"}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 2))
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != 0 {
			return 0, fmt.Errorf("%w: malformed Content-Range", ErrTransfer)
		}
		return total, nil
	case http.StatusOK:
		if resp.ContentLength < 0 {
			return 0, fmt.Errorf("%w: no length", ErrTransfer)
		}
		return resp.ContentLength, nil
	}
	return 0, refusal(resp)
}

// Download fetches the file at path into dst, which holds the bytes of
// an earlier, interrupted download (maybe none): only the missing bytes
// are asked for (Range), unless Core answers with the whole file. At
// most size bytes are accepted; the result must be exactly size bytes
// long (the caller then verifies its checksum). dst is fsync'd.
//
// etag (optional) is the entity tag Core gives the file ("sha256:<hex>"
// quoted): a resumed request carries it as If-Range, so that bytes of
// another file are never appended.
func (c *Client) Download(ctx context.Context, path string, auth Auth, dst *os.File, size int64, etag string) error {
	fi, err := dst.Stat()
	if err != nil {
		return err
	}
	off := fi.Size()
	if off > size {
		// More bytes than the manifest declares: not ours to keep.
		if err := dst.Truncate(0); err != nil {
			return err
		}
		off = 0
	}
	if off < size {
		var hdr http.Header
		if off > 0 {
			hdr = http.Header{"Range": {"bytes=" + strconv.FormatInt(off, 10) + "-"}}
			if etag != "" {
				hdr.Set("If-Range", etag)
			}
		}
		resp, err := c.do(ctx, http.MethodGet, path, nil, auth, nil, hdr)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			off = 0
			if err := dst.Truncate(0); err != nil {
				return err
			}
		case http.StatusPartialContent:
			start, total, ok := contentRange(resp.Header.Get("Content-Range"))
			if !ok || start != off || total != size {
				return fmt.Errorf("%w: Content-Range does not continue the download", ErrTransfer)
			}
		default:
			return refusal(resp)
		}
		if _, err := dst.Seek(off, io.SeekStart); err != nil {
			return err
		}
		n, err := io.Copy(dst, io.LimitReader(resp.Body, size-off))
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return err // a local write error (a full disk), not a transfer failure
			}
			return fmt.Errorf("%w: %v", ErrTransfer, err)
		}
		if off+n != size {
			return fmt.Errorf("%w: got %d bytes, the manifest declares %d", ErrTransfer, off+n, size)
		}
		// One byte more than declared is never written, only detected.
		if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err == nil {
			return fmt.Errorf("%w: more bytes than the manifest declares", ErrTransfer)
		}
	}
	return dst.Sync()
}

// contentRange parses "bytes start-end/total".
func contentRange(s string) (start, total int64, ok bool) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, false
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	first, _, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	total, err2 := strconv.ParseInt(tot, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || total < 0 {
		return 0, 0, false
	}
	return start, total, true
}
