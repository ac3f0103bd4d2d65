package sandgatecmd

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/gateway/token"
)

// cmdHMACSecret is the recognisable HMAC secret of the command tests; it must
// never appear in an error or on stdout.
const cmdHMACSecret = "sandgate-cmd-test-secret-DO-NOT-LEAK-9d2c7a61"

// keyFiles are real key files in a temporary directory.
type keyFiles struct {
	dir                 string
	hmac                string // HS256 secret
	edPriv, edPub       string // EdDSA PEM keys
	ecPriv, ecPub       string // ES256 PEM keys
	privateKeyMaterials []string
}

func newKeyFiles(t *testing.T) keyFiles {
	t.Helper()
	dir := t.TempDir()
	k := keyFiles{
		dir:    dir,
		hmac:   filepath.Join(dir, "hmac.key"),
		edPriv: filepath.Join(dir, "ed.pem"), edPub: filepath.Join(dir, "ed.pub.pem"),
		ecPriv: filepath.Join(dir, "ec.pem"), ecPub: filepath.Join(dir, "ec.pub.pem"),
	}
	writeKey(t, k.hmac, []byte(cmdHMACSecret+"\n"))
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		priv, pub   any
		privF, pubF string
	}{{edPriv, edPub, k.edPriv, k.edPub}, {ecPriv, &ecPriv.PublicKey, k.ecPriv, k.ecPub}} {
		privDER, err := x509.MarshalPKCS8PrivateKey(p.priv)
		if err != nil {
			t.Fatal(err)
		}
		pubDER, err := x509.MarshalPKIXPublicKey(p.pub)
		if err != nil {
			t.Fatal(err)
		}
		writeKey(t, p.privF, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
		writeKey(t, p.pubF, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))
		// The base64 body of the private key, as it appears in the file, in
		// pieces long enough to be recognisable.
		b64 := base64.StdEncoding.EncodeToString(privDER)
		for i := 0; i+16 <= len(b64); i += 16 {
			k.privateKeyMaterials = append(k.privateKeyMaterials, b64[i:i+16])
		}
	}
	return k
}

func writeKey(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// newTokenCommand builds the registered sandgate-token command the way
// Caddy's CLI does (Command.CobraFunc on a fresh cobra.Command).
func newTokenCommand(t *testing.T) *cobra.Command {
	t.Helper()
	def, ok := caddycmd.Commands()["sandgate-token"]
	if !ok {
		t.Fatal("the sandgate-token command is not registered")
	}
	cmd := &cobra.Command{Use: def.Name, SilenceUsage: true, SilenceErrors: true}
	def.CobraFunc(cmd)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return cmd
}

// captureStdout runs fn with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	old := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = old }()
	fn()
	os.Stdout = old
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s := <-out
	_ = r.Close()
	return s
}

// runCLI runs the registered command with args through cobra.
func runCLI(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	cmd := newTokenCommand(t)
	cmd.SetArgs(args)
	stdout = captureStdout(t, func() { err = cmd.Execute() })
	return stdout, err
}

// runDirect parses args with the command's flags and calls cmdMintToken.
func runDirect(t *testing.T, args ...string) (code int, stdout string, err error) {
	t.Helper()
	cmd := newTokenCommand(t)
	if perr := cmd.ParseFlags(args); perr != nil {
		t.Fatalf("parsing %v: %v", args, perr)
	}
	stdout = captureStdout(t, func() { code, err = cmdMintToken(caddycmd.Flags{FlagSet: cmd.Flags()}) })
	return code, stdout, err
}

// decodeSegment decodes one base64url JWT segment into a JSON object.
func decodeSegment(t *testing.T, seg string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatalf("decoding JWT segment: %v", err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("JWT segment is not JSON: %v", err)
	}
	return m
}

func TestSandgateTokenCommandFlags(t *testing.T) {
	cmd := newTokenCommand(t)
	for _, name := range []string{"key", "algorithm", "kid", "credential", "sandbox", "ttl", "port", "traffic"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("flag --%s is not defined", name)
		}
	}
	if cmd.RunE == nil {
		t.Error("the command has no RunE")
	}
}

// TestSandgateTokenMintsVerifiableToken runs the command and checks that the
// printed token is accepted by a token.Verifier with the verification key
// and carries the requested claims, kid and lifetime.
func TestSandgateTokenMintsVerifiableToken(t *testing.T) {
	k := newKeyFiles(t)
	for _, tc := range []struct {
		alg, sign, verify string
		extra             []string
		ttl               time.Duration
		port              int
	}{
		{"HS256", k.hmac, k.hmac, []string{"--ttl", "10m", "--port", "8080"}, 10 * time.Minute, 8080},
		{"EdDSA", k.edPriv, k.edPub, nil, time.Hour, 49983}, // defaults
		{"ES256", k.ecPriv, k.ecPub, []string{"--ttl", "90s"}, 90 * time.Second, 49983},
	} {
		t.Run(tc.alg, func(t *testing.T) {
			args := append([]string{"--key", tc.sign, "--algorithm", tc.alg, "--kid", "kid-" + tc.alg,
				"--credential", "cred-a", "--sandbox", "sbx-1"}, tc.extra...)
			before := time.Now().Truncate(time.Second)
			out, err := runCLI(t, args...)
			after := time.Now()
			if err != nil {
				t.Fatalf("sandgate-token %v: %v", args, err)
			}
			if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
				t.Fatalf("stdout = %q, want exactly one line", out)
			}
			raw := strings.TrimSuffix(out, "\n")

			key, err := token.LoadKey("kid-"+tc.alg, tc.alg, tc.verify)
			if err != nil {
				t.Fatal(err)
			}
			v, err := token.NewVerifier([]token.Key{key}, 0)
			if err != nil {
				t.Fatal(err)
			}
			tgt, err := v.Verify(raw)
			if err != nil {
				t.Fatalf("the verifier refuses the printed token: %v", err)
			}
			if want := (token.Target{CredentialID: "cred-a", SandboxID: "sbx-1", Port: tc.port}); tgt != want {
				t.Errorf("verified target = %+v, want %+v", tgt, want)
			}

			parts := strings.Split(raw, ".")
			if len(parts) != 3 {
				t.Fatalf("token has %d segments, want 3", len(parts))
			}
			hdr, claims := decodeSegment(t, parts[0]), decodeSegment(t, parts[1])
			if hdr["alg"] != tc.alg || hdr["kid"] != "kid-"+tc.alg {
				t.Errorf("header = %v, want alg %s and kid kid-%s", hdr, tc.alg, tc.alg)
			}
			iat, _ := claims["iat"].(float64)
			exp, _ := claims["exp"].(float64)
			if iat < float64(before.Unix()) || iat > float64(after.Unix()) {
				t.Errorf("iat = %v, want the time of the call (%d..%d)", iat, before.Unix(), after.Unix())
			}
			if got := time.Duration(exp-iat) * time.Second; got != tc.ttl {
				t.Errorf("exp - iat = %s, want the ttl %s", got, tc.ttl)
			}

			// A verifier with another secret under the same kid refuses it.
			if tc.alg == "HS256" {
				otherFile := filepath.Join(t.TempDir(), "other.key")
				writeKey(t, otherFile, []byte(strings.Repeat("x", 40)))
				other, err := token.LoadKey("kid-HS256", "HS256", otherFile)
				if err != nil {
					t.Fatal(err)
				}
				ov, err := token.NewVerifier([]token.Key{other}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ov.Verify(raw); err == nil {
					t.Error("a verifier with another secret accepted the token")
				}
			}
		})
	}
}

// TestSandgateTokenMissingFlag leaves out each required flag in turn: the
// command fails with exit code 1 and an error naming the flag, and prints
// nothing.
func TestSandgateTokenMissingFlag(t *testing.T) {
	k := newKeyFiles(t)
	full := map[string]string{"key": k.hmac, "algorithm": "HS256", "kid": "k1", "credential": "cred-a", "sandbox": "sbx-1"}
	for missing := range full {
		t.Run(missing, func(t *testing.T) {
			var args []string
			for name, v := range full {
				if name != missing {
					args = append(args, "--"+name, v)
				}
			}
			code, out, err := runDirect(t, args...)
			if err == nil || !strings.Contains(err.Error(), "--"+missing) {
				t.Errorf("error = %v, want one naming --%s", err, missing)
			}
			if code != caddy.ExitCodeFailedStartup {
				t.Errorf("exit code = %d, want %d", code, caddy.ExitCodeFailedStartup)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			// Through cobra, as `caddy sandgate-token` runs it.
			out, err = runCLI(t, args...)
			if err == nil || !strings.Contains(err.Error(), "--"+missing) {
				t.Errorf("CLI error = %v, want one naming --%s", err, missing)
			}
			if out != "" {
				t.Errorf("CLI stdout = %q, want nothing", out)
			}
		})
	}
}

// TestSandgateTokenBadInput checks that bad key files and bad claims fail
// with exit code 1, an error naming the problem, nothing on stdout and no
// key material in the error.
func TestSandgateTokenBadInput(t *testing.T) {
	k := newKeyFiles(t)
	short := filepath.Join(k.dir, "short.key")
	const shortSecret = "short-cmd-secret"
	writeKey(t, short, []byte(shortSecret))
	missing := filepath.Join(k.dir, "missing.key")
	secrets := append([]string{cmdHMACSecret, shortSecret}, k.privateKeyMaterials...)

	for _, tc := range []struct {
		name      string
		key, alg  string
		extra     []string
		wantInErr []string
	}{
		{"missing key file", missing, "HS256", nil, []string{"missing.key"}},
		{"HMAC secret too short", short, "HS256", nil, []string{"short.key", "shorter than the minimum"}},
		{"HMAC secret used as EdDSA key", k.hmac, "EdDSA", nil, []string{"hmac.key", "EdDSA"}},
		{"PEM private key used as HMAC secret", k.edPriv, "HS256", nil, []string{"ed.pem", "PEM"}},
		{"EdDSA key used for ES256", k.edPriv, "ES256", nil, []string{"ed.pem", "ES256"}},
		{"public key cannot sign", k.edPub, "EdDSA", nil, []string{"ed.pub.pem", "public key"}},
		{"unknown algorithm", k.hmac, "HS999", nil, []string{"HS999"}},
		{"algorithm none", k.hmac, "none", nil, []string{`"none"`}},
		{"zero ttl", k.hmac, "HS256", []string{"--ttl", "0s"}, []string{"--ttl"}},
		{"negative ttl", k.hmac, "HS256", []string{"--ttl", "-5m"}, []string{"--ttl"}},
		{"ttl under a second", k.hmac, "HS256", []string{"--ttl", "500ms"}, []string{"ttl"}},
		{"port out of range", k.hmac, "HS256", []string{"--port", "70000"}, []string{"port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--key", tc.key, "--algorithm", tc.alg, "--kid", "k1",
				"--credential", "cred-a", "--sandbox", "sbx-1"}, tc.extra...)
			code, out, err := runDirect(t, args...)
			if err == nil {
				t.Fatalf("sandgate-token %v succeeded (stdout %q)", args, out)
			}
			if code != caddy.ExitCodeFailedStartup {
				t.Errorf("exit code = %d, want %d", code, caddy.ExitCodeFailedStartup)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			msg := err.Error()
			for _, w := range tc.wantInErr {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error %q contains key material", strings.ReplaceAll(msg, s, "[KEY MATERIAL]"))
				}
			}
		})
	}
}

// TestSandgateTokenTraffic: --traffic prints a traffic access token: aud
// traffic, no port, verifiable with the same key.
func TestSandgateTokenTraffic(t *testing.T) {
	k := newKeyFiles(t)
	out, err := runCLI(t, "--key", k.hmac, "--algorithm", "HS256", "--kid", "k", "--credential", "cred-a", "--sandbox", "sbx-1", "--traffic")
	if err != nil {
		t.Fatal(err)
	}
	key, err := token.LoadKey("k", "HS256", k.hmac)
	if err != nil {
		t.Fatal(err)
	}
	v, err := token.NewVerifier([]token.Key{key}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := v.Verify(strings.TrimSpace(out))
	if err != nil || tgt != (token.Target{CredentialID: "cred-a", SandboxID: "sbx-1", Audience: token.AudienceTraffic}) {
		t.Fatalf("Verify = %+v, %v", tgt, err)
	}
}
