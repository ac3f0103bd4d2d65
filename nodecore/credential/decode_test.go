package credential

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson"
)

// TestDecodeRecordClasses: a record that is not one well-formed JSON
// object is refused with ErrInvalid and strictjson's class for what it is
// (malformed JSON with the byte offset, a well-formed non-object with its
// kind, a repeated member with its name), never with a piece of the
// digest. The file path never hands decodeRecord a malformed record
// (listfile's tokenizer refuses the file first: TestOpenFileRejects), so
// this calls it directly, as a source of single records would.
func TestDecodeRecordClasses(t *testing.T) {
	digest := hexSum(secretA)
	rec := fmt.Sprintf(`{"node_id": %q, "enabled": true, "credential_sha256": %q, "installation_id": %q, `+
		`"provider": "docker", "backend_fingerprint": %q, "deployment_generation": 3, "specification_digest": %q}`,
		nodeA, digest, instA, fp, spec)
	if _, err := decodeRecord([]byte(rec)); err != nil {
		t.Fatalf("the unbroken record: %v", err)
	}
	in := func(old, new string) string { return strings.Replace(rec, old, new, 1) }
	at := func(s, sub string) int { return strings.Index(s, sub) }
	truncated := rec[:at(rec, digest)+20]
	badUTF8 := in(digest, digest[:10]+"\xff"+digest[10:])
	surrogate := in(digest, digest[:10]+`\ud800`+digest[10:])
	noColon := in(`"credential_sha256": `, `"credential_sha256" `)
	cases := []struct {
		name, in string
		class    error
		text     string
	}{
		{"empty", "", strictjson.ErrMalformed, "malformed JSON at byte 0: empty input"},
		{"truncated", truncated, strictjson.ErrMalformed, fmt.Sprintf("malformed JSON at byte %d: unexpected end of input", len(truncated))},
		{"syntax error", noColon, strictjson.ErrMalformed, fmt.Sprintf("malformed JSON at byte %d: syntax error", at(noColon, `" "`)+2)},
		{"invalid UTF-8", badUTF8, strictjson.ErrMalformed, fmt.Sprintf("malformed JSON at byte %d: invalid UTF-8", at(badUTF8, "\xff"))},
		{"unpaired surrogate", surrogate, strictjson.ErrMalformed, fmt.Sprintf("malformed JSON at byte %d: unpaired surrogate escape", at(surrogate, `\ud800`))},
		{"trailing data", rec + " {}", strictjson.ErrMalformed, fmt.Sprintf("malformed JSON at byte %d: data after the top-level value", len(rec)+1)},
		{"array", `["` + digest + `"]`, strictjson.ErrNotObject, "not a JSON object: the value is a JSON array"},
		{"string", `"` + digest + `"`, strictjson.ErrNotObject, "not a JSON object: the value is a JSON string"},
		{"duplicate member", in(`"provider": "docker"`, `"provider": "docker", "provider": "docker"`), strictjson.ErrDuplicateMember, "duplicate member name at /provider"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeRecord([]byte(tc.in))
			if r != nil || !errors.Is(err, ErrInvalid) || !errors.Is(err, tc.class) || !strings.HasSuffix(err.Error(), ": "+tc.text) {
				t.Fatalf("decodeRecord = %v, %v; want ErrInvalid and %q", r, err, tc.text)
			}
			if strings.Contains(err.Error(), digest[:10]) || strings.Contains(err.Error(), digest[10:20]) {
				t.Errorf("error %q quotes the digest", err)
			}
		})
	}
}
