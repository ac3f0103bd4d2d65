package authorizer

import (
	"errors"
	"testing"
)

// FuzzDecodeAnswer: any body either decodes to a decision that is exactly
// one of the contract's shapes, or is ErrUnavailable; it never panics and
// never allows with a reason.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{`{"allowed":true}`, `{"allowed":true,"endAt":"2027-01-01T00:00:00Z"}`,
		`{"allowed":false,"reason":"not_found"}`, `{"allowed":false,"reason":"deleting"}`, `{"allowed":false,"reason":"expired"}`,
		`{"allowed":false}`, `{"allowed":true,"reason":"expired"}`, `{}`, `[]`, `null`, `{"allowed":true,"allowed":false}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeAnswer(body)
		if err != nil {
			if !errors.Is(err, ErrUnavailable) || d != (Decision{}) {
				t.Fatalf("error %v with decision %+v", err, d)
			}
			return
		}
		switch {
		case d.Allowed && d.Reason != "":
			t.Fatalf("allowed with reason %q", d.Reason)
		case !d.Allowed && d.Reason != ReasonNotFound && d.Reason != ReasonDeleting && d.Reason != ReasonExpired:
			t.Fatalf("refused with reason %q", d.Reason)
		case !d.Allowed && !d.EndAt.IsZero():
			t.Fatalf("refused with an end time")
		}
	})
}
