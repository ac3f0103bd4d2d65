// Package execdtoken derives each sandbox's execd access token from a
// cluster secret, so that no two sandboxes share one.
//
// The OpenSandbox execd takes its access token from --access-token or the
// EXECD_ACCESS_TOKEN environment variable (components/execd/pkg/flag) and
// refuses a request without it (401, docs/wire-facts.md §X1.2). Whatever
// runs as root in a sandbox can read that value (execd's environment and
// command line are in /proc), and can stand on port 44772 in execd's place
// to read the token the gateway sends. One token for a whole cluster would
// therefore open every other sandbox's execd to a tenant with root in one.
// Derived per sandbox, it opens only the sandbox the tenant already has.
//
// The control plane (corectl, which builds each sandbox's pod) and the
// gateway share the cluster secret and compute the same value: corectl
// sets EXECD_ACCESS_TOKEN=Derive(secret, sandboxID) on the container that
// runs execd, the gateway sends Derive(secret, sandboxID) as
// X-EXECD-ACCESS-TOKEN. The secret itself never enters a sandbox.
package execdtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Label separates this derivation from any other use of the secret; it is
// part of the HMAC input, so changing it changes every token.
const Label = "sandgate execd access token v1"

// MinSecretBytes is the shortest cluster secret Check accepts (32 bytes,
// the HMAC-SHA256 block's security level).
const MinSecretBytes = 32

// ErrShortSecret is returned by Check for a secret under MinSecretBytes.
var ErrShortSecret = errors.New("execdtoken: the cluster secret must be at least 32 bytes")

// Check reports whether secret may derive tokens: at least MinSecretBytes
// bytes. It never includes the secret in its error.
func Check(secret []byte) error {
	if len(secret) < MinSecretBytes {
		return ErrShortSecret
	}
	return nil
}

// Derive returns the execd access token of sandbox sandboxID (an
// OpenSandbox sandbox ID: the BatchSandbox name) under the cluster secret:
// the lower-case hex of HMAC-SHA256(secret, Label || 0x00 || sandboxID),
// 64 characters, fit for a header and an environment variable. It is a
// pure function: the same inputs give the same token in every process.
func Derive(secret []byte, sandboxID string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(Label))
	m.Write([]byte{0})
	m.Write([]byte(sandboxID))
	return hex.EncodeToString(m.Sum(nil))
}
