package execd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Kind says which hop a failure came from and what it means.
type Kind int

// Failure kinds. The ingress kinds are recognised by the OpenSandbox
// Ingress's text/plain "OpenSandbox Ingress: …" bodies (docs/wire-facts.md §X2.6);
// execd kinds by execd's JSON error body (§X1.3).
const (
	// KindUnexpected: a response no hop is documented to send.
	KindUnexpected Kind = iota
	// KindUnreachable: the fixed entry could not be dialled.
	KindUnreachable
	// KindTimeout: no answer within the transport's timeouts.
	KindTimeout
	// KindCanceled: the caller canceled the request.
	KindCanceled
	// KindSandboxNotFound: the ingress does not know the sandbox (404).
	KindSandboxNotFound
	// KindSandboxNotReady: the sandbox is not ready or has no endpoint (503).
	KindSandboxNotReady
	// KindSandboxUnreachable: the ingress could not reach the pod (502, empty body).
	KindSandboxUnreachable
	// KindBadRoute: the ingress refused the URI (400).
	KindBadRoute
	// KindUnauthorized: execd refused its access token (401).
	KindUnauthorized
	// KindNoRoute: execd has no such route (gin's "404 page not found").
	KindNoRoute
	// KindNotFound: execd reported FILE_NOT_FOUND.
	KindNotFound
	// KindExecd: any other execd JSON error; Code and Status say which.
	KindExecd
)

var kindNames = [...]string{"unexpected", "unreachable", "timeout", "canceled", "sandbox_not_found",
	"sandbox_not_ready", "sandbox_unreachable", "bad_route", "unauthorized", "no_route", "not_found", "execd"}

// String returns a short snake_case name of the kind, used in logs.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a failure on the way to or inside execd. Status is the HTTP
// status when there was a response; Code is execd's error code
// (INVALID_REQUEST_BODY, RUNTIME_ERROR, FILE_NOT_FOUND, …) when it sent one;
// Message is safe to show to the SDK user: it never contains tokens.
type Error struct {
	// Kind is where the call failed; the data plane maps it to its code.
	Kind Kind
	// Status is the HTTP status of execd's (or the ingress's) answer; 0
	// when there was no response.
	Status int
	// Code is execd's error code, when its body had one.
	Code string
	// Message is safe to show to the SDK user.
	Message string
}

// Error returns "execd: <kind>: <message>".
func (e *Error) Error() string {
	s := "execd: " + e.Kind.String()
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

const ingressPrefix = "OpenSandbox Ingress: "

// CheckResponse returns nil for a 2xx response. Otherwise it reads up to
// 4 KiB of the body, closes it and returns an *Error classifying the answer:
// ingress text errors by status, execd JSON errors by code, execd 401 and
// gin's 404 by their bodies.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return responseError(resp)
}

// responseError reads up to 4 KiB of resp's body (none when it has none),
// closes it and classifies the answer as CheckResponse does, whatever its
// status (a refused WebSocket handshake may answer 200).
func responseError(resp *http.Response) *Error {
	var b []byte
	if resp.Body != nil {
		b, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
	}
	return classify(resp.StatusCode, b)
}

func classify(status int, body []byte) *Error {
	text := strings.TrimSpace(string(body))
	e := &Error{Status: status}
	if msg, ok := strings.CutPrefix(text, ingressPrefix); ok {
		e.Message = msg
		switch status {
		case http.StatusNotFound:
			e.Kind = KindSandboxNotFound
		case http.StatusServiceUnavailable:
			e.Kind = KindSandboxNotReady
		case http.StatusBadRequest:
			e.Kind = KindBadRoute
		default:
			e.Kind = KindSandboxUnreachable
		}
		return e
	}
	if status == http.StatusBadGateway && text == "" {
		e.Kind = KindSandboxUnreachable
		return e
	}
	var je struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(body, &je) == nil {
		switch {
		case status == http.StatusUnauthorized && je.Error != "":
			e.Kind = KindUnauthorized
			e.Message = "execd refused the access token"
			return e
		case je.Code != "":
			e.Code = je.Code
			e.Message = je.Message
			e.Kind = KindExecd
			if je.Code == "FILE_NOT_FOUND" {
				e.Kind = KindNotFound
			}
			return e
		}
	}
	if status == http.StatusNotFound && text == "404 page not found" {
		e.Kind = KindNoRoute
		e.Message = "execd has no such route"
		return e
	}
	e.Kind = KindUnexpected
	e.Message = fmt.Sprintf("unexpected HTTP %d from the fixed entry", status)
	return e
}
