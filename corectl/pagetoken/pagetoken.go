// Package pagetoken is the nextToken of corectl's sandbox lists (E2B's
// GET /v2/sandboxes paging): an opaque cursor naming the last entry of a
// page by its start time (whole seconds) and sandbox ID, the list's sort
// key.
package pagetoken

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxLength bounds a token, in bytes.
const MaxLength = 256

// ErrInvalid: a token this list did not issue.
var ErrInvalid = errors.New("pagetoken: invalid nextToken")

// encoding is unpadded base64url. Decode accepts only the spelling Encode
// writes (Go's decoder also takes line breaks and non-zero trailing bits),
// so each cursor has exactly one token.
var encoding = base64.RawURLEncoding

// Encode returns the cursor after the entry started at start with ID id:
// unpadded base64url of "<Unix seconds>/<id>".
func Encode(start time.Time, id string) string {
	return encoding.EncodeToString([]byte(strconv.FormatInt(start.Unix(), 10) + "/" + id))
}

// Decode reads a cursor: the entry's start (whole seconds) and ID, a
// DNS-1123 label. Anything else (longer than MaxLength, not the canonical
// base64url spelling, a non-canonical number, a bad ID) wraps ErrInvalid.
func Decode(tok string) (time.Time, string, error) {
	bad := fmt.Errorf("%w: not a token this list issued", ErrInvalid)
	if len(tok) > MaxLength {
		return time.Time{}, "", bad
	}
	b, err := encoding.DecodeString(tok)
	if err != nil || encoding.EncodeToString(b) != tok {
		return time.Time{}, "", bad
	}
	sec, id, ok := strings.Cut(string(b), "/")
	unix, err := strconv.ParseInt(sec, 10, 64)
	if !ok || err != nil || strconv.FormatInt(unix, 10) != sec || len(validation.IsDNS1123Label(id)) > 0 {
		return time.Time{}, "", bad
	}
	return time.Unix(unix, 0), id, nil
}
