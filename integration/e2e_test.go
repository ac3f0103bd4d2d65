// Package integration holds the end-to-end tests with real peers: the
// built gateway (bin/caddy), the official E2B JS SDK from npm driven by
// integration/js/sdk.mjs (both pinned versions), and the fixed-entry +
// execd stand-ins of the harness.
package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// TestSDKScenarios drives every sdk.mjs scenario through the gateway with
// both pinned SDK versions and checks what the SDK saw, what execd saw and
// what landed on disk.
func TestSDKScenarios(t *testing.T) {
	e := startEnv(t)
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			t.Run("run", func(t *testing.T) { testRun(t, e, pkg) })
			t.Run("stream", func(t *testing.T) { testStream(t, e, pkg) })
			t.Run("disconnect", func(t *testing.T) { testDisconnect(t, e, pkg) })
			t.Run("files", func(t *testing.T) { testFiles(t, e, pkg) })
			t.Run("unsupported", func(t *testing.T) { testUnsupported(t, e, pkg) })
			t.Run("denied", func(t *testing.T) { testDenied(t, e, pkg) })
		})
	}
	t.Run("no token in the gateway log", func(t *testing.T) { assertNoTokens(t, e, nil) })
}

func wantCommand(t *testing.T, what string, a attempt, want commandResult) {
	t.Helper()
	if !a.OK {
		t.Fatalf("%s failed: %+v", what, a.Error)
	}
	var got commandResult
	if err := json.Unmarshal(a.Value, &got); err != nil {
		t.Fatalf("%s: %s: %v", what, a.Value, err)
	}
	if got.ExitCode != want.ExitCode || got.Stdout != want.Stdout || got.Stderr != want.Stderr || (got.Error != nil) != (want.Error != nil) {
		t.Errorf("%s = {exit %d, stdout %q, stderr %q, error %v}, want {exit %d, stdout %q, stderr %q, error %v}", what,
			got.ExitCode, got.Stdout, got.Stderr, got.Error, want.ExitCode, want.Stdout, want.Stderr, want.Error)
	}
}

// testRun: commands.run output bytes, exit codes, envs, cwd and quoting.
func testRun(t *testing.T, e *testEnv, pkg string) {
	dir := "/home/user/run-" + pkg
	e.mkdir(dir)
	var res struct {
		OK, Fail, Exact, EnvCwd, Args attempt
	}
	before := len(e.Execd.Commands())
	e.runSDK(t, pkg, "run", sbxOK, &res, "SCENARIO_DIR="+dir)

	wantCommand(t, "run('echo hi')", res.OK, commandResult{Stdout: "hi\n"})

	if res.Fail.OK || res.Fail.Error == nil {
		t.Fatalf("run(exit 3) succeeded: %s", res.Fail.Value)
	}
	if res.Fail.Error.Name != "CommandExitError" || res.Fail.Error.ExitCode == nil || *res.Fail.Error.ExitCode != 3 ||
		res.Fail.Error.Message != "exit status 3" {
		t.Errorf("run(exit 3) threw %+v (exitCode %v), want CommandExitError exitCode 3 \"exit status 3\"", res.Fail.Error, deref(res.Fail.Error.ExitCode))
	}
	if res.Fail.Stdout == nil || *res.Fail.Stdout != "out\n" || res.Fail.Stderr == nil || *res.Fail.Stderr != "err\n" {
		t.Errorf("run(exit 3) stdout %q stderr %q, want \"out\\n\" \"err\\n\"", derefS(res.Fail.Stdout), derefS(res.Fail.Stderr))
	}

	wantCommand(t, "run(printf 'a\\n\\nb')", res.Exact, commandResult{Stdout: "a\n\nb", Stderr: "x\ny\n"})

	// Commands run on the host (the stand-in has no chroot), so pwd prints
	// the host directory that stands for the sandbox directory.
	hostDir := e.host(dir)
	if real, err := filepath.EvalSymlinks(hostDir); err == nil && real != hostDir {
		var got commandResult
		_ = json.Unmarshal(res.EnvCwd.Value, &got)
		if strings.HasPrefix(got.Stdout, real+"\n") {
			hostDir = real
		}
	}
	wantCommand(t, "run(pwd; echo $GREETING, cwd, envs)", res.EnvCwd, commandResult{Stdout: hostDir + "\nit's quoted\n"})
	wantCommand(t, "run(printf '%s|' \"one two\" 'three')", res.Args, commandResult{Stdout: "one two|three|"})

	// What execd was asked: five commands, the cwd and envs passed through.
	cmds := e.Execd.Commands()[before:]
	if len(cmds) != 5 {
		t.Fatalf("execd ran %d commands, want 5", len(cmds))
	}
	envCwd := cmds[3].Request
	if envCwd.Cwd != dir || envCwd.Envs["GREETING"] != "it's quoted" {
		t.Errorf("execd got cwd %q envs %v, want cwd %q and GREETING=it's quoted", envCwd.Cwd, envCwd.Envs, dir)
	}
	for _, c := range cmds {
		if c.Running {
			t.Errorf("command %s is still running after run() returned", c.ID)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func derefS(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// testStream: output reaches the SDK while the command runs. The command
// prints "first" and then blocks until the script, on seeing "first",
// creates GO_FILE; only streamed output can let it finish.
func testStream(t *testing.T, e *testEnv, pkg string) {
	goFile := filepath.Join(e.Dir, "go-"+pkg)
	if _, err := os.Stat(goFile); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("GO_FILE exists before the run: %v", err)
	}
	var res struct {
		Result attempt  `json:"result"`
		Chunks []string `json:"chunks"`
	}
	e.runSDK(t, pkg, "stream", sbxOK, &res, "GO_FILE="+goFile)
	wantCommand(t, "stream run", res.Result, commandResult{Stdout: "first\ntick1\ntick2\ntick3\n"})
	if _, err := os.Stat(goFile); err != nil {
		t.Errorf("the script never created GO_FILE: %v", err)
	}
	// The line arrives whole, terminator included, while the command waits
	// (envd sends "first\n" as one chunk; issue 13 item 1).
	if len(res.Chunks) == 0 || res.Chunks[0] != "first\n" {
		t.Fatalf("first onStdout chunk %q, want \"first\\n\" alone (chunks %q)", firstOr(res.Chunks), res.Chunks)
	}
	if got := strings.Join(res.Chunks, ""); got != "first\ntick1\ntick2\ntick3\n" {
		t.Errorf("chunks join to %q, want the whole stdout", got)
	}
	// tick1..3 are a second apart, so each arrives in its own chunk.
	for i, tick := range []string{"tick1", "tick2", "tick3"} {
		idx := slices.IndexFunc(res.Chunks, func(c string) bool { return strings.Contains(c, tick) })
		if idx < 1 {
			t.Errorf("%s not in a chunk after the first: %q", tick, res.Chunks)
			continue
		}
		if i > 0 && strings.Contains(res.Chunks[idx], "tick"+string(rune('0'+i))) {
			t.Errorf("%s arrived in the same chunk as the tick before it: %q", tick, res.Chunks[idx])
		}
	}
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// testDisconnect: a background command outlives its stream (envd keeps
// it; issue 13 item 4): after handle.disconnect() and the SDK process's
// exit the command still runs in execd, as the stand-in's record and
// execd's status API through the fixed entry show, and it ends by itself.
func testDisconnect(t *testing.T, e *testEnv, pkg string) {
	known := map[string]bool{}
	for _, c := range e.Execd.Commands() {
		known[c.ID] = true
	}
	goFile := filepath.Join(e.Dir, "disconnect-go-"+pkg)
	var res struct {
		PID int64 `json:"pid"`
	}
	e.runSDK(t, pkg, "disconnect", sbxOK, &res, "GO_FILE="+goFile)
	if res.PID <= 0 {
		t.Errorf("handle.pid = %d, want a positive pid", res.PID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	isOurs := func(c execdstub.CommandRecord) bool {
		return !known[c.ID] && strings.Contains(c.Request.Command, goFile)
	}
	rec, err := e.Execd.WaitCommand(ctx, func(c execdstub.CommandRecord) bool { return isOurs(c) && c.ClientDisconnected })
	if err != nil {
		t.Fatalf("execd never saw the SDK's stream go: %v", err)
	}
	// The SDK process has exited and the gateway has logged the request as
	// canceled: the stream is over, the command is not.
	if err := e.log.waitFor(ctx, 0, `"outcome":"CANCELED"`); err != nil {
		t.Fatal(err)
	}
	if rec, _ = e.Execd.Command(rec.ID); !rec.Running || rec.Interrupted {
		t.Fatalf("the command did not outlive its stream: running=%v interrupted=%v err=%q", rec.Running, rec.Interrupted, rec.Err)
	}
	fe, _ := url.Parse(e.FixedEntry)
	st, err := (&execd.Client{}).CommandStatus(ctx, execd.Target{FixedEntry: fe, SandboxID: sbxOK}, rec.ID, execd.StatusLimit(len(rec.Request.Command)))
	if err != nil || !st.Running {
		t.Fatalf("execd's status API says %+v (%v), want running", st, err)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err = e.Execd.WaitCommand(ctx, func(c execdstub.CommandRecord) bool { return c.ID == rec.ID && !c.Running })
	if err != nil {
		t.Fatalf("the command did not end after GO_FILE: %v", err)
	}
	if rec.ExitCode != 0 || rec.Interrupted || rec.Signal != 0 {
		t.Errorf("the command ended with exit %d signal %v interrupted %v, want a clean exit", rec.ExitCode, rec.Signal, rec.Interrupted)
	}
}

// writeInfo is a WriteInfo object with exactly the keys the SDK got.
func wantWriteInfo(t *testing.T, what string, raw json.RawMessage, want any) {
	t.Helper()
	var got any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: %s: %v", what, raw, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %s, want %v", what, raw, want)
	}
}

func wi(dir, rel string) map[string]any {
	return map[string]any{"name": filepath.Base(rel), "type": "file", "path": dir + "/" + rel}
}

func wantError(t *testing.T, what string, a attempt, name, msgPrefix string) {
	t.Helper()
	if a.OK || a.Error == nil {
		t.Errorf("%s succeeded (%s), want %s", what, a.Value, name)
		return
	}
	if a.Error.Name != name || !strings.HasPrefix(a.Error.Message, msgPrefix) {
		t.Errorf("%s threw %s %q, want %s with message starting %q", what, a.Error.Name, a.Error.Message, name, msgPrefix)
	}
}

func wantStrings(t *testing.T, what string, a attempt, want []string) {
	t.Helper()
	if !a.OK {
		t.Errorf("%s failed: %+v", what, a.Error)
		return
	}
	var got []string
	if err := json.Unmarshal(a.Value, &got); err != nil {
		t.Fatalf("%s: %s: %v", what, a.Value, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// testFiles: read, write, list and remove through the SDK, checked against
// the disk under Env.Root.
func testFiles(t *testing.T, e *testEnv, pkg string) {
	dir := "/home/user/files-" + pkg
	var res struct {
		BigWrite     attempt `json:"bigWrite"`
		BigRoundTrip struct {
			SameSha bool            `json:"sameSha"`
			Size    int             `json:"size"`
			OK      *bool           `json:"ok"`
			Error   json.RawMessage `json:"error"`
		} `json:"bigRoundTrip"`
		BigSha          string  `json:"bigSha"`
		UnicodeWrite    attempt `json:"unicodeWrite"`
		UnicodeRead     attempt `json:"unicodeRead"`
		MultiWrite      attempt `json:"multiWrite"`
		List1           attempt `json:"list1"`
		List2           attempt `json:"list2"`
		Entry           attempt `json:"entry"`
		ReadDir         attempt `json:"readDir"`
		ReadMissing     attempt `json:"readMissing"`
		ListMissing     attempt `json:"listMissing"`
		RemoveFile      attempt `json:"removeFile"`
		RemoveDir       attempt `json:"removeDir"`
		ListAfterRemove attempt `json:"listAfterRemove"`
		RemoveMissing   attempt `json:"removeMissing"`
	}
	e.runSDK(t, pkg, "files", sbxOK, &res, "SCENARIO_DIR="+dir)

	// 5 MiB of random bytes: write, read back, same bytes on disk.
	if !res.BigWrite.OK {
		t.Fatalf("big write failed: %+v", res.BigWrite.Error)
	}
	wantWriteInfo(t, "big write", res.BigWrite.Value, wi(dir, "big.bin"))
	if !res.BigRoundTrip.SameSha || res.BigRoundTrip.Size != 5<<20 {
		t.Errorf("big round trip = sameSha %v size %d (error %s), want true %d", res.BigRoundTrip.SameSha,
			res.BigRoundTrip.Size, res.BigRoundTrip.Error, 5<<20)
	}
	if got := fileSHA(t, e.host(dir+"/big.bin")); got != res.BigSha || res.BigSha == "" {
		t.Errorf("big.bin on disk has sha256 %s, the SDK wrote %s", got, res.BigSha)
	}
	wantMode(t, e.host(dir+"/big.bin"), 0o644)

	// A unicode path with spaces.
	uni := "ünï cødé/文件 1.txt"
	if !res.UnicodeWrite.OK {
		t.Fatalf("unicode write failed: %+v", res.UnicodeWrite.Error)
	}
	wantWriteInfo(t, "unicode write", res.UnicodeWrite.Value, wi(dir, uni))
	wantWriteInfo(t, "unicode read", res.UnicodeRead.Value, "unicode ✓")
	if b, err := os.ReadFile(e.host(dir + "/" + uni)); err != nil || string(b) != "unicode ✓" {
		t.Errorf("unicode file on disk = %q, %v; want \"unicode ✓\"", b, err)
	}

	// Multi-file write: exactly {name, type, path} per file.
	if !res.MultiWrite.OK {
		t.Fatalf("multi write failed: %+v", res.MultiWrite.Error)
	}
	wantWriteInfo(t, "multi write", res.MultiWrite.Value, []any{wi(dir, "multi/a.txt"), wi(dir, "multi/sub/b.txt")})

	wantStrings(t, "list depth 1", res.List1, []string{"dir:/multi/sub:", "file:/multi/a.txt:1"})
	wantStrings(t, "list depth 2", res.List2, []string{"dir:/multi/sub:", "file:/multi/a.txt:1", "file:/multi/sub/b.txt:2"})
	wantWriteInfo(t, "entry of a.txt", res.Entry.Value, map[string]any{
		"mode": 420.0, "permissions": "-rw-r--r--", "modifiedIsDate": true, "size": 1.0})

	wantError(t, "read of a directory", res.ReadDir, "InvalidArgumentError", "IS_A_DIRECTORY: ")
	notFound := map[string]string{"e2b-2.25.0": "FileNotFoundError", "e2b-2.51.0": "FileNotFoundError"}[pkg]
	wantError(t, "read of a missing file", res.ReadMissing, notFound, "FILE_NOT_FOUND: path '"+dir+"/nope.txt' does not exist")
	wantError(t, "list of a missing directory", res.ListMissing, notFound, "[not_found] FILE_NOT_FOUND: ")

	for name, a := range map[string]attempt{"remove file": res.RemoveFile, "remove dir": res.RemoveDir, "remove missing": res.RemoveMissing} {
		if !a.OK {
			t.Errorf("%s failed: %+v", name, a.Error)
		}
	}
	wantStrings(t, "list after remove", res.ListAfterRemove, []string{"dir:/" + strings.Split(uni, "/")[0] + ":", "file:/big.bin:5242880"})
	for _, gone := range []string{dir + "/multi", dir + "/never-existed"} {
		if _, err := os.Lstat(e.host(gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists on disk after remove: %v", gone, err)
		}
	}
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Errorf("open %s: %v", p, err)
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func wantMode(t *testing.T, p string, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Errorf("stat %s: %v", p, err)
		return
	}
	if fi.Mode().Perm() != mode {
		t.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), mode)
	}
}

// testUnsupported: operations the gateway does not translate fail with
// Connect unimplemented, which the SDKs show as SandboxError.
func testUnsupported(t *testing.T, e *testEnv, pkg string) {
	dir := "/home/user/unsupported-" + pkg
	e.mkdir(dir)
	var res struct {
		MakeDir, Rename, ListProcesses attempt
	}
	e.runSDK(t, pkg, "unsupported", sbxOK, &res, "SCENARIO_DIR="+dir)
	wantError(t, "files.makeDir", res.MakeDir, "SandboxError", "12: [unimplemented] UNSUPPORTED_OPERATION: filesystem.Filesystem/MakeDir ")
	wantError(t, "files.rename", res.Rename, "SandboxError", "12: [unimplemented] UNSUPPORTED_OPERATION: filesystem.Filesystem/Move ")
	wantError(t, "commands.list", res.ListProcesses, "SandboxError", "12: [unimplemented] UNSUPPORTED_OPERATION: process.Process/List ")
	if _, err := os.Lstat(e.host(dir + "/newdir")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("makeDir created the directory: %v", err)
	}
}

// testDenied: each refused sandbox gets the SDK error its stable code maps
// to, and nothing reaches the fixed entry or execd.
func testDenied(t *testing.T, e *testEnv, pkg string) {
	dir := "/home/user/denied"
	cases := []struct {
		name, id string
		// run and list are Connect calls, read is REST.
		runName, runPrefix, readName, readPrefix string
	}{
		{"bad token", sbxBadToken, "AuthenticationError", "[unauthenticated] TOKEN_INVALID: ", "AuthenticationError", "TOKEN_INVALID: "},
		{"disabled credential", sbxDisabled, "AuthenticationError", "[unauthenticated] CREDENTIAL_DISABLED: ", "AuthenticationError", "CREDENTIAL_DISABLED: "},
		// permission_denied has no typed exception in either SDK.
		{"wrong sandbox", sbxWrong, "SandboxError", "7: [permission_denied] TARGET_MISMATCH: ", "SandboxError", "403: TARGET_MISMATCH: "},
		{"unknown cluster", sbxNoCluster, "SandboxError", "13: [internal] CLUSTER_UNKNOWN: ", "SandboxError", "500: CLUSTER_UNKNOWN: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmdsBefore, reqsBefore := len(e.Execd.Commands()), e.Ingress.Received()
			var res struct {
				Run, List, Read attempt
			}
			e.runSDK(t, pkg, "denied", c.id, &res, "SCENARIO_DIR="+dir)
			wantError(t, "commands.run", res.Run, c.runName, c.runPrefix)
			wantError(t, "files.list", res.List, c.runName, c.runPrefix)
			wantError(t, "files.read", res.Read, c.readName, c.readPrefix)
			if n := len(e.Execd.Commands()); n != cmdsBefore {
				t.Errorf("execd ran %d commands for a refused sandbox", n-cmdsBefore)
			}
			if n := e.Ingress.Received(); n != reqsBefore {
				t.Errorf("the fixed entry got %d requests for a refused sandbox", n-reqsBefore)
			}
		})
	}
}

// assertNoTokens checks that no token minted in e (nor extra) appears in
// the gateway's log, whole or as its signature.
func assertNoTokens(t *testing.T, e *testEnv, extra []string) {
	t.Helper()
	log := e.log.String()
	toks := append(e.MintedTokens(), extra...)
	if len(toks) == 0 {
		t.Fatal("no token was minted; the check would be vacuous")
	}
	if !strings.Contains(log, "e2b data plane request") {
		t.Fatal("the gateway log has no request lines; the check would be vacuous")
	}
	for i, tok := range toks {
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		if strings.Contains(log, tok) || (len(sig) >= 16 && strings.Contains(log, sig)) {
			t.Errorf("token #%d (or its signature) appears in the gateway log", i)
		}
	}
	// Every JWT starts with base64url({"...) = "eyJ".
	if strings.Contains(log, "eyJ") {
		t.Errorf("the gateway log contains a JWT-looking string (eyJ…)")
	}
}

// TestCredentialFileChanges: disabling or removing a credential in the file
// refuses its tokens within 1 s of the (atomic) change; restoring it lets
// them in again.
func TestCredentialFileChanges(t *testing.T) {
	e := startEnv(t)
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if r, err := e.listDir(ctx, tok); err != nil || r.status != http.StatusOK {
		t.Fatalf("baseline ListDir: %v status %d %s", err, r.status, r.body)
	}
	// Refusing must happen within 1 s of the change (the spec's bound);
	// letting the credential in again is only required to happen.
	steps := []struct {
		name, creds string
		within      time.Duration
		status      int
		errorCode   string
	}{
		{"disable", credentialsYAML("disabled"), time.Second, http.StatusUnauthorized, "CREDENTIAL_DISABLED"},
		{"re-enable", credentialsYAML("enabled"), waitLimit, http.StatusOK, ""},
		{"remove", credentialsYAML("absent"), time.Second, http.StatusUnauthorized, "CREDENTIAL_NOT_FOUND"},
		{"restore", credentialsYAML("enabled"), waitLimit, http.StatusOK, ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			changed := e.writeCredentials(s.creds)
			ok, probes := waitUntil(changed.Add(s.within), func(ctx context.Context) (bool, string) {
				r, err := e.listDir(ctx, tok)
				if err != nil {
					return false, err.Error()
				}
				desc := http.StatusText(r.status) + " " + r.errorCode()
				if r.status != s.status || r.errorCode() != s.errorCode {
					return false, desc
				}
				if s.status == http.StatusUnauthorized {
					code, msg := connectError(t, r.body)
					return code == "unauthenticated" && strings.HasPrefix(msg, s.errorCode+": "), desc
				}
				return true, desc
			})
			if !ok {
				t.Fatalf("within %v of the change ListDir never answered %d %s; probes: %s", s.within, s.status, s.errorCode, probes)
			}
		})
	}
	if n := len(e.Execd.Commands()); n != 0 {
		t.Errorf("execd ran %d commands", n)
	}
}

// TestReload: `caddy reload` with a Caddyfile that adds an unrelated
// cluster keeps requests working, and a broken credentials file written
// before the reload neither breaks the reload nor loses the last good
// credentials; the file is still watched afterwards.
func TestReload(t *testing.T) {
	e := startEnv(t)
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	tokOff := e.mint(sbxDisabled, harness.Grant{CredentialID: credDisabled})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if r, err := e.listDir(ctx, tok); err != nil || r.status != http.StatusOK {
		t.Fatalf("baseline ListDir: %v status %d %s", err, r.status, r.body)
	}

	// A broken file: the gateway keeps the last good version and says so.
	mark := e.log.Len()
	e.writeCredentials("credentials:\n  - id: cred-a\n    enabled: [not a bool\n")
	if err := e.log.waitFor(ctx, mark, "credential file reload failed; keeping the previous version"); err != nil {
		t.Fatal(err)
	}

	// A command stream that is running when the reload happens.
	known := map[string]bool{}
	for _, c := range e.Execd.Commands() {
		known[c.ID] = true
	}
	type sdkOut struct {
		res json.RawMessage
		err error
	}
	streamDone := make(chan sdkOut, 1)
	go func() {
		res, err := e.sdk(sdkPackages[len(sdkPackages)-1], "stream", sbxOK, "GO_FILE="+filepath.Join(e.Dir, "go-reload"))
		streamDone <- sdkOut{res, err}
	}()
	if _, err := e.Execd.WaitCommand(ctx, func(c execdstub.CommandRecord) bool {
		return !known[c.ID] && c.Running && strings.Contains(c.Request.Command, "tick")
	}); err != nil {
		t.Fatalf("the stream command did not start: %v", err)
	}

	// Requests run without a break from before the reload until after it.
	// Each uses a new connection, and one that the kernel resets before
	// any answer is sent again: Caddy reloads by binding a new
	// SO_REUSEPORT socket and closing the old one, and connections still
	// queued on the old socket are reset (a reset before any response byte
	// means no server read the request). A kept-alive connection closed as
	// idle by the old server races the same way (EOF). Every answer the
	// gateway gives must be 200.
	fresh := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	listFresh := func(ctx context.Context) (envdResponse, int, error) {
		resets := 0
		for {
			r, err := e.doWith(ctx, fresh, envdRequest{method: http.MethodPost, path: "/filesystem.Filesystem/ListDir",
				contentType: "application/json", body: []byte(`{"path":"/home/user"}`), sandboxID: sbxOK, port: envdPort, token: tok})
			if err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) && ctx.Err() == nil {
				resets++
				continue
			}
			return r, resets, err
		}
	}
	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		mu       sync.Mutex
		statuses = map[string]int{}
		resets   int
		warm     = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			if i == 10 {
				close(warm) // the loop is well under way before the reload
			}
			select {
			case <-stop:
				return
			default:
			}
			r, n, err := listFresh(ctx)
			key := "error"
			if err != nil {
				key = "error: " + err.Error()
			} else {
				key = http.StatusText(r.status)
			}
			mu.Lock()
			statuses[key]++
			resets += n
			mu.Unlock()
		}
	}()

	select {
	case <-warm:
	case <-ctx.Done():
		t.Fatal("the request loop did not get going")
	}
	mark = e.log.Len()
	reloaded := strings.Replace(harness.DefaultCaddyfile, "cluster cluster-a {{FIXED_ENTRY}}",
		"cluster cluster-a {{FIXED_ENTRY}}\n\t\tcluster cluster-b http://127.0.0.1:9", 1)
	reloadErr := e.Reload(ctx, e.Expand(reloaded))
	if reloadErr == nil {
		reloadErr = e.log.waitFor(ctx, mark, `"clusters":["cluster-a","cluster-b"]`)
	}
	// A few more requests on the new configuration, then stop.
	for range 20 {
		if r, _, err := listFresh(ctx); err != nil || r.status != http.StatusOK {
			t.Errorf("ListDir after the reload: %v status %d %s", err, r.status, r.body)
			break
		}
	}
	close(stop)
	wg.Wait()
	if reloadErr != nil {
		t.Fatalf("reload: %v\ngateway log:\n%s", reloadErr, e.log.String())
	}
	if len(statuses) != 1 || statuses[http.StatusText(http.StatusOK)] == 0 {
		t.Errorf("requests across the reload: %v, want only OK", statuses)
	}
	t.Logf("requests across the reload: %v; connections reset before an answer: %d", statuses, resets)

	// The stream that spanned the reload ended normally.
	var out sdkOut
	select {
	case out = <-streamDone:
	case <-ctx.Done():
		t.Fatal("the stream scenario did not finish")
	}
	if out.err != nil {
		t.Fatalf("stream across the reload: %v", out.err)
	}
	var stream struct {
		Result attempt `json:"result"`
	}
	if err := json.Unmarshal(out.res, &stream); err != nil {
		t.Fatal(err)
	}
	wantCommand(t, "stream across the reload", stream.Result, commandResult{Stdout: "first\ntick1\ntick2\ntick3\n"})

	// The last good credentials survived: the disabled one is still
	// refused, the unknown cluster is still unknown.
	if r, err := e.listDirAs(ctx, sbxDisabled, tokOff); err != nil || r.status != http.StatusUnauthorized || r.errorCode() != "CREDENTIAL_DISABLED" {
		t.Errorf("disabled credential after the reload: %v status %d code %q", err, r.status, r.errorCode())
	}
	tokNC := e.mint(sbxNoCluster, harness.Grant{CredentialID: credNoCluster})
	if r, err := e.listDirAs(ctx, sbxNoCluster, tokNC); err != nil || r.status != http.StatusInternalServerError || r.errorCode() != "CLUSTER_UNKNOWN" {
		t.Errorf("unknown cluster after the reload: %v status %d code %q", err, r.status, r.errorCode())
	}

	// The file is still watched after the reload.
	changed := e.writeCredentials(credentialsYAML("disabled"))
	ok, last := waitUntil(changed.Add(time.Second), func(ctx context.Context) (bool, string) {
		r, err := e.listDir(ctx, tok)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusUnauthorized && r.errorCode() == "CREDENTIAL_DISABLED", http.StatusText(r.status) + " " + r.errorCode()
	})
	if !ok {
		t.Errorf("after the reload, disabling the credential was not applied within 1 s; probes: %s", last)
	}
	changed = e.writeCredentials(credentialsYAML("enabled"))
	ok, last = waitUntil(changed.Add(waitLimit), func(ctx context.Context) (bool, string) {
		r, err := e.listDir(ctx, tok)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusOK, http.StatusText(r.status) + " " + r.errorCode()
	})
	if !ok {
		t.Errorf("after the reload, re-enabling the credential was not applied; probes: %s", last)
	}
}

// TestMetrics: the admin /metrics endpoint counts requests by operation
// and outcome.
func TestMetrics(t *testing.T) {
	e := startEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := os.WriteFile(e.host("/home/user/m.txt"), []byte("metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	r, err := e.do(ctx, envdRequest{method: http.MethodGet, path: "/files?path=/home/user/m.txt", sandboxID: sbxOK, port: envdPort, token: tok})
	if err != nil || r.status != http.StatusOK || string(r.body) != "metrics\n" {
		t.Fatalf("files.read: %v status %d body %q", err, r.status, r.body)
	}
	r, err = e.listDir(ctx, "not-a-token")
	if err != nil || r.errorCode() != "TOKEN_INVALID" {
		t.Fatalf("ListDir with a bad token: %v status %d code %q", err, r.status, r.errorCode())
	}
	r, err = e.do(ctx, envdRequest{method: http.MethodPost, path: "/filesystem.Filesystem/MakeDir", contentType: "application/json", body: []byte(`{}`)})
	if err != nil || r.errorCode() != "UNSUPPORTED_OPERATION" {
		t.Fatalf("MakeDir: %v status %d code %q", err, r.status, r.errorCode())
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Admin+"/metrics", nil)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	lines := strings.Split(string(body), "\n")
	for _, want := range []string{
		`sandgate_dataplane_requests_total{operation="files.read",outcome="ok"} 1`,
		`sandgate_dataplane_requests_total{operation="filesystem.ListDir",outcome="TOKEN_INVALID"} 1`,
		`sandgate_dataplane_requests_total{operation="unsupported",outcome="UNSUPPORTED_OPERATION"} 1`,
		`sandgate_dataplane_request_duration_seconds_count{operation="files.read",outcome="ok"} 1`,
	} {
		if !slices.Contains(lines, want) {
			var got []string
			for _, l := range lines {
				if strings.HasPrefix(l, "sandgate_dataplane_requests_total") {
					got = append(got, l)
				}
			}
			t.Errorf("/metrics has no line %s; sandgate lines:\n%s", want, strings.Join(got, "\n"))
		}
	}
}

// TestGatewayLogHasNoTokens: with debug logging (every request logged) the
// gateway's log never shows a token, valid or not, after SDK sessions and
// raw requests that pass and fail each check.
func TestGatewayLogHasNoTokens(t *testing.T) {
	cf := strings.Replace(harness.DefaultCaddyfile, "auto_https off", "auto_https off\n\tdebug", 1)
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = cf })
	dir := "/home/user/logs"
	e.mkdir(dir)
	var run struct{ OK, Fail, Exact, EnvCwd, Args attempt }
	e.runSDK(t, sdkPackages[len(sdkPackages)-1], "run", sbxOK, &run, "SCENARIO_DIR="+dir)
	wantCommand(t, "run('echo hi')", run.OK, commandResult{Stdout: "hi\n"})
	for _, id := range []string{sbxBadToken, sbxDisabled, sbxWrong, sbxNoCluster} {
		var denied struct{ Run, List, Read attempt }
		e.runSDK(t, sdkPackages[0], "denied", id, &denied, "SCENARIO_DIR="+dir)
		if denied.Run.OK {
			t.Fatalf("run for %s succeeded", id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	garbage := "eyJhbGciOiJIUzI1NiJ9.eyJub3QiOiJ2YWxpZCJ9.c2lnbmF0dXJlLXRoYXQtZG9lcy1ub3QtbWF0Y2g"
	for _, c := range []struct{ tok, outcome string }{
		{e.mint(sbxOK, harness.Grant{CredentialID: credOK}), "ok"},
		{garbage, "TOKEN_INVALID"},
		{e.mint(sbxOK, harness.Grant{CredentialID: credOK, TTL: -time.Hour}), "TOKEN_EXPIRED"},
	} {
		mark := e.log.Len()
		if _, err := e.listDir(ctx, c.tok); err != nil {
			t.Fatal(err)
		}
		// The request's log line is written as the handler returns.
		if err := e.log.waitFor(ctx, mark, `"outcome":"`+c.outcome+`"`); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(e.log.String(), `"outcome":"ok"`) {
		t.Fatal("debug logging is not on: no successful request was logged")
	}
	assertNoTokens(t, e, []string{garbage})
}

// TestAccessLogFilterKeepsTokensOut: Caddy's access log records request
// headers, X-Access-Token included, unless the operator filters it out;
// with the filter in the site's log block the token stays out of the log.
func TestAccessLogFilterKeepsTokensOut(t *testing.T) {
	// Caddy's access log redacts Authorization and Cookie but not
	// X-Access-Token; Caddyfile.example's log filter deletes it.
	cf := strings.Replace(harness.DefaultCaddyfile, "http://{{ADDR}} {",
		"http://{{ADDR}} {\n\tlog {\n\t\tformat filter {\n\t\t\trequest>headers>X-Access-Token delete\n\t\t}\n\t}", 1)
	e := startEnv(t, func(c *harness.Config) { c.Caddyfile = cf })
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	if r, err := e.listDir(ctx, tok); err != nil || r.status != http.StatusOK {
		t.Fatalf("ListDir: %v status %d", err, r.status)
	}
	wrong := e.mint(sbxWrong, harness.Grant{CredentialID: credOK, SandboxID: sbxOK})
	if r, err := e.listDirAs(ctx, sbxWrong, wrong); err != nil || r.status != http.StatusForbidden {
		t.Fatalf("ListDir with a token for another sandbox: %v status %d", err, r.status)
	}
	if err := e.log.waitFor(ctx, 0, `"status":403`); err != nil {
		t.Fatal(err)
	}
	assertNoTokens(t, e, nil)
}

// TestAccessLogHostNamedSiteKeepsTokensOut: when the data plane's site
// address names a host, a request with another Host never reaches the data
// plane; Caddy's default access logger, outside the site's log block and
// its filter, recorded its headers, bearer tokens included. The data plane
// turns that logging off, so no log line of the built gateway holds a
// token, whatever Host a caller sends.
func TestAccessLogHostNamedSiteKeepsTokensOut(t *testing.T) {
	const host = "gw.sandgate.test"
	// The site's port is picked for each start attempt (startEnv tries
	// again when it was taken before the gateway listened).
	var port string
	e := startEnv(t, func(c *harness.Config) {
		var err error
		if port, err = freeport.Port(); err != nil {
			t.Fatal(err)
		}
		c.Caddyfile = strings.Replace(harness.DefaultCaddyfile, "http://{{ADDR}} {",
			"http://"+host+":"+port+" {\n\tlog {\n\t\tformat filter {\n\t\t\trequest>headers>X-Access-Token delete\n"+
				"\t\t\trequest>headers>E2b-Traffic-Access-Token delete\n\t\t}\n\t}", 1)
		c.GatewayAddr = "127.0.0.1:" + port
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	send := func(h, id, tok, traffic string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Gateway+"/filesystem.Filesystem/ListDir",
			strings.NewReader(`{"path":"/home/user"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = h
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", envdPort)
		req.Header.Set("X-Access-Token", tok)
		req.Header.Set("E2b-Traffic-Access-Token", traffic)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	traffic := "traffic-" + strings.Repeat("7f3a", 8)
	if code := send(host+":"+port, sbxOK, e.mint(sbxOK, harness.Grant{CredentialID: credOK}), traffic); code != http.StatusOK {
		t.Fatalf("ListDir at the site's host: %d", code)
	}
	for _, other := range []string{"127.0.0.1:" + port, "other.example", ""} {
		send(other, sbxOK, e.mint(sbxOK, harness.Grant{CredentialID: credOK}), traffic)
	}
	// A refused request at the site's host (the data plane logs it at
	// info), then a last one: its line is written after the others' (each
	// is logged before its response is sent).
	if code := send(host+":"+port, sbxWrong, e.mint(sbxWrong, harness.Grant{CredentialID: credOK, SandboxID: sbxOK}), traffic); code != http.StatusForbidden {
		t.Fatalf("ListDir with another sandbox's token: %d", code)
	}
	if code := send(host+":"+port, sbxOK, e.mint(sbxOK, harness.Grant{CredentialID: credOK}), traffic); code != http.StatusOK {
		t.Fatalf("ListDir at the site's host: %d", code)
	}
	if err := e.log.waitFor(ctx, 0, `"host":"`+host+":"+port+`"`); err != nil {
		t.Fatalf("the site's access log recorded nothing: %v", err)
	}
	if strings.Contains(e.log.String(), traffic) {
		t.Error("the traffic access token appears in the gateway log")
	}
	assertNoTokens(t, e, nil)
}

// shape is how an error is expected on the wire.
type shape int

const (
	unary  shape = iota // HTTP status + {"code":"<connect code>","message"}
	stream              // 200 application/connect+json + one end-stream frame with the error
	rest                // HTTP status + {"code":<int status>,"message"}
)

// envelope frames a Connect stream message.
func envelope(flags byte, payload string) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	n := len(payload)
	b[1], b[2], b[3], b[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return append(b, payload...)
}

// frames splits a Connect stream body into its envelopes.
func frames(t *testing.T, body []byte) (flags []byte, payloads []string) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("truncated envelope header %q", body)
		}
		n := int(body[1])<<24 | int(body[2])<<16 | int(body[3])<<8 | int(body[4])
		if len(body) < 5+n {
			t.Fatalf("truncated envelope: want %d bytes, have %d", n, len(body)-5)
		}
		flags = append(flags, body[0])
		payloads = append(payloads, string(body[5:5+n]))
		body = body[5+n:]
	}
	return flags, payloads
}

// TestRawHTTPCheckOrder sends requests without an SDK and checks the order
// of the gateway's checks: operation first (even without headers), then
// the routing headers, then the token, then the token's target; each
// failure in the shape of its operation, with its Sandgate-Error-Code.
func TestRawHTTPCheckOrder(t *testing.T) {
	e := startEnv(t)
	tok := e.mint(sbxOK, harness.Grant{CredentialID: credOK})
	expired := e.mint(sbxOK, harness.Grant{CredentialID: credOK, TTL: -time.Hour})
	listBody := []byte(`{"path":"/home/user"}`)
	startBody := envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}`)
	const (
		listPath  = "/filesystem.Filesystem/ListDir"
		startPath = "/process.Process/Start"
		filesPath = "/files?path=/home/user/x.txt"
		jsonCT    = "application/json"
		streamCT  = "application/connect+json"
	)
	list := func(id, port, tk string) envdRequest {
		return envdRequest{method: http.MethodPost, path: listPath, contentType: jsonCT, body: listBody, sandboxID: id, port: port, token: tk}
	}
	rows := []struct {
		name   string
		req    envdRequest
		shape  shape
		status int    // HTTP status (200 for stream errors)
		code   string // Connect code (unary, stream)
		errHdr string // Sandgate-Error-Code
		msg    string // message prefix
	}{
		// 1. The operation, before any header is looked at.
		{"unsupported unary, no headers", envdRequest{method: http.MethodPost, path: "/filesystem.Filesystem/MakeDir", contentType: jsonCT, body: []byte(`{"path":"/x"}`)},
			unary, 501, "unimplemented", "UNSUPPORTED_OPERATION", "UNSUPPORTED_OPERATION: filesystem.Filesystem/MakeDir is not implemented"},
		{"unsupported unary, bad id, bad port, bad token", envdRequest{method: http.MethodPost, path: "/process.Process/List", contentType: jsonCT, body: []byte(`{}`),
			sandboxID: "Not_A_Label", port: "8080", token: "garbage"},
			unary, 501, "unimplemented", "UNSUPPORTED_OPERATION", "UNSUPPORTED_OPERATION: process.Process/List is not implemented"},
		{"unsupported stream, no headers", envdRequest{method: http.MethodPost, path: "/process.Process/Connect", contentType: streamCT, body: envelope(0, `{"process":{"pid":1}}`)},
			stream, 200, "unimplemented", "UNSUPPORTED_OPERATION", "UNSUPPORTED_OPERATION: process.Process/Connect is not implemented"},
		{"unsupported REST, no headers", envdRequest{method: http.MethodGet, path: "/envs"},
			rest, 501, "", "UNSUPPORTED_OPERATION", "UNSUPPORTED_OPERATION: /envs is not implemented"},
		{"unknown route", envdRequest{method: http.MethodGet, path: "/no/such/route", sandboxID: sbxOK, port: envdPort, token: tok},
			rest, 404, "", "UNKNOWN_ROUTE", "UNKNOWN_ROUTE: "},
		{"envd-internal /init", envdRequest{method: http.MethodPost, path: "/init", contentType: jsonCT, body: []byte(`{}`), sandboxID: sbxOK, port: envdPort, token: tok},
			rest, 404, "", "RESERVED_ROUTE", "RESERVED_ROUTE: This endpoint is reserved for the E2B control plane and is not reachable through the sandbox URL"},
		{"wrong method on /files", envdRequest{method: http.MethodPut, path: filesPath},
			rest, 405, "", "METHOD_NOT_ALLOWED", "METHOD_NOT_ALLOWED: "},

		// 2. The routing headers, before the token.
		{"missing E2b-Sandbox-Id", list("", envdPort, tok), unary, 400, "invalid_argument", "SANDBOX_HEADER_MISSING", "SANDBOX_HEADER_MISSING: the E2b-Sandbox-Id header"},
		{"missing E2b-Sandbox-Id and token", list("", envdPort, ""), unary, 400, "invalid_argument", "SANDBOX_HEADER_MISSING", "SANDBOX_HEADER_MISSING: the E2b-Sandbox-Id header"},
		{"missing E2b-Sandbox-Port", list(sbxOK, "", tok), unary, 400, "invalid_argument", "SANDBOX_HEADER_MISSING", "SANDBOX_HEADER_MISSING: the E2b-Sandbox-Port header"},
		{"bad sandbox id, no token", list("Not_A_Label", envdPort, ""), unary, 400, "invalid_argument", "SANDBOX_ID_INVALID", "SANDBOX_ID_INVALID: "},
		{"port is not 49983, no token", list(sbxOK, "8080", ""), unary, 400, "invalid_argument", "SANDBOX_PORT_INVALID", "SANDBOX_PORT_INVALID: "},
		{"missing id on REST read", envdRequest{method: http.MethodGet, path: filesPath, port: envdPort, token: tok},
			rest, 400, "", "SANDBOX_HEADER_MISSING", "SANDBOX_HEADER_MISSING: "},
		{"port is not 49983 on Process/Start", envdRequest{method: http.MethodPost, path: startPath, contentType: streamCT, body: startBody, sandboxID: sbxOK, port: "44772", token: tok},
			stream, 200, "invalid_argument", "SANDBOX_PORT_INVALID", "SANDBOX_PORT_INVALID: "},

		// 3. The token.
		{"missing token", list(sbxOK, envdPort, ""), unary, 401, "unauthenticated", "TOKEN_MISSING", "TOKEN_MISSING: "},
		{"garbage token", list(sbxOK, envdPort, "garbage"), unary, 401, "unauthenticated", "TOKEN_INVALID", "TOKEN_INVALID: the access token is not valid (malformed)"},
		{"expired token", list(sbxOK, envdPort, expired), unary, 401, "unauthenticated", "TOKEN_EXPIRED", "TOKEN_EXPIRED: "},
		{"missing token on Process/Start", envdRequest{method: http.MethodPost, path: startPath, contentType: streamCT, body: startBody, sandboxID: sbxOK, port: envdPort},
			stream, 200, "unauthenticated", "TOKEN_MISSING", "TOKEN_MISSING: "},
		{"missing token on REST read", envdRequest{method: http.MethodGet, path: filesPath, sandboxID: sbxOK, port: envdPort},
			rest, 401, "", "TOKEN_MISSING", "TOKEN_MISSING: "},

		// 4. The token's target.
		{"token for another sandbox", list(sbxWrong, envdPort, tok), unary, 403, "permission_denied", "TARGET_MISMATCH", "TARGET_MISMATCH: "},
		{"token for another sandbox on Process/Start", envdRequest{method: http.MethodPost, path: startPath, contentType: streamCT, body: startBody, sandboxID: sbxWrong, port: envdPort, token: tok},
			stream, 200, "permission_denied", "TARGET_MISMATCH", "TARGET_MISMATCH: "},
		{"token for another sandbox on REST read", envdRequest{method: http.MethodGet, path: filesPath, sandboxID: sbxWrong, port: envdPort, token: tok},
			rest, 403, "", "TARGET_MISMATCH", "TARGET_MISMATCH: "},
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	reqsBefore := e.Ingress.Received()
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r, err := e.do(ctx, row.req)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != row.status || r.errorCode() != row.errHdr {
				t.Fatalf("got %d Sandgate-Error-Code %q (%q), want %d %q", r.status, r.errorCode(), r.body, row.status, row.errHdr)
			}
			ct := r.header.Get("Content-Type")
			var code, msg string
			switch row.shape {
			case unary:
				if !strings.HasPrefix(ct, "application/json") {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
				code, msg = connectError(t, r.body)
			case stream:
				if ct != "application/connect+json" {
					t.Errorf("Content-Type %q, want application/connect+json", ct)
				}
				flags, payloads := frames(t, r.body)
				if len(flags) != 1 || flags[0] != 0x02 {
					t.Fatalf("stream frames with flags %v (%q), want one end-stream frame", flags, payloads)
				}
				var eos struct {
					Error *struct{ Code, Message string } `json:"error"`
				}
				if err := json.Unmarshal([]byte(payloads[0]), &eos); err != nil || eos.Error == nil {
					t.Fatalf("end-stream payload %q: %v", payloads[0], err)
				}
				code, msg = eos.Error.Code, eos.Error.Message
			case rest:
				if !strings.HasPrefix(ct, "application/json") {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
				var body struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(r.body, &body); err != nil {
					t.Fatalf("REST error body %q: %v", r.body, err)
				}
				if body.Code != row.status {
					t.Errorf("REST body code %d, want %d", body.Code, row.status)
				}
				msg = body.Message
			}
			if code != row.code || !strings.HasPrefix(msg, row.msg) {
				t.Errorf("error code %q message %q, want %q and a message starting %q", code, msg, row.code, row.msg)
			}
		})
	}
	if n := e.Ingress.Received() - reqsBefore; n != 0 {
		t.Errorf("the fixed entry got %d requests from refused calls", n)
	}
	if n := len(e.Execd.Commands()); n != 0 {
		t.Errorf("execd ran %d commands for refused calls", n)
	}

	// All checks pass: the same request reaches execd.
	r, err := e.listDir(ctx, tok)
	if err != nil || r.status != http.StatusOK || r.errorCode() != "" {
		t.Fatalf("valid ListDir: %v status %d code %q body %q", err, r.status, r.errorCode(), r.body)
	}
	var ok struct {
		Entries []json.RawMessage `json:"entries"`
	}
	if err := json.Unmarshal(r.body, &ok); err != nil {
		t.Errorf("valid ListDir body %q: %v", r.body, err)
	}
	if n := e.Ingress.Received() - reqsBefore; n != 1 {
		t.Errorf("the fixed entry got %d requests for one valid ListDir, want 1", n)
	}
}
