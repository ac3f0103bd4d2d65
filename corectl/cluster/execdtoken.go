package cluster

// The per-sandbox execd access token (issue 29 finding 4): the cluster
// secret the gateway's execd_token_secret also reads, and the token each
// sandbox's execd is given.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sandgate/sandgate/gateway/execdtoken"
	corev1 "k8s.io/api/core/v1"
)

// MaxExecdTokenSecretBytes bounds the execdTokenSecretFile, in bytes
// (4 KiB); a larger file is refused before it is read whole.
const MaxExecdTokenSecretBytes = 4 << 10

// ExecdAccessTokenEnv is the environment variable the OpenSandbox execd
// takes its access token from (docs/wire-facts.md §X1.1).
const ExecdAccessTokenEnv = "EXECD_ACCESS_TOKEN"

// execdSecret holds the loaded cluster secret. Kept behind a pointer so
// that printing a Cluster (%+v) shows an address, never the bytes.
type execdSecret struct{ b []byte }

// LoadExecdTokenSecret reads the ExecdTokenSecretFile as the gateway's
// {file./path} placeholder does (at most MaxExecdTokenSecretBytes; one
// trailing "\n", then one trailing "\r", dropped), so both sides derive
// from the same bytes, and checks it (execdtoken.Check: at least 32
// bytes). Validate calls it, and corectl's daemon at start for a cluster
// not yet loaded; once loaded it does nothing. Without the setting it
// does nothing. Errors name the file, never its content.
func (c *Cluster) LoadExecdTokenSecret() error {
	if c.ExecdTokenSecretFile == "" || c.execdSecret != nil {
		return nil
	}
	f, err := os.Open(c.ExecdTokenSecretFile)
	if err != nil {
		return fmt.Errorf("execdTokenSecretFile: %s", err.Error())
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxExecdTokenSecretBytes+1))
	if err != nil {
		return fmt.Errorf("execdTokenSecretFile: read %s: %s", c.ExecdTokenSecretFile, err.Error())
	}
	if len(b) > MaxExecdTokenSecretBytes {
		return fmt.Errorf("execdTokenSecretFile: %s is larger than %d bytes", c.ExecdTokenSecretFile, MaxExecdTokenSecretBytes)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if err := execdtoken.Check(b); err != nil {
		return fmt.Errorf("execdTokenSecretFile: %s: the secret must be at least %d bytes (after one trailing newline is dropped)", c.ExecdTokenSecretFile, execdtoken.MinSecretBytes)
	}
	c.execdSecret = &execdSecret{b: b}
	return nil
}

// ErrExecdSecretNotLoaded: the cluster names an execdTokenSecretFile
// that LoadExecdTokenSecret has not read; a create refuses rather than
// start an execd without its token.
var ErrExecdSecretNotLoaded = errors.New("cluster: execdTokenSecretFile is set but was not loaded")

// ExecdToken returns the execd access token of sandbox sandboxID in this
// cluster, execdtoken.Derive(secret, sandboxID); "" and nil when the
// cluster has no execdTokenSecretFile; ErrExecdSecretNotLoaded when it
// has one that was not loaded. The secret itself never leaves this
// package.
func (c *Cluster) ExecdToken(sandboxID string) (string, error) {
	switch {
	case c.execdSecret != nil:
		return execdtoken.Derive(c.execdSecret.b, sandboxID), nil
	case c.ExecdTokenSecretFile != "":
		return "", fmt.Errorf("%w (cluster %s)", ErrExecdSecretNotLoaded, c.ID)
	}
	return "", nil
}

// ErrNoExecdContainer: a pod template has no container named
// execdContainer.
var ErrNoExecdContainer = errors.New("cluster: no execd container")

// SetExecdToken sets env ExecdAccessTokenEnv=token on the container of
// spec that runs execd — the one named ExecdContainer, or, when that is
// empty, the sandbox container sandboxContainer (an index into
// spec.Containers) — replacing any entry of that name there. Errors wrap
// ErrNoExecdContainer.
func (c *Cluster) SetExecdToken(spec *corev1.PodSpec, sandboxContainer int, token string) error {
	i := sandboxContainer
	if c.ExecdContainer != "" {
		i = -1
		for j := range spec.Containers {
			if spec.Containers[j].Name == c.ExecdContainer {
				i = j
			}
		}
	}
	if i < 0 || i >= len(spec.Containers) {
		return fmt.Errorf("%w: the pod has no container named %q (cluster %s execdContainer)", ErrNoExecdContainer, c.ExecdContainer, c.ID)
	}
	ct := &spec.Containers[i]
	env := ct.Env[:0:0]
	for _, e := range ct.Env {
		if e.Name != ExecdAccessTokenEnv {
			env = append(env, e)
		}
	}
	ct.Env = append(env, corev1.EnvVar{Name: ExecdAccessTokenEnv, Value: token})
	return nil
}
