package execd

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// listDecoder is the reusable state of decodeFileInfoList: the body buffer
// and a jsontext decoder over it.
type listDecoder struct {
	body []byte
	rd   bytes.Reader
	dec  jsontext.Decoder
	name []byte
	str  []byte
	// paths holds every entry's unquoted path, one after the other, and
	// spans where each entry's is in it ({-1, -1}: none): the paths
	// become one string and the entries' Path slices of it, one
	// allocation per listing instead of one per entry.
	paths []byte
	spans []pathSpan
	// seen holds the strings of this body that repeat across entries
	// (types, owners, groups), so each is allocated once.
	seen map[string]string
}

// intern returns b as a string, the same string for the same bytes within
// one body when it is short (type, owner and group values).
func (ld *listDecoder) intern(b []byte) string {
	if len(b) > 32 {
		return string(b)
	}
	if s, ok := ld.seen[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(ld.seen) < 64 {
		ld.seen[s] = s
	}
	return s
}

// pathSpan is where one entry's path lies in listDecoder.paths.
type pathSpan struct{ start, end int }

var listDecoders = sync.Pool{New: func() any { return new(listDecoder) }}

// maxPooledList is the largest body buffer kept for reuse (bytes).
const maxPooledList = 1 << 20

// decodeFileInfoList decodes execd's JSON array of FileInfo from resp
// (at most MaxListingBytes are read; an answer naming "path" more than
// MaxListingEntries times is refused before it is decoded, and one of more
// elements, nulls and objects without a path included, as it is decoded)
// and closes the
// body. It reads the
// body once into a pooled buffer, sizes the slice from it and walks the
// tokens without reflection, reading only the fields the gateway uses:
// path, type, size, modified_at, owner, group and mode; created_at and
// unknown members are skipped without being decoded. For what execd sends
// the result equals encoding/json's Unmarshal into []FileInfo (names match
// ASCII case-insensitively, a later duplicate wins, null leaves a field
// unset, invalid UTF-8 becomes U+FFFD, times are RFC 3339 as
// time.Time.UnmarshalJSON reads them); anything else is an *Error with
// KindUnexpected.
func (c *Client) decodeFileInfoList(resp *http.Response) ([]FileInfo, error) {
	defer drain(resp)
	limit := c.listingBytes()
	tooLarge := func() error { // built only when needed: three allocations
		return &Error{Kind: KindUnexpected, Status: resp.StatusCode,
			Message: "execd's directory listing is larger than " + strconv.FormatInt(limit, 10) + " bytes (the gateway's max_listing_size)"}
	}
	if resp.ContentLength > limit {
		return nil, tooLarge()
	}
	ld := listDecoders.Get().(*listDecoder)
	defer func() {
		if cap(ld.body) > maxPooledList {
			ld.body = nil // a large answer's buffer, not kept
		}
		if cap(ld.paths) <= maxPooledList {
			ld.body = ld.body[:0]
			ld.rd.Reset(nil)
			ld.dec.Reset(&ld.rd)
			listDecoders.Put(ld)
		}
	}()
	// Sized from Content-Length up to maxPooledList only: past that the
	// bytes are gathered as they arrive (appendBody), so an answer that
	// declares the limit and sends little (code in the sandbox can answer
	// for execd) costs what it sent.
	buf := ld.body[:0]
	if n := resp.ContentLength; n > 0 && int64(cap(buf)) <= n && cap(buf) < maxPooledList {
		buf = make([]byte, 0, min(n+1, maxPooledList))
	}
	body, err := appendBody(buf, resp.Body, limit+1)
	if err != nil {
		return nil, unexpectedJSON(resp)
	}
	ld.body = body
	if int64(len(body)) > limit {
		return nil, tooLarge()
	}
	maxEntries := c.listingEntries()
	tooMany := func() error {
		return &Error{Kind: KindUnexpected, Status: resp.StatusCode,
			Message: "execd's directory listing names more than " + strconv.Itoa(maxEntries) + " entries (the gateway's max_listing_entries)"}
	}
	var entries int
	if len(body) < len(quotedPath)*(maxEntries+1) {
		// Too short to name quotedPath more than maxEntries times: the
		// bound holds without the count (a multi-byte search, about a
		// sixteenth of a small ListDir's instructions); the objects'
		// opening braces, counted by a vector byte count, size the list.
		entries = min(bytes.Count(body, openBrace), maxEntries)
	} else if entries = bytes.Count(body, quotedPath); entries > maxEntries {
		return nil, tooMany()
	}
	// The count bounds the entries that name "path"; decode bounds them
	// all (nulls and objects without a path are entries too).
	list, err := ld.decode(body, entries, maxEntries)
	if err == errTooManyEntries {
		return nil, tooMany()
	}
	if err != nil {
		return nil, unexpectedJSON(resp)
	}
	return list, nil
}

// bodyBlockSize is the size of the pooled blocks appendBody gathers an
// answer in once it outgrows the buffer it was given (bytes).
const bodyBlockSize = 64 << 10

var bodyBlocks = sync.Pool{New: func() any { return new([bodyBlockSize]byte) }}

// appendBody appends what r sends to buf until io.EOF or until it holds
// most bytes (a longer answer then reads as most bytes: the caller refuses
// it by its length). What does not fit buf's capacity is gathered in
// pooled blocks as it arrives, then copied once into a buffer of the
// answer's exact size: the memory held follows the bytes received, and an
// answer of any length leaves one buffer of its size, where growing one
// buffer by doubling (bytes.Buffer.ReadFrom) allocates about twice that
// and ends up to twice the size.
func appendBody(buf []byte, r io.Reader, most int64) ([]byte, error) {
	for len(buf) < cap(buf) && int64(len(buf)) < most {
		m, err := r.Read(buf[len(buf):int(min(int64(cap(buf)), most))])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	var blocks []*[bodyBlockSize]byte
	defer func() {
		for _, b := range blocks {
			bodyBlocks.Put(b)
		}
	}()
	total, last := int64(len(buf)), bodyBlockSize // bytes in the last block
	var err error
	for total < most {
		if last == bodyBlockSize {
			blocks, last = append(blocks, bodyBlocks.Get().(*[bodyBlockSize]byte)), 0
		}
		var m int
		m, err = r.Read(blocks[len(blocks)-1][last:int(min(bodyBlockSize, int64(last)+most-total))])
		last += m
		total += int64(m)
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	if len(blocks) == 0 {
		return buf, err
	}
	out := make([]byte, total)
	n := copy(out, buf)
	for i, b := range blocks {
		if i == len(blocks)-1 {
			copy(out[n:], b[:last])
		} else {
			n += copy(out[n:], b[:])
		}
	}
	return out, err
}

func unexpectedJSON(resp *http.Response) *Error {
	return &Error{Kind: KindUnexpected, Status: resp.StatusCode, Message: "execd sent a response that is not the expected JSON"}
}

var errNotList = &Error{Kind: KindUnexpected, Message: "not a FileInfo list"}

// quotedPath is how each execd FileInfo names its first member; counting
// it sizes the slice.
var quotedPath = []byte(`"path"`)

// openBrace sizes the list of a listing too short to need quotedPath's
// count.
var openBrace = []byte{'{'}

// errTooManyEntries: the list has more than decode's maxEntries elements.
var errTooManyEntries = errors.New("execd: more entries than max_listing_entries")

// decode parses data (one JSON value, as encoding/json's Decoder reads the
// first value and ignores what follows); entries, the count of quotedPath
// in data, sizes the list (the caller counted it for its bound already). A
// list of more than maxEntries elements (whether or not they name a path)
// is errTooManyEntries.
func (ld *listDecoder) decode(data []byte, entries, maxEntries int) ([]FileInfo, error) {
	if ld.seen == nil {
		ld.seen = make(map[string]string)
	}
	clear(ld.seen)
	ld.rd.Reset(data)
	ld.dec.Reset(&ld.rd, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	d := &ld.dec
	switch d.PeekKind() {
	case 'n':
		_, err := d.ReadToken()
		return nil, err
	case '[':
	default:
		return nil, errNotList
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	list := make([]FileInfo, 0, entries)
	ld.paths, ld.spans = ld.paths[:0], ld.spans[:0]
	if len(data) > maxPooledList && cap(ld.paths) < len(data) {
		// A large listing's paths fit the body's length (unquoting
		// shortens; only invalid UTF-8, each byte becoming U+FFFD, can
		// grow them): one buffer, handed to the entries below.
		ld.paths = make([]byte, 0, len(data))
	}
	for d.PeekKind() != ']' {
		if len(list) == maxEntries {
			return nil, errTooManyEntries
		}
		var fi FileInfo
		ld.spans = append(ld.spans, pathSpan{-1, -1})
		switch d.PeekKind() {
		case 'n':
			if _, err := d.ReadToken(); err != nil {
				return nil, err
			}
		case '{':
			if err := ld.object(&fi, &ld.spans[len(ld.spans)-1]); err != nil {
				return nil, err
			}
		default:
			return nil, errNotList
		}
		list = append(list, fi)
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	if len(ld.paths) > 0 {
		var all string
		if cap(ld.paths) > maxPooledList {
			// Not kept for reuse (see decodeFileInfoList): the string is
			// the buffer itself, which nothing writes again.
			all = unsafe.String(unsafe.SliceData(ld.paths), len(ld.paths))
			ld.paths = nil
		} else {
			all = string(ld.paths)
		}
		for i, sp := range ld.spans {
			if sp.start >= 0 {
				list[i].Path = all[sp.start:sp.end]
			}
		}
	}
	return list, nil
}

// object reads one FileInfo object into fi, all but its path, whose
// unquoted bytes it appends to ld.paths and records in *span.
func (ld *listDecoder) object(fi *FileInfo, span *pathSpan) error {
	d := &ld.dec
	if _, err := d.ReadToken(); err != nil {
		return err
	}
	for d.PeekKind() != '}' {
		raw, err := d.ReadValue()
		if err != nil {
			return err
		}
		ld.name = asciiLower(unquote(ld.name[:0], raw))
		var s *string
		switch string(ld.name) { // no allocation: a switch on the bytes
		case "path":
			v, err := d.ReadValue()
			if err != nil {
				return err
			}
			switch v.Kind() {
			case 'n': // leaves an earlier path, as encoding/json does
			case '"':
				start := len(ld.paths)
				ld.paths = unquote(ld.paths, v)
				*span = pathSpan{start, len(ld.paths)}
			default:
				return errNotList
			}
			continue
		case "type":
			s = &fi.Type
		case "owner":
			s = &fi.Owner
		case "group":
			s = &fi.Group
		case "size", "mode":
			x, null, err := readInt(d)
			if err != nil {
				return err
			}
			if !null && ld.name[0] == 's' {
				fi.Size = x
			} else if !null {
				fi.Mode = int(x)
			}
			continue
		case "modified_at":
			v, err := d.ReadValue()
			if err != nil {
				return err
			}
			if err := fi.ModifiedAt.UnmarshalJSON(v); err != nil {
				return err
			}
			continue
		default:
			if err := d.SkipValue(); err != nil {
				return err
			}
			continue
		}
		v, err := d.ReadValue()
		if err != nil {
			return err
		}
		switch v.Kind() {
		case 'n':
		case '"':
			ld.str = unquote(ld.str[:0], v)
			*s = ld.intern(ld.str)
		default:
			return errNotList
		}
	}
	_, err := d.ReadToken()
	return err
}

// unquote appends the unquoted string literal v, which the decoder has
// already checked: the only error AppendUnquote can report then is
// invalid UTF-8, which it has replaced with U+FFFD, as encoding/json does.
func unquote(dst []byte, v jsontext.Value) []byte {
	// The usual string (ASCII without escapes, as the decoder already
	// checked it) is its bytes between the quotes: copied without
	// AppendUnquote's per-byte decoding.
	if len(v) >= 2 && v[0] == '"' {
		plain := true
		for _, c := range v[1 : len(v)-1] {
			if c == '\\' || c >= utf8.RuneSelf {
				plain = false
				break
			}
		}
		if plain {
			return append(dst, v[1:len(v)-1]...)
		}
	}
	dst, _ = jsontext.AppendUnquote(dst, v)
	return dst
}

// readInt reads an integer JSON number; null reports null. Fractions,
// exponents and numbers beyond int64 are errors, as encoding/json makes
// them for integer fields.
func readInt(d *jsontext.Decoder) (n int64, null bool, err error) {
	v, err := d.ReadValue()
	if err != nil {
		return 0, false, err
	}
	switch v.Kind() {
	case 'n':
		return 0, true, nil
	case '0':
		n, err = strconv.ParseInt(string(v), 10, 64)
		return n, false, err
	}
	return 0, false, errNotList
}

// asciiLower maps name's ASCII upper-case letters to lower case in place
// (only those: a member name matches a field ignoring ASCII case, as
// encoding/json matches it for these names) and returns it.
func asciiLower(name []byte) []byte {
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			name[i] = c + 'a' - 'A'
		}
	}
	return name
}
