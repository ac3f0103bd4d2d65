// Package gotest holds the test of gotest.sh, the wrapper of `go test` that
// make test runs: when go test fails, its output ends with what failed.
package gotest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fixture is a module whose tests fail in each way the summary reports:
// one test fails with a message, one subtest fails, and, in a second
// package, a test runs past go test's -timeout.
var fixture = map[string]string{
	"go.mod": "module example.com/fixture\n\ngo 1.22\n",
	"fails/fails_test.go": `package fails

import "testing"

func TestPasses(t *testing.T) {}

func TestFails(t *testing.T) { t.Fatalf("the message of a failed test") }

func TestSub(t *testing.T) {
	t.Run("inner", func(t *testing.T) { t.Error("the message of a failed subtest") })
}
`,
	"hangs/hangs_test.go": `package hangs

import (
	"testing"
	"time"
)

// TestHangs outlives the -timeout go test is given.
func TestHangs(t *testing.T) { time.Sleep(time.Hour) }
`,
}

// TestSummaryNamesWhatFailed: gotest.sh exits with go test's status, and
// after go test's own output (streamed) prints a summary naming the failed
// tests with their messages, the failed packages, and the test that was
// still running when a binary timed out; the whole output stays in the
// file the summary names.
func TestSummaryNamesWhatFailed(t *testing.T) {
	dir := t.TempDir()
	for name, content := range fixture {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs("gotest.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, "-count=1", "-timeout", "5s", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 1 {
		t.Fatalf("gotest.sh: %v, want exit status 1 (go test's)\n%s", err, out)
	}
	text := string(out)
	head, summary, found := strings.Cut(text, "==> go test failed (exit status 1); what failed (the whole output is in ")
	if !found {
		t.Fatalf("no summary in the output:\n%s", text)
	}
	// The summary comes after go test's own lines, which streamed.
	if !strings.Contains(head, "FAIL\texample.com/fixture/fails") {
		t.Errorf("go test's own output is not before the summary:\n%s", head)
	}
	for _, want := range []string{
		"--- FAIL: TestFails",
		"the message of a failed test",
		"--- FAIL: TestSub/inner",
		"the message of a failed subtest",
		"panic: test timed out after 5s",
		"TestHangs",
		"FAIL\texample.com/fixture/fails",
		"FAIL\texample.com/fixture/hangs",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	for _, unwanted := range []string{"TestPasses", "goroutine "} {
		if strings.Contains(summary, unwanted) {
			t.Errorf("the summary has %q (only failures, no stack dump):\n%s", unwanted, summary)
		}
	}
	// The file it names holds the whole output, the stack dump included.
	log := regexp.MustCompile(`^(\S+)\):`).FindStringSubmatch(summary)
	if log == nil {
		t.Fatalf("the summary names no file:\n%s", summary)
	}
	whole, err := os.ReadFile(log[1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(whole), "goroutine ") || !strings.Contains(string(whole), "the message of a failed test") {
		t.Errorf("%s does not hold go test's whole output:\n%s", log[1], whole)
	}
}

// TestPassLeavesNothing: when go test passes, gotest.sh exits 0, prints no
// summary and removes the file it kept the output in.
func TestPassLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(fixture["go.mod"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "passes_test.go"), []byte("package passes\n\nimport \"testing\"\n\nfunc TestPasses(t *testing.T) {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("gotest.sh")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cmd := exec.Command("bash", script, "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gotest.sh on a passing module: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ok  \texample.com/fixture") || strings.Contains(string(out), "==> go test failed") {
		t.Fatalf("the output of a passing run:\n%s", out)
	}
	left, err := filepath.Glob(filepath.Join(tmp, "sandgate-gotest.*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("files left in TMPDIR after a passing run: %v %v", left, err)
	}
}
