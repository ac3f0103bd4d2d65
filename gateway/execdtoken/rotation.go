package execdtoken

// Several secrets at once, for a rotation: a sandbox's execd keeps the
// token it was started with for its whole life, so while sandboxes created
// under the old secret and under the new one both run, the gateway holds
// both and must send each sandbox the token of its own secret.

import (
	"context"
	"crypto/sha256"
	"sync"
)

// MaxSecrets is the most secrets one cluster may hold at once (a
// rotation needs two; a sandbox unknown to a Chooser costs up to this
// many pings).
const MaxSecrets = 4

// DefaultMaxSandboxes bounds a Chooser's memory when MaxSandboxes is 0:
// 65,536 sandboxes, about 10 MiB.
const DefaultMaxSandboxes = 1 << 16

// Accepts reports whether the execd of a sandbox accepts token: true when
// it does, false with a nil error when it refused that token (execd's 401),
// and an error when nobody could say (the sandbox is not ready, the fixed
// entry cannot be reached, …). The gateway sends execd's GET /ping.
type Accepts func(ctx context.Context, token string) (bool, error)

// Chooser picks, for each sandbox, the secret among several that its
// execd's token was derived from, and remembers it: the first secret whose
// token the sandbox's execd accepts (Accepts, tried in the order given).
// A sandbox's execd token is fixed when the control plane creates it
// (EXECD_ACCESS_TOKEN in its pod), so what was learnt stays true for the
// sandbox's life. Only a positive answer is remembered. Trying a token
// gives it to whatever answers on the sandbox's execd port, which a
// sandbox's root may be; each token opens only that same sandbox, which
// that root already has. The zero Chooser is ready to use and safe for
// concurrent use.
type Chooser struct {
	// MaxSandboxes bounds how many sandboxes are remembered; when full, an
	// arbitrary one is forgotten (it is asked again on its next request).
	// 0 means DefaultMaxSandboxes.
	MaxSandboxes int

	mu    sync.Mutex
	known map[string][sha256.Size]byte // cluster ID, NUL, sandbox ID → SHA-256 of its secret
}

// Token returns the execd token to send sandbox sandboxID of cluster
// clusterID, whose execd tokens are derived from one of secrets (checked,
// at most MaxSecrets). With one secret it is Derive(secrets[0], sandboxID)
// and nothing is asked. With several, a remembered choice is used when its
// secret is still among secrets; otherwise accepts is asked for each
// secret's token in order and the first accepted is remembered and
// returned. When none is accepted, or accepts fails, the first secret's
// token is returned and nothing is remembered, so the request goes on and
// execd's own answer (401, or the sandbox's state) is what the caller
// sees. With no secrets it returns "".
func (c *Chooser) Token(ctx context.Context, clusterID, sandboxID string, secrets [][]byte, accepts Accepts) string {
	switch len(secrets) {
	case 0:
		return ""
	case 1:
		return Derive(secrets[0], sandboxID)
	}
	key := clusterID + "\x00" + sandboxID
	c.mu.Lock()
	sum, ok := c.known[key]
	c.mu.Unlock()
	if ok {
		for _, s := range secrets {
			if sha256.Sum256(s) == sum {
				return Derive(s, sandboxID)
			}
		}
	}
	for _, s := range secrets {
		tok := Derive(s, sandboxID)
		yes, err := accepts(ctx, tok)
		if err != nil {
			break
		}
		if yes {
			c.remember(key, sha256.Sum256(s))
			return tok
		}
	}
	return Derive(secrets[0], sandboxID)
}

// Forget drops what was learnt of sandboxID in clusterID, e.g. after its
// execd refused the remembered token.
func (c *Chooser) Forget(clusterID, sandboxID string) {
	c.mu.Lock()
	delete(c.known, clusterID+"\x00"+sandboxID)
	c.mu.Unlock()
}

// Len returns how many sandboxes are remembered.
func (c *Chooser) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.known)
}

func (c *Chooser) remember(key string, sum [sha256.Size]byte) {
	limit := c.MaxSandboxes
	if limit <= 0 {
		limit = DefaultMaxSandboxes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		c.known = make(map[string][sha256.Size]byte)
	}
	if _, ok := c.known[key]; !ok && len(c.known) >= limit {
		for k := range c.known {
			delete(c.known, k)
			break
		}
	}
	c.known[key] = sum
}
