package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadInternalTokens: the single-token file of before still reads as
// one token; several lines are several tokens (a rotation); bad files are
// refused without their content in the error.
func TestReadInternalTokens(t *testing.T) {
	a, b := strings.Repeat("a", 32), strings.Repeat("b", 40)
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"one, no newline", a, []string{a}},
		{"one, newline", a + "\n", []string{a}},
		{"one, CRLF", a + "\r\n", []string{a}},
		{"two", a + "\n" + b + "\n", []string{a, b}},
		{"blank lines", "\n" + a + "\n\n" + b, []string{a, b}},
	} {
		p := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readInternalTokens(p)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q %v; want %q", tc.name, got, err, tc.want)
		}
	}
	secret := "short-secret-value"
	for _, tc := range []struct{ name, body string }{
		{"empty", ""},
		{"blank", "\n\n"},
		{"short", a + "\n" + secret + "\n"},
		{"space", a + " " + secret + "\n"},
		{"repeated", a + "\n" + a + "\n"},
		{"too many", strings.Repeat(a+"\n", 1) + strings.Repeat("c", 32) + "\n" + strings.Repeat("d", 32) + "\n" + strings.Repeat("e", 32) + "\n" + strings.Repeat("f", 32) + "\n"},
		{"too large", strings.Repeat("x", 4097)},
	} {
		p := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readInternalTokens(p)
		if err == nil {
			t.Errorf("%s: %d tokens, want an error", tc.name, len(got))
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), a) {
			t.Errorf("%s: the error %q shows the file's content", tc.name, err)
		}
	}
	if _, err := readInternalTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file read without an error")
	}
}
