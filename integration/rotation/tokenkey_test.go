package rotation

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kwait "k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/harness"
)

// ed25519Pair writes a new Ed25519 key pair as openssl writes it (PKCS #8
// private key, SPKI public key) and returns the two files' contents.
func ed25519Pair(t *testing.T) (private, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})), string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}))
}

// tokenPool is the envd access tokens the traffic uses: the sandbox's and
// those corectl's connect handed out since, the last 32 of them.
type tokenPool struct {
	mu     sync.Mutex
	tokens []sandbox
	next   int
}

func (p *tokenPool) add(sb sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens = append(p.tokens, sb)
	if len(p.tokens) > 32 {
		p.tokens = p.tokens[1:]
	}
}

func (p *tokenPool) reset(sb sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens = []sandbox{sb}
}

func (p *tokenPool) pick() sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return p.tokens[p.next%len(p.tokens)]
}

// TestTokenKeyRotationWithProcesses follows docs/runbook.md "Token key"
// with an EdDSA pair, the gateway's two token_key lines (the current key
// and the rotation slot, as in deploy/portal/gateway/Caddyfile), two
// bin/corectl replicas signing, and data-plane traffic with the tokens
// corectl hands out (create, and connect calls throughout): step 1 adds
// the new public key to the slot, step 2 switches the gateway's key, the
// slot and corectl's signing key in one apply, step 3, once every token of
// the old key has expired, empties the slot. Every step rolls both
// programs. No request is refused; a token of the old key is accepted
// until step 3 and refused after it.
func TestTokenKeyRotationWithProcesses(t *testing.T) {
	keys := t.TempDir()
	gwKey, gwNext, signing := filepath.Join(keys, "key"), filepath.Join(keys, "next"), filepath.Join(keys, "signing.key")
	priv1, pub1 := ed25519Pair(t)
	priv2, pub2 := ed25519Pair(t)
	// The settings (sandgate-settings): SANDGATE_TOKEN_KID, _SLOT_KID,
	// _SLOT_FILE; out of a rotation the slot repeats "key".
	var mu sync.Mutex
	kid, slotKID, slotFile := "k1", "unused-slot", "key"
	settings := func() (string, string, string) { mu.Lock(); defer mu.Unlock(); return kid, slotKID, slotFile }
	set := func(k, sk, sf string) { mu.Lock(); defer mu.Unlock(); kid, slotKID, slotFile = k, sk, sf }
	writeFile(t, gwKey, pub1)
	writeFile(t, signing, priv1)
	r := newRig(t, func(*rig) []string {
		k, _, _ := settings()
		return []string{"-token-key-id", k, "-token-key-algorithm", "EdDSA", "-token-key-file", signing, "-max-timeout", "180s", "-token-grace", "1s"}
	}, func(r *rig, step int) string {
		k, sk, sf := settings()
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}",
			fmt.Sprintf("token_key %s EdDSA %s\n\t\ttoken_key %s EdDSA %s", k, gwKey, sk, filepath.Join(keys, sf)), 1),
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\t"+authorizerBlock(r.front, r.internal, step), 1)
	})
	// Traffic: the first sandbox's token, and the tokens connect hands
	// out, minted by whichever replica answers.
	first := r.create(60)
	pool := &tokenPool{}
	pool.add(first)
	r.startTraffic(pool.pick)
	connecting, stopConnect := context.WithCancel(context.Background())
	var connects sync.WaitGroup
	var current atomic.Value
	current.Store(first.id)
	connects.Add(1)
	go func() {
		defer connects.Done()
		for connecting.Err() == nil {
			id := current.Load().(string)
			var got struct{ EnvdAccessToken string }
			req, _ := http.NewRequestWithContext(connecting, "POST", r.front+"/sandboxes/"+id+"/connect", strings.NewReader(`{"timeout":60}`))
			req.Header.Set("X-API-Key", r.key())
			resp, err := testClient.Do(req)
			if connecting.Err() != nil {
				return
			}
			if err != nil {
				t.Errorf("connect: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil {
				t.Errorf("connect = %d %s", resp.StatusCode, b)
				return
			}
			pool.add(sandbox{id, got.EnvdAccessToken})
		}
	}()
	t.Cleanup(func() { stopConnect(); connects.Wait() })
	r.answered("before the rotation", 20, r.live...)

	// 1. The new public key as the file next, in the slot.
	writeFile(t, gwNext, pub2)
	set("k1", "k2", "next")
	r.rollGateway("step 1", 1)
	r.rollCorectl("step 1")
	// 2. In one apply: key = new public key, next = old; corectl signs
	// with the new private key under k2; the slot holds k1.
	writeFile(t, gwKey, pub2)
	writeFile(t, gwNext, pub1)
	writeFile(t, signing, priv2)
	set("k2", "k1", "next")
	r.rollCorectl("step 2")
	r.rollGateway("step 2", 2)

	// From here new sandboxes and tokens are of k2. A token of the old
	// key for the new sandbox (as a replica not yet rolled would sign)
	// is still accepted.
	// Its end may move to 180 s after its start (-max-timeout), far
	// beyond step 3, which begins about 60 s from here, however long the
	// rolls take; with a cap of 60 s it could end during step 3's rolls.
	second := r.create(60)
	// The fixed entry stand-in learns the new sandbox from its own watch.
	if err := kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
		code, _, err := r.dataPlane(ctx, second)
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the second sandbox never answered: %v", err)
	}
	current.Store(second.id)
	oldKeyFile := filepath.Join(t.TempDir(), "old-signing.key")
	writeFile(t, oldKeyFile, priv1)
	old, err := token.LoadSigningKey("k1", "EdDSA", oldKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	oldTok, err := old.Mint(token.Target{CredentialID: "cred-a", SandboxID: second.id, Port: 49983}, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := r.dataPlane(context.Background(), sandbox{second.id, oldTok}); err != nil || code != http.StatusOK {
		t.Fatalf("a token of the old key before step 3: %d %s %v", code, body, err)
	}

	// 3. Wait until every token of the old key has expired (the first
	// sandbox's: its end, at most -max-timeout after its start, plus
	// -token-grace): the traffic moves to the new sandbox, as clients of
	// an ended sandbox do, and the test waits for that time.
	pool.reset(second)
	var info struct{ EndAt time.Time }
	if st := r.api("GET", "/sandboxes/"+first.id, "", &info); st != http.StatusOK {
		t.Fatalf("GET the first sandbox = %d", st)
	}
	<-time.After(time.Until(info.EndAt.Add(time.Second)))
	set("k2", "unused-slot", "key")
	if err := os.Remove(gwNext); err != nil {
		t.Fatal(err)
	}
	r.rollGateway("step 3", 3)
	r.rollCorectl("step 3")
	stopConnect()
	connects.Wait()
	r.endTraffic()

	if code, _, err := r.dataPlane(context.Background(), sandbox{second.id, oldTok}); err != nil || code == http.StatusOK {
		t.Errorf("a token of the old key after step 3: %d %v, want refused", code, err)
	}
}
