// Package listfile parses the record files sandgate reads and reloads
// (resource credentials, node credentials): a JSON or YAML document whose
// top level is a mapping with exactly one key holding a list of records,
// handed to the caller one record at a time, so that the memory a parse
// takes stays close to the file's own size instead of a multiple of it.
//
// JSON (a document whose first non-blank byte is "{") is read with a
// streaming tokenizer (go-json-experiment's jsontext: duplicate names and
// invalid UTF-8 refused), each record as its own JSON value.
//
// YAML is parsed record by record when the list is a block sequence, the
// shape every generator writes:
//
//	credentials:
//	  - id: a
//	    enabled: true
//	  - id: b
//
// The lines of each "- " item are cut out, and runs of up to 64 items are
// parsed together (sigs.k8s.io/yaml, strict: duplicate keys refused) and
// converted to JSON. An item ends where the next line at the item's own
// indentation starts, which in YAML can only be the next item or the end
// of the list. Anchors and aliases between records are not supported: an
// alias of another record's anchor fails unless both fall in the same run. A YAML document in any other shape (a flow
// list, other top-level keys, more than one document, tab indentation) is
// parsed whole, as it always was, but only up to MaxWholeYAML bytes.
package listfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate/internal/strictjson"
)

// DefaultMaxRecord is the largest record, in bytes of the file (a YAML
// item's lines, a JSON element), when Format.MaxRecord is 0: 64 KiB, far
// above any credential record, so that one giant record cannot make a
// parse cost a multiple of the whole file.
const DefaultMaxRecord = 64 << 10

// MaxWholeYAML is the largest YAML document parsed whole (1 MiB), for the
// shapes that are not a block list: parsing YAML whole costs about 30
// times the document's size in memory.
const MaxWholeYAML = 1 << 20

// Format names what a file holds.
type Format struct {
	// Key is the top-level key that holds the list ("credentials").
	Key string
	// Noun is the word for a mapping key in errors ("field", "member").
	Noun string
	// Invalid is the caller's error class; every error about the
	// document's shape wraps it. Errors of the record callback are
	// returned as they are.
	Invalid error
	// MaxRecord is the largest record in bytes; a larger one is refused
	// before it is converted or decoded. 0 means DefaultMaxRecord.
	MaxRecord int
}

func (f Format) maxRecord() int {
	if f.MaxRecord > 0 {
		return f.MaxRecord
	}
	return DefaultMaxRecord
}

func (f Format) tooLarge(i int) error {
	return fmt.Errorf("%w: %s[%d] is larger than %d bytes", f.Invalid, f.Key, i, f.maxRecord())
}

// Parse calls record(i, raw) for each element i of the list under f.Key in
// data, in order, where raw is the element as one JSON value (valid
// UTF-8, unique member names). raw is only valid during the call. It stops
// at the first error: record's own error as it is, or an error wrapping
// f.Invalid that says what is wrong with the document (not valid JSON or
// YAML, the top level not a mapping, an unknown top-level key, a missing
// key, the value not a list, a record over f.MaxRecord bytes), never
// quoting a value. A document whose first character is '{' is read as
// JSON; one that is not JSON before its first record is read again as
// YAML (a flow mapping, up to MaxWholeYAML bytes), while a JSON fault
// after a record is refused as not valid JSON, so record never sees an
// index twice.
func Parse(data []byte, f Format, record func(i int, raw []byte) error) error {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	if first := bytes.TrimLeft(data, " \t\r\n"); len(first) > 0 && first[0] == '{' {
		delivered := 0
		err := parseJSON(data, f, func(i int, raw []byte) error {
			delivered++
			return record(i, raw)
		})
		var se *jsontext.SyntacticError
		if errors.As(err, &se) && len(data) <= MaxWholeYAML && delivered == 0 {
			// A YAML flow mapping ({credentials: [...]}) is not JSON. Only
			// before the first record: record has already seen the records
			// before the fault, and must not see them again from the YAML
			// reading (where they may read differently: "[000]" is the
			// number 0 to YAML, a record 0 and then a fault to JSON).
			return parseWholeYAML(data, f, record)
		}
		if se != nil {
			// jsontext's own text can quote the bytes after the fault.
			return fmt.Errorf("%w: not valid JSON: %w%s", f.Invalid, strictjson.Fault(data, se), within(se))
		}
		return err
	}
	items, ok := blockItems(data, f.Key)
	if !ok {
		if len(data) > MaxWholeYAML {
			if !yamlText(data) {
				return fmt.Errorf("%w: not valid JSON or YAML: a YAML file over %d bytes is not valid UTF-8 or holds control characters", f.Invalid, MaxWholeYAML)
			}
			return fmt.Errorf("%w: a YAML file over %d bytes must hold only the %s list, in block style (%q, then one \"- \" item per record); or use JSON",
				f.Invalid, MaxWholeYAML, f.Key, f.Key+":")
		}
		return parseWholeYAML(data, f, record)
	}
	for i, it := range items {
		if len(it.text) > f.maxRecord() {
			return f.tooLarge(i)
		}
	}
	for first := 0; first < len(items); first += batchItems {
		if err := parseBatch(items[first:min(first+batchItems, len(items))], first, f, record); err != nil {
			return err
		}
	}
	return nil
}

// batchItems is how many block list items are converted from YAML at once:
// enough to spread the parser's fixed cost, few enough to keep the
// conversion's memory small (the items of a generated file are a few
// hundred bytes each).
const batchItems = 64

// parseBatch converts the consecutive items starting at index first as
// one YAML sequence and hands their records on. When the batch does not
// convert, each item is converted alone to name the first one that fails.
func parseBatch(items []item, first int, f Format, record func(int, []byte) error) error {
	var text []byte
	for _, it := range items {
		text = append(text, it.text...)
	}
	j, err := yaml.YAMLToJSONStrict(text)
	if err != nil {
		for k, it := range items {
			if _, err := yaml.YAMLToJSONStrict(it.text); err != nil {
				return fmt.Errorf("%w: not valid JSON or YAML: %s[%d] (line %d): %s", f.Invalid, f.Key, first+k, it.line, err.Error())
			}
		}
		return fmt.Errorf("%w: not valid JSON or YAML: %s[%d] to %s[%d] (lines %d to %d): %s", f.Invalid,
			f.Key, first, f.Key, first+len(items)-1, items[0].line, items[len(items)-1].line, err.Error())
	}
	dec := jsontext.NewDecoder(bytes.NewReader(j))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '[' {
		return fmt.Errorf("%w: not valid JSON or YAML: %s[%d] (line %d)", f.Invalid, f.Key, first, items[0].line)
	}
	for k := range items {
		raw, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("%w: not valid JSON or YAML: %s[%d] (line %d)", f.Invalid, f.Key, first+k, items[k].line)
		}
		if err := record(first+k, raw); err != nil {
			return err
		}
	}
	if dec.PeekKind() != ']' {
		// Each item is one sequence entry; more would mean a cut went wrong.
		return fmt.Errorf("%w: not valid JSON or YAML: %s[%d] to %s[%d]", f.Invalid, f.Key, first, f.Key, first+len(items)-1)
	}
	return nil
}

// parseJSON streams a JSON document.
func parseJSON(data []byte, f Format, record func(int, []byte) error) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(false), jsontext.AllowInvalidUTF8(false))
	if _, err := dec.ReadToken(); err != nil { // "{", checked by the caller
		return err
	}
	seen := false
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if name := tok.String(); name != f.Key {
			// Read the rest first: a syntax error comes before the name.
			if err := dec.SkipValue(); err != nil {
				return err
			}
			return fmt.Errorf("%w: unknown top-level %s %q", f.Invalid, f.Noun, name)
		}
		seen = true
		if dec.PeekKind() != '[' {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s must be a list", f.Invalid, f.Key)
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for i := 0; dec.PeekKind() != ']'; i++ {
			raw, err := dec.ReadValue()
			if err != nil {
				return err
			}
			if len(raw) > f.maxRecord() {
				return f.tooLarge(i)
			}
			if err := record(i, raw); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil { // "]"
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil { // "}"
		return err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			return fmt.Errorf("%w: not valid JSON: data after the top-level object", f.Invalid)
		}
		return err
	}
	if !seen {
		return fmt.Errorf("%w: missing top-level %s %q", f.Invalid, f.Noun, f.Key)
	}
	return nil
}

// parseWholeYAML converts the whole YAML document to JSON and parses that.
// sigs.k8s.io/yaml reads only the first document and ignores what follows
// a top-level flow collection, so the stream is first checked to hold
// exactly one document (go.yaml.in/yaml/v3).
func parseWholeYAML(data []byte, f Format, record func(int, []byte) error) error {
	if err := oneDocument(data); err != nil {
		return fmt.Errorf("%w: not valid JSON or YAML: %s", f.Invalid, err.Error())
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("%w: not valid JSON or YAML: %s", f.Invalid, err.Error())
	}
	if first := bytes.TrimLeft(j, " \t\r\n"); len(first) == 0 || first[0] != '{' {
		return fmt.Errorf("%w: top level must be a mapping with a %s list", f.Invalid, f.Key)
	}
	err = parseJSON(j, f, record)
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		// The converter's output is JSON; only a duplicate name can fail.
		return fmt.Errorf("%w: not valid JSON or YAML: %w", f.Invalid, strictjson.Fault(j, se))
	}
	return err
}

// within names the record a malformation of the JSON file is in: its JSON
// pointer (" within /nodes/12/node_id"), made of names and indices only;
// "" at the top level and for a repeated name (its class's text has it).
func within(se *jsontext.SyntacticError) string {
	if se.JSONPointer == "" || errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return ""
	}
	return " within " + string(se.JSONPointer)
}

// oneDocument reports an error unless data is a YAML stream of at most one
// document.
func oneDocument(data []byte) error {
	dec := yaml3.NewDecoder(bytes.NewReader(data))
	var n yaml3.Node
	if err := dec.Decode(&n); err != nil {
		if err == io.EOF {
			return nil
		}
		return err
	}
	if err := dec.Decode(&n); err != io.EOF {
		if err == nil {
			return errors.New("more than one YAML document")
		}
		return err
	}
	return nil
}

// item is the text of one block sequence item, with its first line's
// number (1-based) in the document.
type item struct {
	text []byte
	line int
}

var (
	// keyLine is a top-level key with nothing after the colon but an
	// optional comment.
	keyLine = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*|"[A-Za-z_][A-Za-z0-9_-]*"|'[A-Za-z_][A-Za-z0-9_-]*')[ ]*:(?:[ ]+(#.*)?)?$`)
	// docStart is a document start marker with nothing after it but an
	// optional comment.
	docStart = regexp.MustCompile(`^---(?:[ ]+(#.*)?)?$`)
)

// blockItems cuts a YAML document shaped "key:" then a block sequence into
// its items. It returns false for any other shape, which the caller then
// parses whole: a flow or empty value, other top-level content before or
// after the list, a second document, a tab at the start of a line outside
// an item, a directive. The cut drops the blank and comment lines before
// the first item and after the list without parsing them, so it also
// returns false for a document the YAML parser would refuse for what
// those lines hold: bytes that are not valid UTF-8 (which the parser
// refuses, or reads as UTF-16 after a byte order mark), characters YAML
// does not allow anywhere (control characters), and a tab before the
// text of such a line. FuzzParse found the first two ("credentials:\n
// #0\xe9\n  -", "credentials: #\v\n-" accepted item by item).
func blockItems(data []byte, key string) ([]item, bool) {
	if otherLineBreak(data) || !yamlText(data) {
		return nil, false
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	n := 0
	// Before the key: blank lines, comments, at most one "---".
	started := false
	for ; n < len(lines); n++ {
		l := trimEOL(lines[n])
		switch {
		case skippable(l):
			continue
		case isBlankOrComment(l):
			return nil, false
		case !started && docStart.Match(l):
			started = true
			continue
		}
		break
	}
	if n == len(lines) {
		return nil, false
	}
	m := keyLine.FindSubmatch(trimEOL(lines[n]))
	if m == nil || unquote(string(m[1])) != key {
		return nil, false
	}
	n++
	var items []item
	indent := -1
	for ; n < len(lines); n++ {
		l := trimEOL(lines[n])
		if isBlankOrComment(l) {
			if len(items) > 0 {
				items[len(items)-1].text = append(items[len(items)-1].text, lines[n]...)
			} else if !skippable(l) {
				return nil, false
			}
			continue
		}
		sp := leadingSpaces(l)
		if sp < len(l) && l[sp] == '\t' {
			if indent >= 0 && sp > indent {
				items[len(items)-1].text = append(items[len(items)-1].text, lines[n]...)
				continue
			}
			return nil, false
		}
		if indent < 0 {
			if !isItemStart(l, sp) {
				return nil, false // an empty value, or no block sequence
			}
			indent = sp
		}
		switch {
		case sp == indent && isItemStart(l, sp):
			items = append(items, item{text: append([]byte(nil), lines[n]...), line: n + 1})
		case sp > indent:
			items[len(items)-1].text = append(items[len(items)-1].text, lines[n]...)
		default:
			// The list ended: only blank lines, comments and a document end
			// marker may follow.
			for ; n < len(lines); n++ {
				l := trimEOL(lines[n])
				if !skippable(l) && !bytes.Equal(bytes.TrimRight(l, " "), []byte("...")) {
					return nil, false
				}
			}
			return items, true
		}
	}
	return items, indent >= 0
}

// otherLineBreak reports whether data holds a line break other than "\n"
// and "\r\n": YAML also breaks lines at a lone "\r", and YAML 1.1 (the
// parser's) at U+0085, U+2028 and U+2029.
func otherLineBreak(data []byte) bool {
	for rest := data; ; {
		i := bytes.IndexByte(rest, '\r')
		if i < 0 {
			break
		}
		if i+1 == len(rest) || rest[i+1] != '\n' {
			return true
		}
		rest = rest[i+1:]
	}
	return bytes.Contains(data, []byte("\u0085")) || bytes.Contains(data, []byte("\u2028")) || bytes.Contains(data, []byte("\u2029"))
}

func trimEOL(l []byte) []byte {
	l = bytes.TrimSuffix(l, []byte("\n"))
	return bytes.TrimSuffix(l, []byte("\r"))
}

func isBlankOrComment(l []byte) bool {
	t := bytes.TrimLeft(l, " \t")
	return len(t) == 0 || t[0] == '#'
}

// skippable reports whether l is a blank or comment line that the cut may
// drop unparsed: one with no tab before its text (the YAML parser refuses
// a tab at the start of a line outside a flow collection).
func skippable(l []byte) bool {
	t := bytes.TrimLeft(l, " ")
	return len(t) == 0 || t[0] == '#'
}

// yamlText reports whether data is valid UTF-8 holding only the
// characters YAML 1.1 allows in a stream (tab, line feed, carriage return,
// U+0020-U+007E, U+0085, U+00A0-U+D7FF, U+E000-U+FFFD and above U+FFFF),
// the check the parser makes on every character.
func yamlText(data []byte) bool {
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		switch {
		case r == utf8.RuneError && size == 1:
			return false
		case r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85,
			r >= 0xa0 && r <= 0xd7ff, r >= 0xe000 && r <= 0xfffd, r >= 0x10000:
		default:
			return false
		}
		data = data[size:]
	}
	return true
}

func leadingSpaces(l []byte) int {
	n := 0
	for n < len(l) && l[n] == ' ' {
		n++
	}
	return n
}

// isItemStart reports whether l has a block sequence entry indicator at
// column sp: "-" followed by a space or the end of the line.
func isItemStart(l []byte, sp int) bool {
	return sp < len(l) && l[sp] == '-' && (sp+1 == len(l) || l[sp+1] == ' ')
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}
