package connect

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/memtest"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	var b []byte
	b = AppendEnvelope(b, 0, []byte(`{"a":1}`))
	b = AppendEnvelope(b, FlagEndStream, []byte(`{}`))
	if !bytes.Equal(b[:5], []byte{0, 0, 0, 0, 7}) {
		t.Fatalf("prefix % x", b[:5])
	}
	r := bytes.NewReader(b)
	f, p, err := ReadEnvelope(r, 100)
	if err != nil || f != 0 || string(p) != `{"a":1}` {
		t.Fatalf("%v %v %q", err, f, p)
	}
	f, p, err = ReadEnvelope(r, 100)
	if err != nil || f != FlagEndStream || string(p) != `{}` {
		t.Fatalf("%v %v %q", err, f, p)
	}
	if _, _, err := ReadEnvelope(r, 100); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

func TestReadEnvelopeErrors(t *testing.T) {
	msg := AppendEnvelope(nil, 0, []byte(`{"x":true}`))
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"compressed", AppendEnvelope(nil, FlagCompressed, []byte(`{}`)), ErrCompressed},
		{"too large", []byte{0, 0, 0, 1, 0}, ErrTooLarge},
		{"short header", []byte{0, 0}, ErrTruncated},
		{"short payload", msg[:8], ErrTruncated},
		{"empty", nil, ErrTruncated},
		{"end-stream instead of a message", AppendEnvelope(nil, FlagEndStream, []byte(`{}`)), ErrFlags},
		{"undefined flag 0x80", AppendEnvelope(nil, 0x80, []byte(`{}`)), ErrFlags},
		{"undefined flags 0x30", AppendEnvelope(nil, 0x30, []byte(`{}`)), ErrFlags},
		{"undefined flag 0x04 with a huge length", []byte{0x04, 0xff, 0xff, 0xff, 0xff}, ErrFlags},
		{"compressed and end-stream", AppendEnvelope(nil, FlagCompressed|FlagEndStream, []byte(`{}`)), ErrFlags},
		{"trailing bytes", append(append([]byte{}, msg...), 0), ErrTrailing},
	}
	for _, tc := range cases {
		if _, err := ReadSingleEnvelope(bytes.NewReader(tc.in), 64); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if p, err := ReadSingleEnvelope(bytes.NewReader(msg), 64); err != nil || string(p) != `{"x":true}` {
		t.Fatalf("valid: %v %q", err, p)
	}
}

// TestReadEnvelopeFlags: a response envelope may carry compressed and
// end-stream, nothing else; a refused header reads nothing past itself.
func TestReadEnvelopeFlags(t *testing.T) {
	for f := 0; f < 256; f++ {
		flags := byte(f)
		in := AppendEnvelope(nil, flags, []byte(`{}`))
		r := bytes.NewReader(in)
		_, _, err := ReadEnvelope(r, 64)
		switch {
		case flags&^(FlagCompressed|FlagEndStream) != 0:
			if !errors.Is(err, ErrFlags) || r.Len() != len(in)-HeaderSize {
				t.Fatalf("flags 0x%02x: %v, %d bytes left", flags, err, r.Len())
			}
		case flags&FlagCompressed != 0:
			if !errors.Is(err, ErrCompressed) {
				t.Fatalf("flags 0x%02x: %v", flags, err)
			}
		default:
			if err != nil {
				t.Fatalf("flags 0x%02x: %v", flags, err)
			}
		}
		r = bytes.NewReader(in)
		_, err = ReadSingleEnvelope(r, 64)
		if (flags == 0) != (err == nil) {
			t.Fatalf("request flags 0x%02x: %v", flags, err)
		}
		if flags&^FlagCompressed != 0 && (!errors.Is(err, ErrFlags) || r.Len() != len(in)-HeaderSize) {
			t.Fatalf("request flags 0x%02x: %v, %d bytes left", flags, err, r.Len())
		}
	}
}

func TestHTTPStatus(t *testing.T) {
	want := map[Code]int{Canceled: 499, Unknown: 500, InvalidArgument: 400, DeadlineExceeded: 504, NotFound: 404,
		AlreadyExists: 409, PermissionDenied: 403, ResourceExhausted: 429, FailedPrecondition: 400, Aborted: 409,
		OutOfRange: 400, Unimplemented: 501, Internal: 500, Unavailable: 503, DataLoss: 500, Unauthenticated: 401}
	for c, s := range want {
		if c.HTTPStatus() != s {
			t.Errorf("%s: %d, want %d", c, c.HTTPStatus(), s)
		}
	}
}

func TestStreamWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := NewStreamWriter(rec)
	if err := sw.Send(map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if !rec.Flushed {
		t.Fatal("Send did not flush")
	}
	_ = sw.Close(&Error{Code: Unavailable, Message: "gone"})
	_ = sw.Close(nil) // ignored
	_ = sw.Send("late")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != ContentTypeStreamJSON {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	r := bytes.NewReader(rec.Body.Bytes())
	_, p, _ := ReadEnvelope(r, 1<<10)
	f, end, _ := ReadEnvelope(r, 1<<10)
	if string(p) != `{"n":1}` || f != FlagEndStream || string(end) != `{"error":{"code":"unavailable","message":"gone"}}` {
		t.Fatalf("%q %q", p, end)
	}
	if r.Len() != 0 {
		t.Fatal("data after end-stream")
	}
}

func TestUnaryWriters(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteUnaryError(rec, Error{Code: NotFound, Message: "nope"})
	if rec.Code != 404 || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != `{"code":"not_found","message":"nope"}` {
		t.Fatalf("%d %q", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	_ = WriteUnary(rec, struct{}{})
	if rec.Code != http.StatusOK || rec.Body.String() != `{}` {
		t.Fatalf("%d %q", rec.Code, rec.Body)
	}
}

// partsMessage is a JSONPartAppender of n parts: a JSON array of n
// strings of 100 bytes each.
type partsMessage struct{ n int }

func (m partsMessage) part(b []byte, i int) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	return append(append(append(b, '"'), strings.Repeat(strconv.Itoa(i%10), 100)...), '"')
}

func (m partsMessage) AppendJSON(b []byte) []byte {
	b = append(b, '[')
	for i := range m.n {
		b = m.part(b, i)
	}
	return append(b, ']')
}

func (m partsMessage) SizeHint() int { return 102*m.n + 2 }

func (m partsMessage) AppendJSONPart(b []byte, i int) ([]byte, bool) {
	if i == 0 {
		b = append(b, '[')
	}
	if i < m.n {
		b = m.part(b, i)
	}
	if i+1 >= m.n {
		return append(b, ']'), false
	}
	return b, true
}

// writeCounter records the size of every Write.
type writeCounter struct {
	*httptest.ResponseRecorder
	writes []int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.ResponseRecorder.Write(p)
}

// TestWriteUnaryParts: a JSONPartAppender over maxPooledUnary is written
// with the exact Content-Length and AppendJSON's bytes in writes of at most
// half of maxPooledUnary and one part; a small one in one write.
func TestWriteUnaryParts(t *testing.T) {
	for _, n := range []int{0, 1, 10, maxPooledUnary / 102, maxPooledUnary/102 + 1, 5000} {
		m := partsMessage{n}
		w := &writeCounter{ResponseRecorder: httptest.NewRecorder()}
		if err := WriteUnary(w, m); err != nil {
			t.Fatal(err)
		}
		want := m.AppendJSON(nil)
		if w.Code != http.StatusOK || w.Body.String() != string(want) || w.Header().Get("Content-Length") != strconv.Itoa(len(want)) {
			t.Fatalf("%d parts: %d, Content-Length %s, %d bytes, want %d", n, w.Code, w.Header().Get("Content-Length"), w.Body.Len(), len(want))
		}
		if m.SizeHint() <= maxPooledUnary && len(w.writes) != 1 {
			t.Fatalf("%d parts (%d bytes) in %d writes", n, len(want), len(w.writes))
		}
		for _, size := range w.writes {
			if m.SizeHint() > maxPooledUnary && size > maxPooledUnary/2+103 {
				t.Fatalf("%d parts: a write of %d bytes", n, size)
			}
		}
	}
}

// FuzzReadEnvelope: the decoder never panics, never returns more than the
// limit, and a payload it accepts re-encodes to the bytes it read.
func FuzzReadEnvelope(f *testing.F) {
	f.Add(AppendEnvelope(nil, 0, []byte(`{"process":{"cmd":"ls"}}`)))
	f.Add([]byte{2, 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0, 255, 255, 255, 255})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		payload, err := ReadSingleEnvelope(bytes.NewReader(in), 1<<10)
		if err != nil {
			return
		}
		if len(payload) > 1<<10 {
			t.Fatalf("payload %d bytes over the limit", len(payload))
		}
		if !bytes.Equal(AppendEnvelope(nil, 0, payload), in) {
			t.Fatalf("accepted %x but it does not re-encode", in)
		}
		var v any
		_ = json.Unmarshal(payload, &v)
	})
}

// TestEnvelopeMemoryFollowsTheBytes: a request envelope that declares the
// largest allowed length but brings 10 bytes costs about what arrived, not
// the declared length. A client could hold that many bytes allocated per
// connection for 15 bytes sent: the payload was made at its declared
// length before anything of it was read (4 MiB here, the default
// max_message_size).
func TestEnvelopeMemoryFollowsTheBytes(t *testing.T) {
	const limit = 4 << 20
	hdr := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], limit)
	body := append(hdr, `{"process"`...)
	var err error
	n := memtest.AllocatedDuring(func() { _, err = ReadSingleEnvelope(bytes.NewReader(body), limit) })
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("a short envelope: %v, want ErrTruncated", err)
	}
	if n > 256<<10 {
		t.Fatalf("reading 15 bytes of an envelope declaring %d allocated %d bytes", limit, n)
	}
	// A whole envelope at the limit is still read.
	full := AppendEnvelope(nil, 0, bytes.Repeat([]byte("a"), limit))
	p, err := ReadSingleEnvelope(bytes.NewReader(full), limit)
	if err != nil || len(p) != limit {
		t.Fatalf("an envelope at the limit: %d bytes, %v", len(p), err)
	}
}

// TestStreamWriterKeepsNoLargeBuffer: a stream that sent one large message
// (a command's 16 MiB output line is about 21 MiB of JSON) keeps no buffer
// of its size for the rest of its life, and the message arrives whole.
func TestStreamWriterKeepsNoLargeBuffer(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := NewStreamWriter(rec)
	big := strings.Repeat("x", 1<<20)
	if err := sw.Send(big); err != nil {
		t.Fatal(err)
	}
	if c := cap(sw.buf); c > keptBuffer {
		t.Fatalf("the stream keeps a %d-byte buffer after a large message, want at most %d", c, keptBuffer)
	}
	if err := sw.Send("small"); err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(rec.Body.Bytes())
	_, p, err := ReadEnvelope(r, 2<<20)
	if err != nil || string(p) != `"`+big+`"` {
		t.Fatalf("the large message: %v, %d bytes", err, len(p))
	}
	if _, p, err = ReadEnvelope(r, 1<<10); err != nil || string(p) != `"small"` || r.Len() != 0 {
		t.Fatalf("the next message: %v %q, %d bytes left", err, p, r.Len())
	}
}
