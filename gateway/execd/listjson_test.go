package execd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sandgate/sandgate/internal/memtest"
)

// leanFileInfo is FileInfo without created_at, the one member
// decodeFileInfoList skips: encoding/json into it says what the fast
// decoder must return.
type leanFileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type,omitempty"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

func listResponse(body string) *http.Response {
	return &http.Response{StatusCode: 200, ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
}

// referenceList decodes body the way the gateway did before: encoding/json
// into []FileInfo, here without created_at.
func referenceList(body string) ([]FileInfo, error) {
	var lean []leanFileInfo
	if err := json.NewDecoder(strings.NewReader(body)).Decode(&lean); err != nil {
		return nil, err
	}
	if lean == nil {
		return nil, nil
	}
	out := make([]FileInfo, len(lean))
	for i, l := range lean {
		out[i] = FileInfo{Path: l.Path, Type: l.Type, Size: l.Size, ModifiedAt: l.ModifiedAt, Owner: l.Owner, Group: l.Group, Mode: l.Mode}
	}
	return out, nil
}

// unicodeFolds reports input where encoding/json's Unicode name folding
// (ſ for s, the Kelvin sign for k) could match a member the ASCII-folding
// decoder does not.
func unicodeFolds(body string) bool {
	low := strings.ToLower(body)
	return strings.Contains(body, "ſ") || strings.Contains(body, "\u212a") || strings.Contains(low, `\u017f`) || strings.Contains(low, `\u212a`)
}

// sameAsReference fails unless the fast decoder and encoding/json agree on
// body: the same list, or both an error; a list of more than
// DefaultMaxListingEntries elements, which encoding/json takes, the
// decoder must refuse.
func sameAsReference(t *testing.T, body string) {
	t.Helper()
	want, werr := referenceList(body)
	if werr == nil && len(want) > DefaultMaxListingEntries {
		want, werr = nil, errTooManyEntries
	}
	got, gerr := (&Client{}).decodeFileInfoList(listResponse(body))
	if werr != nil || gerr != nil {
		if (werr == nil) != (gerr == nil) && !unicodeFolds(body) {
			t.Fatalf("body %q: encoding/json error %v, fast decoder error %v", body, werr, gerr)
		}
		if gerr != nil {
			var e *Error
			if !errors.As(gerr, &e) || e.Kind != KindUnexpected {
				t.Fatalf("body %q: error %v is not KindUnexpected", body, gerr)
			}
		}
		return
	}
	if !reflect.DeepEqual(got, want) && !unicodeFolds(body) {
		t.Fatalf("body %q:\nfast      %+v\nreference %+v", body, got, want)
	}
}

const execdListing = `[{"path":"/home/user/bench/a.txt","type":"file","size":10,"modified_at":"2026-12-01T06:31:43.123456789Z","created_at":"2026-12-01T06:31:43.123456789Z","owner":"root","group":"root","mode":644},` +
	`{"path":"/home/user/bench/d","type":"directory","size":4096,"modified_at":"2026-12-01T06:31:43+01:00","created_at":"2026-12-01T06:31:43Z","owner":"1000","group":"1000","mode":755}]`

// TestDecodeFileInfoList: execd's listing and the edge cases decode as
// encoding/json decodes them; created_at is skipped.
func TestDecodeFileInfoList(t *testing.T) {
	for _, body := range []string{
		execdListing,
		execdListing + "\n",
		execdListing + "trailing garbage",
		`[]`, `null`, ` [ ] `, `[null]`, `[{}]`,
		`[{"PATH":"/upper","Size":1,"MODE":7}]`,
		`[{"path":"/a","path":"/b","size":null,"mode":null,"modified_at":null,"type":null}]`,
		`[{"path":"\u00e9\ud800\"\\<>","owner":"\u0000"}]`,
		"[{\"path\":\"\xff\xfe\"}]",
		`[{"unknown":{"deep":[1,2,{"x":null}]},"path":"/x","created_at":"not a time"}]`,
		// Errors.
		``, `{}`, `[1]`, `["x"]`, `[{"path":1}]`, `[{"size":"1"}]`, `[{"size":1.5}]`, `[{"size":1e3}]`,
		`[{"size":99999999999999999999}]`, `[{"mode":-1.0}]`, `[{"modified_at":"yesterday"}]`, `[{"modified_at":5}]`,
		`[{"path":"/a"`, `[{"path":"/a"},]`, `[{"path" "/a"}]`, `[{"path":"\x"}]`, `[`,
		// The scanner's syntax: numbers, literals, escapes, nesting.
		`[{"x":-0.5e+7,"y":[true,false,null,{"a":[]}],"z":"\/\b\f\n\r\t\u00AF","size":-0,"mode":0}]`,
		`[{"size":-9223372036854775808,"mode":9223372036854775807}]`, `[{"size":9223372036854775808}]`,
		`[{"size":01}]`, `[{"size":-}]`, `[{"size":1.}]`, `[{"size":.5}]`, `[{"x":1e}]`, `[{"x":+1}]`, `[{"x":tru}]`,
		`[{"x":nul}]`, `[nul]`, `nul`, `nullx`, `[{"x":"\u12G4"}]`, "[{\"x\":\"\t\"}]", "[{\"x\":\"a\x01\"}]",
		`[{"x":[1,]}]`, `[{"x":{"a"}}]`, `[{"x":{"a":1,}}]`, `[{"x":{1:2}}]`, `[{,}]`, `[,]`, `[{}{}]`, `[{}`, `[{"a":1}`,
		`[{"p\u0061th":"/escaped name","OWNER":"\u00e9","grOUP":"g","type":"\"q\""}]`,
		`[{"type":1}]`, `[{"owner":{}}]`, `[{"group":[]}]`, `[{"modified_at":"2026-12-01T06:31:43\u002b01:00"}]`,
		`[{"modified_at":"2026-12-01T06:31:43.5-07:30"}]`, "\t\r\n [ \n{ \"path\" : \"/ws\" } , null ]",
		`[{"x":` + strings.Repeat("[", maxListDepth-2) + strings.Repeat("]", maxListDepth-2) + `}]`,
		`[{"x":` + strings.Repeat("[", maxListDepth-1) + strings.Repeat("]", maxListDepth-1) + `}]`,
		`[{"x":` + strings.Repeat(`{"a":`, maxListDepth-2) + `1` + strings.Repeat("}", maxListDepth-2) + `}]`,
		`[{"x":` + strings.Repeat(`{"a":`, maxListDepth-1) + `1` + strings.Repeat("}", maxListDepth-1) + `}]`,
	} {
		sameAsReference(t, body)
	}
	got, err := (&Client{}).decodeFileInfoList(listResponse(execdListing))
	if err != nil || len(got) != 2 || cap(got) != 2 || got[1].Mode != 755 || got[1].Type != TypeDirectory || !got[0].CreatedAt.IsZero() {
		t.Fatalf("execd listing = %+v (cap %d), %v", got, cap(got), err)
	}
}

// TestDecodeFileInfoListBounded: a body beyond MaxListingBytes is cut
// there and refused, and so is one naming more than MaxListingEntries
// entries, before anything is decoded.
func TestDecodeFileInfoListBounded(t *testing.T) {
	c := &Client{MaxListingBytes: 1 << 10, MaxListingEntries: 3}
	var b bytes.Buffer
	b.WriteString(`[{"path":"`)
	b.WriteString(strings.Repeat("a", 1<<10))
	b.WriteString(`"}]`)
	_, err := c.decodeFileInfoList(&http.Response{StatusCode: 200, ContentLength: -1, Body: io.NopCloser(&b)})
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "larger than 1024 bytes") {
		t.Fatalf("oversized body: %v", err)
	}
	four := `[{"path":"a"},{"path":"b"},{"path":"c"},{"path":"d"}]`
	_, err = c.decodeFileInfoList(&http.Response{StatusCode: 200, ContentLength: -1, Body: io.NopCloser(strings.NewReader(four))})
	if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "more than 3 entries") {
		t.Fatalf("too many entries: %v", err)
	}
	if list, err := c.decodeFileInfoList(listResponse(strings.Replace(four, `,{"path":"d"}`, "", 1))); err != nil || len(list) != 3 {
		t.Fatalf("three entries: %v %v", list, err)
	}
	// Elements without a path count too: each costs the gateway an entry
	// (a 4 MiB answer of "{}," would be 1.4 million of them).
	for _, body := range []string{`[{},{},{},{}]`, `[null,null,null,null]`, `[{"path":"a"},{},null,{"size":1}]`} {
		_, err = c.decodeFileInfoList(listResponse(body))
		if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "more than 3 entries") {
			t.Fatalf("%s: %v", body, err)
		}
		if list, err := c.decodeFileInfoList(listResponse(body[:strings.LastIndexByte(body, ',')] + "]")); err != nil || len(list) != 3 {
			t.Fatalf("three of %s: %v %v", body, list, err)
		}
	}
	many := "[" + strings.Repeat("{},", DefaultMaxListingEntries) + "{}]"
	if _, err := (&Client{}).decodeFileInfoList(listResponse(many)); !errors.As(err, &e) || !strings.Contains(e.Message, "more than 16384 entries") {
		t.Fatalf("%d pathless entries: %v", DefaultMaxListingEntries+1, err)
	}
	sameAsReference(t, many)
}

// FuzzDecodeFileInfoList: for any body the fast decoder agrees with
// encoding/json (minus created_at).
func FuzzDecodeFileInfoList(f *testing.F) {
	f.Add(execdListing)
	f.Add(`[{"path":"/a","path":null,"SIZE":3,"mode":-0}]`)
	f.Add(`[null,{"type":"\ud83d\ude00"}]`)
	f.Add(`[{"x":[-1.5E-3,true,{"y":"\u00e9"}],"mode":755,"modified_at":"2026-12-01T06:31:43+01:00"}]`)
	f.Fuzz(func(t *testing.T, body string) {
		sameAsReference(t, body)
	})
}

// BenchmarkDecodeFileInfoList compares encoding/json with the fast decoder
// on a 16-entry execd listing.
func BenchmarkDecodeFileInfoList(b *testing.B) {
	var entries []string
	for i := range 16 {
		entries = append(entries, fmt.Sprintf(`{"path":"/home/user/bench/file-%02d.txt","type":"file","size":10,"modified_at":"2026-12-01T06:31:43.123456789Z","created_at":"2026-12-01T06:31:43.123456789Z","owner":"root","group":"root","mode":644}`, i))
	}
	body := "[" + strings.Join(entries, ",") + "]"
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var list []FileInfo
			if err := decodeJSON(listResponse(body), &list, DefaultMaxListingBytes, "a listing"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeFileInfoList", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (&Client{}).decodeFileInfoList(listResponse(body)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeFileInfoListMemoryFollowsTheBytes: an answer that declares a
// large Content-Length and sends a few bytes costs about what arrived.
// The buffer was grown to the declared length (up to 64 MiB then)
// before the body was read, so a sandbox whose port 44772 answers so (code
// in the sandbox can replace execd) held 64 MiB of the gateway per ListDir
// for as long as it kept the body open.
func TestDecodeFileInfoListMemoryFollowsTheBytes(t *testing.T) {
	var err error
	n := memtest.AllocatedDuring(func() {
		_, err = (&Client{}).decodeFileInfoList(&http.Response{StatusCode: 200, ContentLength: DefaultMaxListingBytes,
			Body: io.NopCloser(strings.NewReader(`[{"path":"/a"`))})
	})
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindUnexpected {
		t.Fatalf("a cut answer: %v", err)
	}
	if n > 2<<20 {
		t.Fatalf("13 bytes of an answer declaring %d bytes allocated %d bytes", DefaultMaxListingBytes, n)
	}
}

// TestAppendBodyReadsWhatLimitReaderReads: for answers around the pooled
// blocks' size and the limit, sent in reads of any size, into buffers of
// any capacity, appendBody returns buf's bytes followed by what
// io.LimitReader(r, most) gives, and an answer gathered in blocks ends in
// a buffer of exactly its length.
func TestAppendBodyReadsWhatLimitReaderReads(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		size := rnd.IntN(4*bodyBlockSize + 10)
		if rnd.IntN(4) == 0 {
			size = bodyBlockSize*rnd.IntN(4) + rnd.IntN(3) - 1
		}
		data := make([]byte, max(size, 0))
		for i := range data {
			data[i] = byte(rnd.Uint32())
		}
		most := int64(rnd.IntN(5*bodyBlockSize) + 1)
		prefix := []byte("pre")[:rnd.IntN(4)]
		buf := append(make([]byte, 0, len(prefix)+rnd.IntN(2*bodyBlockSize)), prefix...)
		want := append(append([]byte(nil), prefix...), data[:min(int64(len(data)), max(most-int64(len(prefix)), 0))]...)
		if int64(len(prefix)) >= most {
			want = prefix
		}
		got, err := appendBody(buf, &choppyReader{data: data, rnd: rnd}, most)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("size %d, most %d, cap %d: %d bytes, %v; want %d bytes", size, most, cap(buf), len(got), err, len(want))
		}
		if cap(got) > cap(buf) && cap(got) != len(got) {
			t.Fatalf("size %d, most %d: gathered into a buffer of %d for %d bytes", size, most, cap(got), len(got))
		}
	}
	if _, err := appendBody(nil, iotest.ErrReader(io.ErrUnexpectedEOF), 10); err != io.ErrUnexpectedEOF {
		t.Fatalf("a failing reader: %v", err)
	}
}

// choppyReader returns data in reads of random sizes, sometimes with
// io.EOF beside the last bytes.
type choppyReader struct {
	data []byte
	rnd  *rand.Rand
}

func (r *choppyReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 1+r.rnd.IntN(3*bodyBlockSize/2))], r.data)
	r.data = r.data[n:]
	if len(r.data) == 0 && r.rnd.IntN(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// TestUTCTime: where utcTime reads a time, time.Time.UnmarshalJSON reads the
// same one (the same instant and location); execd's usual forms take it.
func TestUTCTime(t *testing.T) {
	check := func(s string) bool {
		t.Helper()
		got, ok := utcTime([]byte(s))
		if !ok {
			return false
		}
		var want time.Time
		if err := want.UnmarshalJSON([]byte(s)); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: utcTime %v, UnmarshalJSON %v, %v", s, got, want, err)
		}
		return true
	}
	for _, s := range []string{`"2026-12-01T06:31:43Z"`, `"2026-12-01T06:31:43.123456789Z"`, `"2026-12-01T06:31:43.1Z"`,
		`"2024-02-29T23:59:59.000000001Z"`, `"2000-02-29T00:00:00Z"`, `"0000-01-01T00:00:00Z"`, `"9999-12-31T23:59:59.999999999Z"`} {
		if !check(s) {
			t.Fatalf("%s: not read by utcTime", s)
		}
	}
	for _, s := range []string{`"2023-02-29T00:00:00Z"`, `"1900-02-29T00:00:00Z"`, `"2026-04-31T00:00:00Z"`, `"2026-00-01T00:00:00Z"`,
		`"2026-13-01T00:00:00Z"`, `"2026-12-00T00:00:00Z"`, `"2026-12-32T00:00:00Z"`, `"2026-12-01T24:00:00Z"`, `"2026-12-01T23:60:00Z"`,
		`"2026-12-01T23:59:60Z"`, `"2026-12-01t06:31:43Z"`, `"2026-12-01T06:31:43z"`, `"2026-12-01T06:31:43.Z"`, `"2026-12-01T06:31:43,5Z"`,
		`"2026-12-01T06:31:43.1234567890Z"`, `"+026-12-01T06:31:43Z"`, `"2026-1-01T06:31:43Z"`, `"2026-12-01T06:31:43+00:00"`,
		`"2026-12-01T06:31:4 Z"`, `"2026-12-01T06:31:43.12a4Z"`, `2026-12-01T06:31:43Z`} {
		if check(s) {
			t.Fatalf("%s: read by utcTime", s)
		}
	}
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 200_000 {
		tm := time.Unix(rnd.Int64N(253402300800), rnd.Int64N(1e9)).UTC()
		s := `"` + tm.Format("2006-01-02T15:04:05"+[]string{"", ".0", ".000", ".000000", ".000000000", ".999999999"}[rnd.IntN(6)]) + `Z"`
		if !check(s) {
			t.Fatalf("%s: not read by utcTime", s)
		}
		b := []byte(s) // one byte changed: utcTime reads it as UnmarshalJSON does, or leaves it
		b[1+rnd.IntN(len(b)-2)] = "0123456789:-.TZ+ 9"[rnd.IntN(18)]
		check(string(b))
	}
}

// TestDecodeFileInfoListEntriesWithoutPathBounded: max_listing_entries
// bounds the entries, not the entries that name "path": a listing of
// empty objects or nulls (3 to 5 bytes each, about 1.4 million in the
// default 4 MiB, each a FileInfo and then an entry of the Connect answer)
// is refused past the bound as one naming its paths is.
func TestDecodeFileInfoListEntriesWithoutPathBounded(t *testing.T) {
	c := &Client{MaxListingBytes: 1 << 10, MaxListingEntries: 3}
	for _, body := range []string{`[{},{},{},{}]`, `[null,null,null,null]`, `[{"type":"file"},{},null,{"path":"d"}]`} {
		list, err := c.decodeFileInfoList(listResponse(body))
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindUnexpected || !strings.Contains(e.Message, "more than 3 entries") {
			t.Fatalf("%s: %d entries, %v; want the max_listing_entries error", body, len(list), err)
		}
	}
	// Long enough to be counted by "path" rather than by braces.
	long := "[" + strings.Repeat(`{"type":"file","owner":"root"},`, 20) + `{}]`
	c = &Client{MaxListingBytes: 1 << 12, MaxListingEntries: 3}
	if list, err := c.decodeFileInfoList(listResponse(long)); err == nil {
		t.Fatalf("21 entries without paths: %d entries decoded; want the max_listing_entries error", len(list))
	}
	if list, err := c.decodeFileInfoList(listResponse(`[{},null,{"path":"c"}]`)); err != nil || len(list) != 3 {
		t.Fatalf("three entries: %v %v", list, err)
	}
}
