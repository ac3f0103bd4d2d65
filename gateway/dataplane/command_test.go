package dataplane

import (
	"net/textproto"
	"os/exec"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestShellQuoteWithBash: every word survives bash -c exactly.
func TestShellQuoteWithBash(t *testing.T) {
	words := []string{"", "plain", "with space", "it's", `"double"`, `$HOME`, "`id`", "a\nb", `back\slash`, "*", "'", "''", "ünï ✓", "-n", "$(rm -rf /)"}
	line := commandLine("printf", append([]string{`%s\0`}, words...))
	out, err := exec.Command("bash", "-c", line).Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(got) != len(words) {
		t.Fatalf("got %d words %q", len(got), got)
	}
	for i := range words {
		if got[i] != words[i] {
			t.Errorf("word %d: %q, want %q", i, got[i], words[i])
		}
	}
}

// execdLines splits output the way execd reports it (docs/wire-facts.md §X1.4):
// one event per line without its "\n", an empty line as "\n", a partial
// last line flushed at exit. The wrapper's marker line follows.
func execdLines(out, marker string) []string {
	out += marker + "\n"
	var events []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if l == "" {
			continue
		}
		l = strings.TrimSuffix(l, "\n")
		if l == "" {
			l = "\n"
		}
		events = append(events, l)
	}
	return events
}

func restore(events []string, marker string) string {
	o := &outputStream{marker: marker}
	var b strings.Builder
	for _, ev := range events {
		out, _ := o.line(ev)
		b.Write(out)
	}
	return b.String()
}

func TestOutputRestoration(t *testing.T) {
	const m = "__M__"
	for _, out := range []string{"", "hi\n", "a\n\nb", "a\n\n\n", "\n", "\n\n", "partial", "x\ny\n", "trail  \n  lead"} {
		if got := restore(execdLines(out, m), m); got != out {
			t.Errorf("%q restored as %q", out, got)
		}
	}
	// Each line is sent with its terminator as soon as it is reported, not
	// when the next line arrives: execd reports a line only once it ended.
	o := &outputStream{marker: m}
	for _, ev := range []struct{ text, want string }{{"first", "first\n"}, {"\n", "\n"}, {"last" + m, "last"}} {
		if got, _ := o.line(ev.text); string(got) != ev.want {
			t.Fatalf("event %q sent as %q, want %q", ev.text, got, ev.want)
		}
	}
	// After the marker nothing more is sent.
	if got, end := o.line("late"); got != nil || !end {
		t.Fatalf("after the marker: %q %v", got, end)
	}
}

// FuzzOutputRestoration: any output without "\r" (which execd also treats
// as a line end) is restored byte for byte from execd's line events.
func FuzzOutputRestoration(f *testing.F) {
	for _, s := range []string{"", "a", "a\n", "\n\n", "a\n\nb", "x\x00y\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		if strings.ContainsRune(out, '\r') {
			return
		}
		const m = "__sandgate_eof_fuzz__"
		if strings.Contains(out, m) {
			return
		}
		if got := restore(execdLines(out, m), m); got != out {
			t.Fatalf("%q restored as %q", out, got)
		}
	})
}

// FuzzPartTarget: whatever the Content-Disposition of a multipart part, the
// target is either refused or an absolute, clean path; a well-formed
// filename is kept whole (not reduced to its base name).
func FuzzPartTarget(f *testing.F) {
	for _, s := range []string{"/home/user/a.txt", "rel/ünï cødé/文件.txt", "../../etc/passwd", "", "a\"b", "/", "~/x", "a\x00b"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	h := &Handler{cfg: Config{HomeDir: "/home/user"}}
	f.Fuzz(func(t *testing.T, filename string, raw bool) {
		hdr := textproto.MIMEHeader{}
		if raw {
			hdr.Set("Content-Disposition", filename)
		} else {
			hdr.Set("Content-Disposition", `form-data; name="file"; filename="`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(filename)+`"`)
		}
		target, isFile, e := h.partTarget(hdr, "", sdkUser{})
		if e != nil {
			if e.Code != CodeBadRequest {
				t.Fatalf("code %s", e.Code)
			}
			return
		}
		if !isFile {
			return
		}
		if !path.IsAbs(target) || path.Clean(target) != target {
			t.Fatalf("target %q is not absolute and clean", target)
		}
		if !raw && utf8.ValidString(filename) && path.IsAbs(filename) && path.Clean(filename) == filename && !strings.ContainsAny(filename, "\x00\r\n") && filename != "" && len(filename) <= 4096 {
			if target != filename {
				t.Fatalf("filename %q became %q", filename, target)
			}
		}
	})
}
