package envd

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/jsonplain"
)

// AppendJSON appends r's JSON encoding to b and returns the extended
// slice. The bytes are exactly what encoding/json's Marshal produces for r
// (field order, omitempty, HTML-safe string escaping, protojson int64 and
// timestamp forms), written without reflection for the ListDir hot path.
func (r ListDirResponse) AppendJSON(b []byte) []byte {
	// One allocation of about the encoding's size instead of the doublings
	// of appending a large listing (each leaving the last buffer garbage).
	return appendListDir(slices.Grow(b, r.sizeHint()), r.Entries)
}

// entryAppender is an entry type of a ListDir answer: *EntryInfo or
// *PlainEntry.
type entryAppender[E any] interface {
	*E
	AppendJSON(b []byte) []byte
}

// appendListDir appends a ListDir answer of entries: {"entries":[…]}, or
// null for a nil slice, as encoding/json writes it.
func appendListDir[E any, P entryAppender[E]](b []byte, entries []E) []byte {
	b = append(b, `{"entries":`...)
	if entries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = P(&entries[i]).AppendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendListDirPart appends part i of appendListDir's bytes and reports
// whether parts follow (ListDirResponse.AppendJSONPart).
func appendListDirPart[E any, P entryAppender[E]](b []byte, entries []E, i int) ([]byte, bool) {
	if i == 0 {
		b = append(b, `{"entries":`...)
		if entries == nil {
			return append(b, "null}"...), false
		}
		b = append(b, '[')
	} else {
		b = append(b, ',')
	}
	if i < len(entries) {
		b = P(&entries[i]).AppendJSON(b)
	}
	if i+1 >= len(entries) {
		return append(b, "]}"...), false
	}
	return b, true
}

// AppendJSONPart appends part i of r's encoding to b and reports whether
// parts follow: part 0 is the opening (and, for no entries, the whole
// encoding) with the first entry, part i the separator and entry i, the
// last one ends with the closing brackets. Together they are AppendJSON's
// bytes (connect.JSONPartAppender).
func (r ListDirResponse) AppendJSONPart(b []byte, i int) ([]byte, bool) {
	return appendListDirPart(b, r.Entries, i)
}

// SizeHint is about the length of r's encoding: exact or over when no
// string needs escaping (bytes).
func (r ListDirResponse) SizeHint() int { return r.sizeHint() }

// entryJSONFixed is what an entry's encoding takes besides its strings
// when every member is present: names, quotes, separators, the size, mode
// and time at their longest (bytes).
const entryJSONFixed = 200

// sizeHint is r's encoding's length when no string needs escaping (it is
// longer otherwise, and AppendJSON's appends grow the buffer then).
func (r ListDirResponse) sizeHint() int {
	n := len(`{"entries":[]}`)
	for i := range r.Entries {
		e := &r.Entries[i]
		n += entryJSONFixed + len(e.Name) + len(e.Type) + len(e.Path) + len(e.Permissions) + len(e.Owner) + len(e.Group)
		if e.SymlinkTarget != nil {
			n += len(*e.SymlinkTarget)
		}
	}
	return n
}

// AppendJSON appends e's JSON encoding to b, byte for byte encoding/json's
// Marshal of e.
func (e *EntryInfo) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = appendString(b, e.Name)
	b = append(b, `,"type":`...)
	b = appendString(b, string(e.Type))
	b = append(b, `,"path":`...)
	b = appendString(b, e.Path)
	b = appendSizeMode(b, int64(e.Size), e.Mode, e.Permissions)
	if e.Owner != "" {
		b = append(b, `,"owner":`...)
		b = appendString(b, e.Owner)
	}
	if e.Group != "" {
		b = append(b, `,"group":`...)
		b = appendString(b, e.Group)
	}
	if e.ModifiedTime != nil {
		b = append(b, `,"modifiedTime":`...)
		b = e.ModifiedTime.appendJSON(b)
	}
	if e.SymlinkTarget != nil {
		b = append(b, `,"symlinkTarget":`...)
		b = appendString(b, *e.SymlinkTarget)
	}
	return append(b, '}')
}

// appendSizeMode appends an entry's size, mode and permissions members,
// each left out when zero or empty (omitempty).
func appendSizeMode(b []byte, size int64, mode uint32, permissions string) []byte {
	if size != 0 {
		b = append(b, `,"size":"`...)
		b = strconv.AppendInt(b, size, 10)
		b = append(b, '"')
	}
	if mode != 0 {
		b = append(b, `,"mode":`...)
		b = strconv.AppendUint(b, uint64(mode), 10)
	}
	if permissions != "" {
		b = append(b, `,"permissions":`...)
		b = appendString(b, permissions)
	}
	return b
}

// appendJSON appends the protojson timestamp: RFC 3339 in UTC with 0, 3, 6
// or 9 fractional digits and a Z, quoted.
func (t Timestamp) appendJSON(b []byte) []byte {
	tt := time.Time(t).UTC()
	b = append(b, '"')
	if y, mo, d := tt.Date(); y >= 0 && y <= 9999 {
		// AppendFormat's layout walk, written out for the usual years.
		h, mi, s := tt.Clock()
		b = append(b, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
			byte('0'+mo/10), byte('0'+mo%10), '-', byte('0'+d/10), byte('0'+d%10), 'T',
			byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10))
	} else {
		b = tt.AppendFormat(b, "2006-01-02T15:04:05")
	}
	return appendNanos(b, tt.Nanosecond())
}

// appendNanos ends a protojson timestamp: ns nanoseconds as 0, 3, 6 or 9
// fractional digits, the fewest that hold them, then Z and the quote.
func appendNanos(b []byte, ns int) []byte {
	switch {
	case ns == 0:
	case ns%1e6 == 0:
		b = appendFraction(b, ns/1e6, 3)
	case ns%1e3 == 0:
		b = appendFraction(b, ns/1e3, 6)
	default:
		b = appendFraction(b, ns, 9)
	}
	return append(b, `Z"`...)
}

// appendFraction appends "." and v as exactly digits decimal digits.
func appendFraction(b []byte, v, digits int) []byte {
	b = append(b, '.')
	start := len(b)
	for range digits {
		b = append(b, '0')
	}
	for i := len(b) - 1; i >= start && v > 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does with
// HTML escaping on (its default): <, > and & as \u003c, \u003e, \u0026,
// control characters as \b, \f, \n, \r, \t or \u00XX, invalid UTF-8 as
// \ufffd, and U+2028 and U+2029 as \u2028 and \u2029.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while a word of them is left (a path is
		// tens of bytes), then one table lookup a byte.
		for i+8 <= len(s) && jsonplain.HTMLWord(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
		}
		for i < len(s) && jsonplain.HTMLByte(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// PlainEntry is an EntryInfo whose strings need no escaping in JSON, for a
// listing copied from execd's answer without decoding it (execd's
// FileInfoView): Name, Path, Owner and Group are printable ASCII without
// '"', '\\', '<', '>' or '&' (jsonplain.HTMLByte), written as they are. Its
// encoding is the bytes EntryInfo's is for the same entry (AppendJSON).
type PlainEntry struct {
	// Name, Path, Owner and Group are EntryInfo's strings' bytes; an empty
	// Owner or Group is left out, as EntryInfo's.
	Name, Path, Owner, Group []byte
	// Type is EntryInfo.Type.
	Type FileType
	// Size is EntryInfo.Size.
	Size int64
	// Mode is EntryInfo.Mode.
	Mode uint32
	// Permissions is EntryInfo.Permissions.
	Permissions string
	// Modified is the modification time's date and clock in UTC,
	// "2006-01-02T15:04:05" (a four-digit year), and ModifiedNanos its
	// nanoseconds (0–999,999,999); nil for none (EntryInfo.ModifiedTime
	// nil).
	Modified      []byte
	ModifiedNanos int
}

// AppendJSON appends e's JSON encoding to b: EntryInfo.AppendJSON's bytes
// for the same entry.
func (e *PlainEntry) AppendJSON(b []byte) []byte {
	b = append(b, `{"name":"`...)
	b = append(b, e.Name...)
	b = append(b, `","type":"`...)
	b = append(b, e.Type...)
	b = append(b, `","path":"`...)
	b = append(b, e.Path...)
	b = append(b, '"')
	b = appendSizeMode(b, e.Size, e.Mode, e.Permissions)
	if len(e.Owner) > 0 {
		b = append(b, `,"owner":"`...)
		b = append(b, e.Owner...)
		b = append(b, '"')
	}
	if len(e.Group) > 0 {
		b = append(b, `,"group":"`...)
		b = append(b, e.Group...)
		b = append(b, '"')
	}
	if e.Modified != nil {
		b = append(b, `,"modifiedTime":"`...)
		b = append(b, e.Modified...)
		b = appendNanos(b, e.ModifiedNanos)
	}
	return append(b, '}')
}

// PlainListDirResponse is a ListDirResponse of PlainEntry: its encoding is
// ListDirResponse's for the same entries (connect.JSONAppender and
// connect.JSONPartAppender, as ListDirResponse).
type PlainListDirResponse struct {
	// Entries are the directory's entries.
	Entries []PlainEntry
}

// AppendJSON appends r's JSON encoding to b.
func (r PlainListDirResponse) AppendJSON(b []byte) []byte {
	return appendListDir(slices.Grow(b, r.SizeHint()), r.Entries)
}

// AppendJSONPart appends part i of r's encoding to b and reports whether
// parts follow (ListDirResponse.AppendJSONPart).
func (r PlainListDirResponse) AppendJSONPart(b []byte, i int) ([]byte, bool) {
	return appendListDirPart(b, r.Entries, i)
}

// SizeHint is r's encoding's length or over (bytes).
func (r PlainListDirResponse) SizeHint() int {
	n := len(`{"entries":[]}`)
	for i := range r.Entries {
		e := &r.Entries[i]
		n += entryJSONFixed + len(e.Name) + len(e.Type) + len(e.Path) + len(e.Permissions) + len(e.Owner) + len(e.Group)
	}
	return n
}
