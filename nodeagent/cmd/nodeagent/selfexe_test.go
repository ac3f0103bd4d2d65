package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// selfExeMode, in a child process of this test binary, selects what the
// child does instead of running the tests (TestMain).
const selfExeMode = "SANDGATE_TEST_SELFEXE_MODE"

// TestMain lets TestHelpersRunTheBuildThatLaunchedThem run copies of this
// test binary as a stand-in agent ("upgrade") and as its helper ("report").
func TestMain(m *testing.M) {
	switch os.Getenv(selfExeMode) {
	case "report":
		// The helper: says it is the build that was started.
		os.Stdout.WriteString("launched build\n")
		os.Exit(0)
	case "upgrade":
		os.Exit(upgradeThenLaunch())
	}
	os.Exit(m.Run())
}

// upgradeThenLaunch is the stand-in agent: it names its helper program as
// the agent does at start, an upgrade then installs a new program under
// its path (rename over it, as install(1) does), and it launches its
// helper, whose output it copies to its own.
func upgradeThenLaunch() int {
	exe, err := selfExecutable()
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	path := os.Getenv("SANDGATE_TEST_SELFEXE_PATH")
	next := path + ".new"
	if err := os.WriteFile(next, []byte("#!/bin/sh\necho installed build\n"), 0o755); err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	if err := os.Rename(next, path); err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), selfExeMode+"=report")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	return 0
}

// TestHelpersRunTheBuildThatLaunchedThem: a helper or preparer launched
// after a new nodeagent was installed over the running one's path runs the
// running agent's build, not the new one (which takes over at the next
// start). With os.Executable (the path) the helper would be the new build.
func TestHelpersRunTheBuildThatLaunchedThem(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nodeagent")
	copyFile(t, self, path)
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), selfExeMode+"=upgrade", "SANDGATE_TEST_SELFEXE_PATH="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the stand-in agent failed: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "launched build" {
		t.Fatalf("the helper printed %q, want %q: it ran the newly installed program", got, "launched build")
	}
}

// copyFile copies the executable from to the new file to (mode 0755).
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
