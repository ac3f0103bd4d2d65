package listfile

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson"
)

var errInvalid = errors.New("invalid")

var format = Format{Key: "credentials", Noun: "field", Invalid: errInvalid}

// collect parses data with parse and returns the records as JSON.
func collect(parse func([]byte, Format, func(int, []byte) error) error, data []byte) ([]string, error) {
	var out []string
	err := parse(data, format, func(i int, raw []byte) error {
		if i != len(out) {
			return fmt.Errorf("record %d after %d", i, len(out))
		}
		out = append(out, string(raw))
		return nil
	})
	return out, err
}

// chunked parses a YAML block list item by item, failing when data is not
// one.
func chunked(data []byte, f Format, record func(int, []byte) error) error {
	if _, ok := blockItems(data, f.Key); !ok {
		return errors.New("not a block list")
	}
	return Parse(data, f, record)
}

func TestParseShapes(t *testing.T) {
	const a, b = `{"id":"a","k":1}`, `{"id":"b","tags":["x","z"]}`
	for name, tc := range map[string]struct {
		data  string
		block bool // parsed item by item
		want  []string
	}{
		"JSON":                      {`{"credentials": [{"id": "a", "k": 1}, {"id": "b", "tags": ["x", "z"]}]}`, false, []string{`{"id": "a", "k": 1}`, `{"id": "b", "tags": ["x", "z"]}`}},
		"JSON empty":                {` {"credentials":[]} `, false, nil},
		"YAML block":                {"credentials:\n  - id: a\n    k: 1\n  - id: b\n    tags: [x, z]\n", true, []string{a, b}},
		"YAML block at column 0":    {"credentials:\n- id: a\n  k: 1\n- id: b\n  tags:\n  - x\n  - z\n", true, []string{a, b}},
		"YAML comments and markers": {"# head\n---\ncredentials: # list\n  # first\n  - id: a # c\n\n    k: 1\n# between\n  - {id: b, tags: [x, z]}\n...\n# tail\n", true, []string{a, b}},
		"YAML CRLF":                 {"credentials:\r\n  - id: a\r\n    k: 1\r\n", true, []string{a}},
		"YAML block scalar":         {"credentials:\n  - id: |\n      - not an item\n    k: 1\n", true, []string{`{"id":"- not an item\n","k":1}`}},
		"YAML flow list":            {"credentials: [{id: a, k: 1}]\n", false, []string{a}},
		"YAML flow mapping":         {"{credentials: [{id: a, k: 1}]}", false, []string{a}},
		"YAML quoted key":           {"\"credentials\":\n  - id: a\n    k: 1\n", true, []string{a}},
		"YAML BOM":                  {"\xef\xbb\xbfcredentials:\n  - id: a\n    k: 1\n", true, []string{a}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := collect(Parse, []byte(tc.data))
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("Parse = %q, %v; want %q", got, err, tc.want)
			}
			_, ok := blockItems(bytes.TrimPrefix([]byte(tc.data), []byte("\xef\xbb\xbf")), "credentials")
			if ok != tc.block {
				t.Fatalf("block list %v, want %v", ok, tc.block)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	big := "credentials: [\n" + strings.Repeat("  {id: a},\n", MaxWholeYAML/10) + "]\n"
	for name, tc := range map[string]struct{ data, want string }{
		"empty":                               {"", "top level must be a mapping with a credentials list"},
		"list":                                {"[1, 2]", "top level must be a mapping"},
		"JSON unknown key":                    {`{"credentials": [], "version": 2}`, `unknown top-level field "version"`},
		"JSON missing key":                    {`{}`, `missing top-level field "credentials"`},
		"JSON null list":                      {`{"credentials": null}`, "credentials must be a list"},
		"JSON duplicate key":                  {`{"credentials": [], "credentials": []}`, "not valid JSON or YAML"},
		"JSON trailing data":                  {`{"credentials": []} x`, "not valid JSON or YAML"},
		"YAML second document":                {"credentials: []\n---\nfoo: 1\n", "one YAML document"},
		"YAML unknown key":                    {"credentials: []\nversion: 2\n", `unknown top-level field "version"`},
		"YAML key after list":                 {"credentials:\n  - id: a\nversion: 2\n", `unknown top-level field "version"`},
		"YAML duplicate member":               {"credentials:\n  - id: a\n    id: b\n", "already set"},
		"YAML alias across runs":              {"credentials:\n  - &x {id: a}\n" + strings.Repeat("  - {id: b}\n", batchItems-1) + "  - *x\n", fmt.Sprintf("credentials[%d]", batchItems)},
		"YAML broken item":                    {"credentials:\n  - id: [a\n  - id: b\n", "credentials[0] (line 2)"},
		"YAML over 1 MiB, flow":               {big, "must hold only the credentials list, in block style"},
		"binary":                              {"\x00\x01\x02\xff", "not valid JSON or YAML"},
		"YAML bad UTF-8 before the key":       {"# \xe9\ncredentials:\n  - id: a\n", "invalid trailing UTF-8 octet"},
		"YAML bad UTF-8 before the items":     {"credentials:\n  #0\xe9\n  - id: a\n", "invalid trailing UTF-8 octet"},
		"YAML bad UTF-8 after the list":       {"credentials:\n  - id: a\n# \xe9\n", "incomplete UTF-8 octet sequence"},
		"YAML control character in a comment": {"credentials: #\v\n  - id: a\n", "control characters are not allowed"},
		"YAML tab before a comment, first":    {"\t# c\ncredentials:\n  - id: a\n", "cannot start any token"},
		"YAML tab before the first item":      {"credentials:\n \t\n  - id: a\n", "cannot start any token"},
		"YAML over 1 MiB, control character":  {"credentials:\n" + strings.Repeat("  - id: a\n", MaxWholeYAML/10) + "# \x7f\n", "holds control characters"},
		"YAML over 1 MiB, bad UTF-8":          {"credentials:\n" + strings.Repeat("  - id: a\n", MaxWholeYAML/10) + "# \xe9\n", "over 1048576 bytes is not valid UTF-8"},
		"JSON record too large":               {`{"credentials": [{"id": "a"}, {"id": "` + strings.Repeat("x", DefaultMaxRecord) + `"}]}`, "credentials[1] is larger than 65536 bytes"},
		"YAML record too large":               {"credentials:\n  - id: a\n  - id: " + strings.Repeat("x", DefaultMaxRecord) + "\n", "credentials[1] is larger than 65536 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := collect(Parse, []byte(tc.data))
			if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %v, want %q", err, tc.want)
			}
		})
	}
	// A record error is returned as it is.
	mine := errors.New("mine")
	err := Parse([]byte("credentials:\n  - id: a\n"), format, func(int, []byte) error { return mine })
	if err != mine {
		t.Fatalf("record error %v", err)
	}
}

// TestParseLargeJSONFaults: a JSON file over MaxWholeYAML (not retried
// as YAML) that is malformed is refused with strictjson's class, the byte
// offset, what is wrong there and the record's pointer, never with the
// bytes around the fault (jsontext's own text quotes the six after an
// unpaired surrogate escape).
func TestParseLargeJSONFaults(t *testing.T) {
	const secret = "SECRETVALUE"
	head := `{"credentials": [` + strings.Repeat(`{"id": "a"}, `, MaxWholeYAML/12)
	n := MaxWholeYAML / 12 // the index of the broken record
	for name, tc := range map[string]struct {
		record, at, what string // what is wrong at the first at in record ("": a repeated name)
	}{
		"unpaired surrogate": {`{"id": "\ud800` + secret + `"}`, `\`, "unpaired surrogate escape"},
		"invalid UTF-8":      {`{"id": "` + "\xff" + secret + `"}`, "\xff", "invalid UTF-8"},
		"invalid escape":     {`{"id": "\q` + secret + `"}`, `\`, "invalid escape sequence"},
		"bare word":          {`{"id": ` + secret + `}`, secret, "syntax error"},
		"repeated name":      {`{"id": "a", "id": "` + secret + `"}`, "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := collect(Parse, []byte(head+tc.record+`]}`))
			class, want := strictjson.ErrDuplicateMember, fmt.Sprintf("duplicate member name at /credentials/%d/id", n)
			if tc.what != "" {
				off := len(head) + strings.Index(tc.record, tc.at)
				class, want = strictjson.ErrMalformed, fmt.Sprintf("malformed JSON at byte %d: %s within /credentials/%d/id", off, tc.what, n)
			}
			if want = "invalid: not valid JSON: " + want; !errors.Is(err, errInvalid) || !errors.Is(err, class) || err.Error() != want {
				t.Fatalf("Parse error %v, want %q", err, want)
			}
			if strings.Contains(err.Error(), secret[:3]) {
				t.Errorf("error %q quotes the record", err)
			}
		})
	}
}

// FuzzParse: the item-by-item YAML parse never accepts what the whole-
// document parse refuses, nor gives different records; Parse never
// panics, and every error it makes wraps the format's class.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"credentials:\n  - id: a\n    k: 1\n  - id: b\n",
		"credentials:\n- id: a\n  tags:\n  - x\n- id: b\n",
		"credentials:\n  - id: |\n      - x\n    k: 1\n  - id: b\n",
		"credentials:\n  - id: \"a\n  - b\"\n",
		"credentials:\n  - id: a\n   - b\n",
		"credentials:\n  - &x {id: a}\n  - *x\n",
		"credentials:\n  - id: a\n  # c\n...\n",
		"---\ncredentials:\n  - id: a\n---\ncredentials: []\n",
		"credentials:\n  - id: a\n\t- b\n",
		"credentials:\n  -\n    id: a\n  - [1, 2]\n  - x\n",
		`{"credentials": [{"id": "a"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<10 {
			return
		}
		if _, err := collect(Parse, data); err != nil && !errors.Is(err, errInvalid) {
			t.Fatalf("Parse error %v does not wrap the format's class", err)
		}
		items, err := collect(chunked, data)
		if err != nil {
			return
		}
		whole, err := collect(parseWholeYAML, data)
		if err != nil {
			t.Fatalf("item by item accepted %q as %q; the whole document is refused: %v", data, items, err)
		}
		if strings.Join(items, "\x00") != strings.Join(whole, "\x00") {
			t.Fatalf("item by item %q, whole document %q for %q", items, whole, data)
		}
	})
}

// TestJSONFaultAfterARecord: a document read as JSON that breaks after its
// first record is refused as not valid JSON (the format's class), and the
// record seen once: it is not read again as YAML, which would hand the
// same index to record a second time (found by FuzzParse: "[000]").
func TestJSONFaultAfterARecord(t *testing.T) {
	for _, data := range []string{`{"credentials":[000]}`, `{"credentials":[{"id":"a"}, {id: b}]}`} {
		calls := 0
		err := Parse([]byte(data), format, func(i int, raw []byte) error {
			calls++
			if i != calls-1 {
				t.Fatalf("%s: record %d as call %d", data, i, calls)
			}
			return nil
		})
		if !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "not valid JSON") {
			t.Errorf("%s: error %v, want the format's class, not valid JSON", data, err)
		}
		if calls != 1 {
			t.Errorf("%s: record called %d times, want 1", data, calls)
		}
	}
	// Not JSON before the first record: read as YAML, as before.
	got, err := collect(Parse, []byte(`{credentials: [{id: a}, {id: b}]}`))
	if err != nil || len(got) != 2 {
		t.Errorf("a YAML flow mapping: %q, %v", got, err)
	}
}
