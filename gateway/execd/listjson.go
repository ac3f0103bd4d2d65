package execd

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/sandgate/sandgate/internal/jsonplain"
)

// listDecoder is the reusable state of decodeFileInfoList: the body buffer
// and the unquoted bytes of the member being read.
type listDecoder struct {
	body []byte
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
	// viewBuf holds what readViews returns, kept for the next listing.
	viewBuf []FileInfoView
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

// maxPooledViews is the most views a listDecoder keeps room for between
// listings (144 bytes each).
const maxPooledViews = 1024

// decodeFileInfoList decodes execd's JSON array of FileInfo from resp
// (at most MaxListingBytes are read; an answer naming "path" more than
// MaxListingEntries times is refused before it is decoded, a list of more
// elements than that as the next one starts) and closes the body. It
// reads the body once into a pooled buffer, sizes the slice from it and
// walks the bytes with a scanner of its own (listDecoder.decode), reading
// only the fields the gateway uses: path, type, size, modified_at, owner,
// group and mode; created_at and unknown members are checked and skipped
// without being decoded. For what execd sends, and for any list of at
// most MaxListingEntries elements,
// the result equals encoding/json's Unmarshal into []FileInfo (names match
// ASCII case-insensitively, a later duplicate wins, null leaves a field
// unset, invalid UTF-8 becomes U+FFFD, times are RFC 3339 as
// time.Time.UnmarshalJSON reads them); anything else is an *Error with
// KindUnexpected.
func (c *Client) decodeFileInfoList(resp *http.Response) ([]FileInfo, error) {
	list, _, err := c.decodeListing(resp, nil)
	return list, err
}

// decodeListing is decodeFileInfoList, but when plain is not nil and the
// answer is a plain listing (FileInfoView) it calls plain with the
// entries' views instead of decoding them, and reports true with a nil
// list. The bounds, and every answer that is not a plain listing, are
// decodeFileInfoList's.
func (c *Client) decodeListing(resp *http.Response, plain func([]FileInfoView)) ([]FileInfo, bool, error) {
	defer drain(resp)
	limit := c.listingBytes()
	tooLarge := func() error { // built only when needed: three allocations
		return &Error{Kind: KindUnexpected, Status: resp.StatusCode,
			Message: "execd's directory listing is larger than " + strconv.FormatInt(limit, 10) + " bytes (the gateway's max_listing_size)"}
	}
	tooMany := func() error {
		return &Error{Kind: KindUnexpected, Status: resp.StatusCode,
			Message: "execd's directory listing names more than " + strconv.Itoa(c.listingEntries()) + " entries (the gateway's max_listing_entries)"}
	}
	if resp.ContentLength > limit {
		return nil, false, tooLarge()
	}
	ld := listDecoders.Get().(*listDecoder)
	defer func() {
		if cap(ld.body) > maxPooledList {
			ld.body = nil // a large answer's buffer, not kept
		}
		if cap(ld.viewBuf) > maxPooledViews {
			ld.viewBuf = nil // a large listing's views, not kept
		}
		if cap(ld.paths) <= maxPooledList {
			ld.body = ld.body[:0]
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
		return nil, false, unexpectedJSON(resp)
	}
	ld.body = body
	if int64(len(body)) > limit {
		return nil, false, tooLarge()
	}
	var entries int
	if maxEntries := c.listingEntries(); len(body) < len(quotedPath)*(maxEntries+1) {
		// Too short to name quotedPath more than maxEntries times: the
		// bound holds without the count (a multi-byte search, about a
		// sixteenth of a small ListDir's instructions); the objects'
		// opening braces, counted by a vector byte count, size the list.
		entries = min(bytes.Count(body, openBrace), maxEntries)
	} else if entries = bytes.Count(body, quotedPath); entries > maxEntries {
		return nil, false, tooMany()
	}
	if plain != nil {
		if views, ok := ld.readViews(body, entries, c.listingEntries()); ok {
			if !viewsHaveLink(views) {
				ld.handViews(views, plain)
				return nil, true, nil
			}
			clear(views) // decoded below, its symlinks resolved (ListDirectoryView)
		}
	}
	list, err := ld.decode(body, entries, c.listingEntries())
	if err == errTooManyEntries {
		return nil, false, tooMany()
	}
	if err != nil {
		return nil, false, unexpectedJSON(resp)
	}
	return list, false, nil
}

// handViews calls plain with views, which readViews put in ld.viewBuf. A
// slice over maxPooledViews is dropped first (the deferred put of
// decodeListing would drop it too): nothing here holds it once plain has
// read it, so a plain that copies the views before it writes its answer to
// a slow client does not hold them while it does. A kept one is cleared
// after plain, also when plain panics: the pool keeps no view into a body
// it does not keep.
func (ld *listDecoder) handViews(views []FileInfoView, plain func([]FileInfoView)) {
	if cap(views) > maxPooledViews {
		ld.viewBuf = nil
		plain(views)
		return
	}
	defer clear(views)
	plain(views)
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

// errTooManyEntries is decode's refusal of a list of more elements than
// max_listing_entries.
var errTooManyEntries = &Error{Kind: KindUnexpected, Message: "too many entries"}

// quotedPath is how each execd FileInfo names its first member; counting
// it sizes the slice.
var quotedPath = []byte(`"path"`)

// openBrace sizes the list of a listing too short to need quotedPath's
// count.
var openBrace = []byte{'{'}

// maxListDepth is how deeply the containers of a listing may nest, the
// top-level array counting as 1: encoding/json's limit (its scanner's
// maxNestingDepth), past which it refuses a value.
const maxListDepth = 10000

// decode parses data (one JSON value, as encoding/json's Decoder reads the
// first value and ignores what follows) with a scanner of its own, written
// for execd's listing: it walks the bytes once, checking the JSON syntax
// as encoding/json does (a value it refuses is refused here), and keeps
// only the members FileInfo needs. entries sizes the list; a list of more
// than maxEntries elements (objects or nulls, with or without a path) is
// refused with errTooManyEntries as soon as the next one starts.
func (ld *listDecoder) decode(data []byte, entries, maxEntries int) ([]FileInfo, error) {
	if ld.seen == nil {
		ld.seen = make(map[string]string)
	}
	clear(ld.seen)
	s := listScanner{data: data}
	s.space()
	switch s.peek() {
	case 'n':
		if !s.literal("null") {
			return nil, errNotList
		}
		return nil, nil
	case '[':
		s.i++
	default:
		return nil, errNotList
	}
	list := make([]FileInfo, 0, entries)
	ld.paths, ld.spans = ld.paths[:0], ld.spans[:0]
	if len(data) > maxPooledList && cap(ld.paths) < len(data) {
		// A large listing's paths fit the body's length (unquoting
		// shortens; only invalid UTF-8, each byte becoming U+FFFD, can
		// grow them): one buffer, handed to the entries below.
		ld.paths = make([]byte, 0, len(data))
	}
	s.space()
	if s.peek() == ']' {
		s.i++
	} else {
		for {
			if len(list) == maxEntries {
				return nil, errTooManyEntries
			}
			s.space()
			list = append(list, FileInfo{})
			ld.spans = append(ld.spans, pathSpan{-1, -1})
			switch s.peek() {
			case 'n':
				if !s.literal("null") {
					return nil, errNotList
				}
			case '{':
				if err := ld.object(&s, &list[len(list)-1], &ld.spans[len(ld.spans)-1]); err != nil {
					return nil, err
				}
			default:
				return nil, errNotList
			}
			s.space()
			if c := s.peek(); c == ',' {
				s.i++
				continue
			} else if c == ']' {
				s.i++
				break
			}
			return nil, errNotList
		}
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

// object reads one FileInfo object, its opening brace next in s, into fi:
// all but its path, whose unquoted bytes it appends to ld.paths and
// records in *span. Member names match ASCII case-insensitively, a later
// duplicate wins, null leaves a member unset, as encoding/json decodes
// them.
func (ld *listDecoder) object(s *listScanner, fi *FileInfo, span *pathSpan) error {
	s.i++ // '{'
	s.space()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		name := s.knownName()
		if name == "" {
			raw, plain, ok := s.str()
			if !ok {
				return errNotList
			}
			ld.name = asciiLower(unquote(ld.name[:0], raw, plain))
			// Read before the next member's name overwrites ld.name.
			name = unsafe.String(unsafe.SliceData(ld.name), len(ld.name))
		}
		s.space()
		if s.peek() != ':' {
			return errNotList
		}
		s.i++
		s.space()
		var dst *string
		switch name {
		case "path":
			switch s.peek() {
			case 'n':
				if !s.literal("null") { // leaves an earlier path, as encoding/json does
					return errNotList
				}
			case '"':
				v, plain, ok := s.str()
				if !ok {
					return errNotList
				}
				start := len(ld.paths)
				ld.paths = unquote(ld.paths, v, plain)
				*span = pathSpan{start, len(ld.paths)}
			default:
				return errNotList
			}
		case "type":
			dst = &fi.Type
		case "owner":
			dst = &fi.Owner
		case "group":
			dst = &fi.Group
		case "size", "mode":
			x, null, ok := s.integer()
			if !ok {
				return errNotList
			}
			if !null && name[0] == 's' {
				fi.Size = x
			} else if !null {
				fi.Mode = int(x)
			}
		case "modified_at":
			switch s.peek() {
			case 'n':
				if !s.literal("null") {
					return errNotList
				}
			case '"':
				v, _, ok := s.str()
				if !ok {
					return errNotList
				}
				if t, ok := utcTime(v); ok {
					fi.ModifiedAt = t
				} else if err := fi.ModifiedAt.UnmarshalJSON(v); err != nil {
					return err
				}
			default:
				return errNotList
			}
		default:
			if !s.skip(2) { // inside the list and this object
				return errNotList
			}
		}
		if dst != nil {
			switch s.peek() {
			case 'n':
				if !s.literal("null") {
					return errNotList
				}
			case '"':
				v, plain, ok := s.str()
				if !ok {
					return errNotList
				}
				ld.str = unquote(ld.str[:0], v, plain)
				*dst = ld.intern(ld.str)
			default:
				return errNotList
			}
		}
		s.space()
		if c := s.peek(); c == ',' {
			s.i++
			continue
		} else if c == '}' {
			s.i++
			return nil
		}
		return errNotList
	}
}

// listScanner walks a listing's bytes: data, read from i on. Its methods
// check the JSON syntax of RFC 8259 as encoding/json's scanner does and
// report false (or errNotList) where it would refuse.
type listScanner struct {
	data []byte
	i    int
}

// peek returns the next byte, 0 at the end.
func (s *listScanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

// space skips JSON whitespace (space, tab, LF, CR).
func (s *listScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// literal consumes lit (null, true or false) if the bytes are it.
func (s *listScanner) literal(lit string) bool {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// utcTime reads the quoted time v if it is written as execd writes a UTC
// time, "2006-01-02T15:04:05Z" with up to nine digits of fraction, and
// valid (month 1-12, a day of that month, hour 0-23, minute and second
// 0-59): the time time.Time.UnmarshalJSON gives for it, without its
// general parse. Anything else reports false, for UnmarshalJSON.
func utcTime(v []byte) (time.Time, bool) {
	c, ok := utcClock(v)
	if !ok {
		return time.Time{}, false
	}
	return time.Date(c.year, time.Month(c.month), c.day, c.hour, c.minute, c.sec, c.nsec, time.UTC), true
}

// clock is a time's fields as utcClock reads them.
type clock struct{ year, month, day, hour, minute, sec, nsec int }

// utcClock reads the fields of the quoted time v when utcTime would read
// it (see there), without making the time.Time.
func utcClock(v []byte) (clock, bool) {
	if len(v) < len(`"2006-01-02T15:04:05Z"`) || len(v) > len(`"2006-01-02T15:04:05.999999999Z"`) ||
		v[len(v)-2] != 'Z' || v[5] != '-' || v[8] != '-' || v[11] != 'T' || v[14] != ':' || v[17] != ':' {
		return clock{}, false
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(v[1:5])
	month, ok2 := num(v[6:8])
	day, ok3 := num(v[9:11])
	hour, ok4 := num(v[12:14])
	minute, ok5 := num(v[15:17])
	sec, ok6 := num(v[18:20])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return clock{}, false
	}
	nsec := 0
	if frac := v[20 : len(v)-2]; len(frac) > 0 {
		if len(frac) < 2 || frac[0] != '.' {
			return clock{}, false
		}
		n, ok := num(frac[1:])
		if !ok {
			return clock{}, false
		}
		for range 10 - len(frac) {
			n *= 10
		}
		nsec = n
	}
	return clock{year, month, day, hour, minute, sec, nsec}, true
}

// daysIn returns the days of month in year (Gregorian).
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// knownName consumes a member name written as execd writes the ones
// FileInfo has ("path", "type", "size", "modified_at", "created_at",
// "owner", "group", "mode": lower case, without escapes) and returns it
// unquoted, without scanning it byte by byte; anything else it leaves for
// str and returns "".
func (s *listScanner) knownName() string {
	return memberNames[s.knownMember()]
}

// Member bits of FileInfo's members as execd names them (knownMember).
const (
	memberPath = 1 << iota
	memberType
	memberSize
	memberModified
	memberCreated
	memberOwner
	memberGroup
	memberMode
)

// memberNames are the members' names by bit; "" for 0.
var memberNames = [memberMode + 1]string{memberPath: "path", memberType: "type", memberSize: "size", memberModified: "modified_at",
	memberCreated: "created_at", memberOwner: "owner", memberGroup: "group", memberMode: "mode"}

// knownMember is knownName's test: it consumes the name and returns its
// member bit, or returns 0 and consumes nothing. Each name is compared as
// a constant, which the compiler does with a few word loads.
func (s *listScanner) knownMember() int {
	rest := s.data[s.i:]
	if len(rest) < 6 || rest[0] != '"' {
		return 0
	}
	var bit, n int
	switch rest[1] {
	case 'p':
		if string(rest[:6]) == `"path"` {
			bit, n = memberPath, 6
		}
	case 't':
		if string(rest[:6]) == `"type"` {
			bit, n = memberType, 6
		}
	case 's':
		if string(rest[:6]) == `"size"` {
			bit, n = memberSize, 6
		}
	case 'm':
		if string(rest[:6]) == `"mode"` {
			bit, n = memberMode, 6
		} else if len(rest) >= 13 && string(rest[:13]) == `"modified_at"` {
			bit, n = memberModified, 13
		}
	case 'c':
		if len(rest) >= 12 && string(rest[:12]) == `"created_at"` {
			bit, n = memberCreated, 12
		}
	case 'o':
		if len(rest) >= 7 && string(rest[:7]) == `"owner"` {
			bit, n = memberOwner, 7
		}
	case 'g':
		if len(rest) >= 7 && string(rest[:7]) == `"group"` {
			bit, n = memberGroup, 7
		}
	}
	s.i += n
	return bit
}

// str consumes a string literal and returns it with its quotes: no byte
// below 0x20, escapes only \" \\ \/ \b \f \n \r \t and \u with four hex
// digits; invalid UTF-8 is accepted (decoding makes it U+FFFD). plain
// reports ASCII without escapes: the bytes between the quotes are the
// string.
func (s *listScanner) str() (v []byte, plain, ok bool) {
	start := s.i
	if s.peek() != '"' {
		return nil, false, false
	}
	plain = true
	for i := s.i + 1; i < len(s.data); i++ {
		// Plain ASCII, the usual byte: eight at a time while a word of
		// them is left (a path is tens of bytes), then through one
		// table lookup a byte.
		for i+8 <= len(s.data) && jsonplain.Word(binary.LittleEndian.Uint64(s.data[i:])) {
			i += 8
		}
		for i < len(s.data) && jsonplain.Byte(s.data[i]) {
			i++
		}
		if i == len(s.data) {
			break
		}
		switch c := s.data[i]; {
		case c == '"':
			s.i = i + 1
			return s.data[start:s.i], plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(s.data) {
				return nil, false, false
			}
			switch s.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(s.data) {
					return nil, false, false
				}
				for _, h := range s.data[i+2 : i+6] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				i += 5
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default: // c >= 0x80
			plain = false
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
// integral reports that it has no fraction and no exponent.
func (s *listScanner) number() (num []byte, integral, ok bool) {
	start := s.i
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return nil, false, false
	}
	integral = true
	if s.peek() == '.' {
		s.i++
		if !s.digits() {
			return nil, false, false
		}
		integral = false
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return nil, false, false
		}
		integral = false
	}
	return s.data[start:s.i], integral, true
}

// digits consumes [0-9]* and reports whether there was one.
func (s *listScanner) digits() bool {
	start := s.i
	for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// integer consumes an integer member's value: a JSON number that
// strconv.ParseInt takes (fractions, exponents and numbers beyond int64
// are refused, as encoding/json refuses them for an integer field), or
// null.
func (s *listScanner) integer() (n int64, null, ok bool) {
	if s.peek() == 'n' {
		return 0, true, s.literal("null")
	}
	num, integral, ok := s.number()
	if !ok || !integral {
		return 0, false, false
	}
	// The usual value, a few digits, without ParseInt.
	if len(num) <= 18 && num[0] != '-' {
		for _, c := range num {
			n = n*10 + int64(c-'0')
		}
		return n, false, true
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	return n, false, err == nil
}

// skip consumes one JSON value of any kind, checking its syntax; depth is
// how many containers hold it (a container deeper than maxListDepth is
// refused).
func (s *listScanner) skip(depth int) bool {
	switch c := s.peek(); {
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		_, _, ok := s.number()
		return ok
	case c == 'n':
		return s.literal("null")
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == '[' || c == '{':
		if depth+1 > maxListDepth {
			return false
		}
		s.i++
		end := byte(']')
		if c == '{' {
			end = '}'
		}
		s.space()
		if s.peek() == end {
			s.i++
			return true
		}
		for {
			s.space()
			if c == '{' {
				if _, _, ok := s.str(); !ok {
					return false
				}
				s.space()
				if s.peek() != ':' {
					return false
				}
				s.i++
				s.space()
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.space()
			switch s.peek() {
			case ',':
				s.i++
			case end:
				s.i++
				return true
			default:
				return false
			}
		}
	}
	return false
}

// unquote appends the unquoted string literal v, which the scanner has
// already checked (plain as str reported it): the only error
// AppendUnquote can report then is invalid UTF-8, which it has replaced
// with U+FFFD, as encoding/json does.
func unquote(dst []byte, v []byte, plain bool) []byte {
	if plain {
		return append(dst, v[1:len(v)-1]...)
	}
	dst, _ = jsontext.AppendUnquote(dst, v)
	return dst
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
