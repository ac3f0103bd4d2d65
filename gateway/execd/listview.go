package execd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandgate/sandgate/internal/jsonplain"
)

// FileInfoView is one entry of a plain listing, as views into execd's
// answer (ListDirectoryView): what FileInfo holds for the entry, in the
// form a caller copies into another JSON encoding without decoding it.
//
// A plain listing is what execd HEAD writes for the usual directory
// (docs/wire-facts.md §X1.3, FileInfo): a JSON array without whitespace inside
// (before it is fine) of objects whose members are named exactly as execd
// names them, each at most once; "path" present, not empty and not ending in
// '/'; every string printable ASCII without '"', '\\', '<', '>' or '&'
// (jsonplain.HTMLByte: its bytes between the quotes are the string, and JSON
// string content as they are, in envd's answer too); "size" and "mode"
// unsigned integers of at most 18 digits without a fraction or an exponent,
// "mode" octal digits that FileInfo.Perm takes; "modified_at" a UTC time as
// utcTime reads it; "created_at" any value (skipped, as decodeFileInfoList
// skips it); no other member and no null. At most max_listing_entries entries.
// Anything else is decoded into []FileInfo as ListDirectory decodes it, with
// its errors.
type FileInfoView struct {
	// Path is FileInfo.Path's bytes.
	Path []byte
	// Type, Owner and Group are FileInfo's strings' bytes; nil when the
	// member is absent (the empty string).
	Type, Owner, Group []byte
	// Size is FileInfo.Size.
	Size int64
	// Perm is FileInfo.Perm()'s permission bits.
	Perm uint32
	// Modified is FileInfo.ModifiedAt's date and clock in UTC,
	// "2006-01-02T15:04:05", and ModifiedNanos its nanoseconds
	// (0–999,999,999); nil when the member is absent or the zero time.
	Modified      []byte
	ModifiedNanos int
}

// ListDirectoryView is ListDirectory for a caller that can take the
// entries as views: when execd's answer is a plain listing (FileInfoView)
// without a symlink, plain is called with its entries, the views valid
// only during the call, and ListDirectoryView returns a nil list and true.
// Otherwise plain is not called and the list and error are
// ListDirectory's (a listing with symlinks costs the request that
// resolves them, resolveLinks). The gateway's
// ListDir copies a plain listing's strings and times into envd's answer
// without decoding and encoding them again (docs/benchmarks.md "Issue 33:
// ListDir's plain listings").
func (c *Client) ListDirectoryView(ctx context.Context, t Target, p string, depth int, plain func([]FileInfoView)) ([]FileInfo, bool, error) {
	// url.Values{"path": {p}, "depth": {…}}.Encode(), without the map.
	q := "depth=" + strconv.Itoa(depth) + "&path=" + url.QueryEscape(p)
	resp, err := c.unaryOK(ctx, t, http.MethodGet, "/directories/list", q)
	var list []FileInfo
	var e *Error
	if errors.As(err, &e) && e.Kind == KindNoRoute {
		list, err = c.listWithShell(ctx, t, p, depth, false)
	} else if err == nil {
		var viewed bool
		list, viewed, err = c.decodeListing(resp, plain)
		if viewed {
			return nil, true, nil
		}
	}
	if isSymlinkRefusal(err) {
		// envd lists a symlink to a directory through, under the path
		// asked for; execd refuses to: the listing script does it.
		list, err = c.listWithShell(ctx, t, p, depth, true)
	}
	if err != nil {
		return nil, false, err
	}
	if listHasLink(list) {
		if err := c.resolveLinks(ctx, t, p, depth, list); err != nil {
			return nil, false, err
		}
	}
	return list, false, nil
}

// readViews reads data as a plain listing of at most maxEntries entries
// (entries sizes the slice) and returns its views, or false when data is
// anything else: the caller decodes it then, with decode's errors.
func (ld *listDecoder) readViews(data []byte, entries, maxEntries int) ([]FileInfoView, bool) {
	s := listScanner{data: data}
	s.space()
	if s.peek() != '[' {
		return nil, false
	}
	s.i++
	if cap(ld.viewBuf) < entries {
		ld.viewBuf = make([]FileInfoView, 0, entries)
	}
	views := ld.viewBuf[:0]
	defer func() { ld.viewBuf = views[:0] }()
	if s.peek() == ']' {
		return views, true
	}
	for {
		if len(views) == maxEntries {
			clear(views) // no view into a body the pool may not keep
			return nil, false
		}
		views = append(views, FileInfoView{})
		if !s.viewObject(&views[len(views)-1]) {
			clear(views)
			return nil, false
		}
		if c := s.peek(); c == ',' {
			s.i++
			continue
		} else if c == ']' {
			return views, true
		}
		clear(views)
		return nil, false
	}
}

// viewObject reads one plain entry, its opening brace next in s, into v.
// It takes the entry as execd writes it, without whitespace: an entry
// written with some is decoded instead.
func (s *listScanner) viewObject(v *FileInfoView) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	var seen int
	for {
		bit := s.knownMember() // 0: another name, or one written otherwise (escaped, in upper case), or none
		if bit == 0 || seen&bit != 0 || s.peek() != ':' {
			return false
		}
		seen |= bit
		s.i++
		var ok bool
		switch bit {
		case memberPath:
			v.Path, ok = s.plainString()
			ok = ok && len(v.Path) > 0 && v.Path[len(v.Path)-1] != '/'
		case memberType:
			v.Type, ok = s.plainString()
		case memberOwner:
			v.Owner, ok = s.plainString()
		case memberGroup:
			v.Group, ok = s.plainString()
		case memberSize:
			var n uint64
			n, ok = s.unsigned()
			v.Size = int64(n)
		case memberMode:
			var n uint64
			if n, ok = s.unsigned(); ok {
				v.Perm, ok = octalDigits(n)
			}
		case memberModified:
			var q []byte
			if q, ok = s.quoted(); ok { // utcClock checks every byte between the quotes
				var c clock
				if c, ok = utcClock(q); ok && c != (clock{year: 1, month: 1, day: 1}) {
					v.Modified, v.ModifiedNanos = q[1:20], c.nsec
				}
			}
		case memberCreated:
			ok = s.skip(2)
		}
		if !ok {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return seen&memberPath != 0
		default:
			return false
		}
	}
}

// plainString consumes a string literal whose bytes are all
// jsonplain.HTMLByte and returns them without the quotes; anything else
// (an escape, a byte outside printable ASCII, <, > or &) reports false.
func (s *listScanner) plainString() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	i := s.i + 1
	for i+8 <= len(s.data) && jsonplain.HTMLWord(binary.LittleEndian.Uint64(s.data[i:])) {
		i += 8
	}
	for i < len(s.data) && jsonplain.HTMLByte(s.data[i]) {
		i++
	}
	if i == len(s.data) || s.data[i] != '"' {
		return nil, false
	}
	v := s.data[s.i+1 : i]
	s.i = i + 1
	return v, true
}

// quoted consumes the bytes from a quote to the next one, both included,
// and returns them without looking at those between; false when s is not
// at a quote or no quote follows.
func (s *listScanner) quoted() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	end := bytes.IndexByte(s.data[s.i+1:], '"')
	if end < 0 {
		return nil, false
	}
	q := s.data[s.i : s.i+end+2]
	s.i += len(q)
	return q, true
}

// unsigned consumes an unsigned JSON integer of at most 18 digits (0, or
// a digit 1–9 and more digits) followed by neither a fraction nor an
// exponent; anything else reports false.
func (s *listScanner) unsigned() (uint64, bool) {
	start := s.i
	if s.peek() == '0' {
		s.i++
	} else {
		s.digits()
	}
	if s.i == start || s.i-start > 18 {
		return 0, false
	}
	if c := s.peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, false
	}
	var n uint64
	for _, c := range s.data[start:s.i] {
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// octalDigits reads the decimal digits of n as octal ones, as
// FileInfo.Perm does, reporting false where Perm reports an error.
func octalDigits(n uint64) (uint32, bool) {
	perm, err := FileInfo{Mode: int(n)}.Perm()
	return perm, err == nil
}
