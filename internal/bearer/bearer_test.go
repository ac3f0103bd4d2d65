package bearer

import (
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
