package bearer

import (
	"crypto/sha256"
	"net/http"
	"testing"
)

// TestFromRequest covers the accepted form and each refusal.
func TestFromRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []string
		want    string
		ok      bool
	}{
		{"bearer", []string{"Bearer abc.def"}, "abc.def", true},
		{"lower-case scheme", []string{"bearer abc"}, "abc", true},
		{"none", nil, "", false},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", false},
		{"basic", []string{"Basic YTpi"}, "", false},
		{"empty credential", []string{"Bearer "}, "", false},
		{"no space", []string{"Bearerabc"}, "", false},
		{"space in credential", []string{"Bearer a b"}, "", false},
		{"tab in credential", []string{"Bearer a\tb"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
			for _, h := range tc.headers {
				r.Header.Add("Authorization", h)
			}
			got, ok := FromRequest(r)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("FromRequest = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestMatchesDigest: the credential's SHA-256 must equal one of the
// digests; a malformed header, another credential or no digests → false.
func TestMatchesDigest(t *testing.T) {
	a, b := sha256.Sum256([]byte("token-a")), sha256.Sum256([]byte("token-b"))
	for _, tc := range []struct {
		name    string
		header  string
		digests [][sha256.Size]byte
		want    bool
	}{
		{"first of two", "Bearer token-a", [][sha256.Size]byte{a, b}, true},
		{"second of two", "bearer token-b", [][sha256.Size]byte{a, b}, true},
		{"another credential", "Bearer token-c", [][sha256.Size]byte{a, b}, false},
		{"no digests", "Bearer token-a", nil, false},
		{"malformed header", "Basic token-a", [][sha256.Size]byte{a}, false},
		{"no header", "", [][sha256.Size]byte{a}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "http://127.0.0.1/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if got := MatchesDigest(r, tc.digests); got != tc.want {
				t.Fatalf("MatchesDigest = %v, want %v", got, tc.want)
			}
		})
	}
}
