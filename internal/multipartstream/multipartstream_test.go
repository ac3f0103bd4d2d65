package multipartstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sandgate/sandgate/internal/memtest"
)

// partResult is what one part yielded.
type partResult struct {
	Header textproto.MIMEHeader
	Body   []byte
	Err    bool // the body's read ended with an error other than io.EOF
}

// bodyResult is what a whole body yielded: its parts and whether NextPart
// ended with an error other than io.EOF.
type bodyResult struct {
	Parts []partResult
	Err   bool
	// HeaderTruncated: ErrHeaderTruncated ended it (this package only).
	HeaderTruncated bool
}

// readStd reads body with mime/multipart's NextRawPart and Part.Read,
// reads of step bytes.
func readStd(body []byte, boundary string, step int) bodyResult {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var res bodyResult
	for {
		p, err := mr.NextRawPart()
		if err != nil {
			res.Err = !errors.Is(err, io.EOF)
			return res
		}
		pr := partResult{Header: p.Header}
		pr.Body, pr.Err = readAll(p, step)
		res.Parts = append(res.Parts, pr)
	}
}

// readOurs reads body with this package, through Read (step bytes at a
// time) or Next (step 0), with a buffer of size bytes.
func readOurs(body []byte, boundary string, size, step int, src func(io.Reader) io.Reader) bodyResult {
	mr := NewReader(src(bytes.NewReader(body)), boundary, size)
	var res bodyResult
	for {
		p, err := mr.NextPart()
		if err != nil {
			res.Err = !errors.Is(err, io.EOF)
			res.HeaderTruncated = errors.Is(err, ErrHeaderTruncated)
			return res
		}
		pr := partResult{Header: p.Header}
		if step == 0 {
			for {
				b, err := p.Next()
				pr.Body = append(pr.Body, b...)
				if err != nil {
					pr.Err = !errors.Is(err, io.EOF)
					break
				}
			}
		} else {
			pr.Body, pr.Err = readAll(p, step)
		}
		res.Parts = append(res.Parts, pr)
	}
}

func readAll(r io.Reader, step int) ([]byte, bool) {
	var out []byte
	buf := make([]byte, step)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, !errors.Is(err, io.EOF)
		}
	}
}

func identity(r io.Reader) io.Reader { return r }

// sources are the ways the body arrives: whole, one byte per read, and
// half of each read.
var sources = map[string]func(io.Reader) io.Reader{
	"whole": identity, "onebyte": iotest.OneByteReader, "half": iotest.HalfReader,
}

// checkSame fails when this package and mime/multipart read body
// differently. With a 4 KiB buffer (mime/multipart's own) everything must
// be identical; with a larger buffer, every body mime/multipart reads
// without error must be read identically.
func checkSame(t *testing.T, body []byte, boundary string) {
	t.Helper()
	for _, step := range []int{1, 7, 4096, 1 << 20} {
		want := readStd(body, boundary, step)
		for name, src := range sources {
			for _, size := range []int{MinBufferSize, DefaultBufferSize} {
				for _, ourStep := range []int{0, step} {
					got := readOurs(body, boundary, size, ourStep, src)
					if size > MinBufferSize && want.Err {
						continue // a longer line may fit the larger buffer
					}
					if got.HeaderTruncated {
						// mime/multipart ends the parts with io.EOF there.
						got.Err, got.HeaderTruncated = want.Err, false
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("boundary %q, body %q\nsource %s, buffer %d, step %d (Next: %v):\n got %+v\nwant %+v",
							boundary, truncate(body), name, size, step, ourStep == 0, got, want)
					}
				}
			}
		}
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// build returns a multipart body of parts written by mime/multipart.
func build(boundary string, parts ...string) []byte {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary(boundary); err != nil {
		panic(err)
	}
	for i, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="/home/user/f%d"`, i))
		h.Set("Content-Type", "application/octet-stream")
		pw, _ := w.CreatePart(h)
		_, _ = pw.Write([]byte(p))
	}
	_ = w.Close()
	return b.Bytes()
}

// TestSameAsMimeMultipart reads hand-picked bodies both ways: the SDKs'
// shape, empty and boundary-like contents, LF line breaks, preamble and
// epilogue, padding after boundaries, truncations and malformed framing.
func TestSameAsMimeMultipart(t *testing.T) {
	const bd = "XyZ123"
	big := strings.Repeat("0123456789abcdef\r\n--XyZ12\r", 30000) // near-boundaries across many fills
	bodies := map[string][]byte{
		"sdk one file":         build(bd, "hello\n"),
		"empty file":           build(bd, ""),
		"three files":          build(bd, "a", "", "c\r\n"),
		"boundary-like":        build(bd, "\r\n--XyZ12", "--XyZ123x", "\r\n--XyZ123x\r\n--XyZ", "\r\r\n\n--"),
		"large":                build(bd, big, "tail"),
		"lf line breaks":       []byte("--XyZ123\nA: b\n\nbody\n--XyZ123\nC: d\n\nmore\n--XyZ123--\n"),
		"preamble epilogue":    []byte("preamble line\r\n\r\n--XyZ123\r\nA: b\r\n\r\nx\r\n--XyZ123--\r\nepilogue"),
		"padding":              []byte("--XyZ123 \t\r\nA: b\r\n\r\nx\r\n--XyZ123 \r\n\r\ny\r\n--XyZ123-- \t\r\n"),
		"final without crlf":   []byte("--XyZ123\r\n\r\nx\r\n--XyZ123--"),
		"no headers":           []byte("--XyZ123\r\n\r\nx\r\n--XyZ123--\r\n"),
		"continuation":         []byte("--XyZ123\r\nA: b\r\n  c\r\n \r\nD: e\r\n\r\nx\r\n--XyZ123--\r\n"),
		"truncated body":       build(bd, "hello")[:60],
		"truncated header":     []byte("--XyZ123\r\nA: b\r\n"),
		"truncated boundary":   []byte("--XyZ123\r\n\r\nbody\r\n--XyZ1"),
		"missing final":        []byte("--XyZ123\r\n\r\nbody\r\n"),
		"bad header":           []byte("--XyZ123\r\nno colon\r\n\r\nx\r\n--XyZ123--\r\n"),
		"leading space header": []byte("--XyZ123\r\n A: b\r\n\r\nx\r\n--XyZ123--\r\n"),
		"cr in header line":    []byte("--XyZ123\r\nA: b\r\r\n\r\nx\r\n--XyZ123--\r\n"),
		"junk between parts":   []byte("--XyZ123\r\n\r\nx\r\n--XyZ123\r\n\r\ny\r\njunk\r\n--XyZ123--\r\n"),
		"nothing":              nil,
		"only final":           []byte("--XyZ123--\r\n"),
		"long preamble line":   append(bytes.Repeat([]byte("p"), 5000), "\r\n--XyZ123\r\n\r\nx\r\n--XyZ123--\r\n"...),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) { checkSame(t, body, bd) })
	}
	t.Run("empty boundary", func(t *testing.T) {
		if _, err := NewReader(strings.NewReader("--\r\n"), "", 0).NextPart(); err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("err %v, want an error", err)
		}
	})
}

// TestNextInPlace: Next hands out the body in buffer-sized slices without
// copying, the whole 4 MiB body in about 16 slices with a 256 KiB buffer.
func TestNextInPlace(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcde\r"), 4<<20/16)
	body := build("b0undary", string(content))
	mr := NewReader(bytes.NewReader(body), "b0undary", 0)
	p, err := mr.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Header.Get("Content-Disposition"); got != `form-data; name="file"; filename="/home/user/f0"` {
		t.Fatalf("Content-Disposition %q", got)
	}
	var got []byte
	calls := 0
	for {
		b, err := p.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		if len(b) > DefaultBufferSize {
			t.Fatalf("a slice of %d bytes, over the buffer", len(b))
		}
		calls++
		got = append(got, b...)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("body differs: %d bytes, want %d", len(got), len(content))
	}
	if calls > 4<<20/DefaultBufferSize+2 {
		t.Fatalf("%d slices for 4 MiB through a 256 KiB buffer", calls)
	}
	if _, err := mr.NextPart(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last part: %v, want io.EOF", err)
	}
}

// TestHeaderLimits: a header block over MaxHeaderBytes, or over the buffer,
// and one of more than MaxHeaders lines fail with ErrHeaderTooLarge before
// any of it is parsed, and the reader's memory stays bounded: a 64 MiB
// header line costs at most the buffer.
func TestHeaderLimits(t *testing.T) {
	cases := map[string]struct {
		body []byte
		size int
	}{
		"over 64 KiB":    {append([]byte("--b\r\nA: "), bytes.Repeat([]byte("x"), MaxHeaderBytes)...), 0},
		"over buffer":    {append([]byte("--b\r\nA: "), bytes.Repeat([]byte("x"), MinBufferSize)...), MinBufferSize},
		"too many lines": {append([]byte("--b\r\n"), append(bytes.Repeat([]byte("A:\n"), MaxHeaders+1), "\r\n"...)...), 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.body), "b", c.size).NextPart()
			if !errors.Is(err, ErrHeaderTooLarge) {
				t.Fatalf("err %v, want ErrHeaderTooLarge", err)
			}
		})
	}
	t.Run("64 MiB header line", func(t *testing.T) {
		r := io.MultiReader(strings.NewReader("--b\r\nA: "), io.LimitReader(repeatReader('x'), 64<<20))
		var err error
		grown := memtest.AllocatedDuring(func() { _, err = NewReader(r, "b", 0).NextPart() })
		if !errors.Is(err, ErrHeaderTooLarge) {
			t.Fatalf("err %v, want ErrHeaderTooLarge", err)
		}
		if grown > 2*DefaultBufferSize {
			t.Fatalf("allocated %d bytes for a refused header, want at most %d", grown, 2*DefaultBufferSize)
		}
	})
}

// TestLineLimit: a line outside the parts (here a preamble line) of
// MaxLineBytes is read and one byte more fails with ErrLineTooLong, through
// a 64 KiB buffer and a 1 MiB one alike (the gateway's two write buffers),
// so whether a body is refused does not depend on which buffer it got;
// through a 4 KiB buffer the buffer is the bound.
func TestLineLimit(t *testing.T) {
	body := func(line int) []byte {
		return append(append(bytes.Repeat([]byte("p"), line-2), "\r\n"...), "--b\r\n\r\nx\r\n--b--\r\n"...)
	}
	for _, size := range []int{MaxLineBytes, 1 << 20} {
		if _, err := NewReader(bytes.NewReader(body(MaxLineBytes)), "b", size).NextPart(); err != nil {
			t.Fatalf("a %d-byte preamble line through a %d-byte buffer: %v", MaxLineBytes, size, err)
		}
		if _, err := NewReader(bytes.NewReader(body(MaxLineBytes+1)), "b", size).NextPart(); !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("a %d-byte preamble line through a %d-byte buffer: %v, want ErrLineTooLong", MaxLineBytes+1, size, err)
		}
	}
	if _, err := NewReader(bytes.NewReader(body(MinBufferSize+1)), "b", MinBufferSize).NextPart(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("a line over a 4 KiB buffer: %v, want ErrLineTooLong", err)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestReadError: a read error of the body ends the part's Read and Next
// with that error, and NextPart with it too; the source is not read again.
func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	src := &countingErrReader{r: strings.NewReader("--b\r\n\r\nsome body"), err: boom}
	mr := NewReader(src, "b", 0)
	p, err := mr.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		b, err := p.Next()
		got = append(got, b...)
		if err != nil {
			if !errors.Is(err, boom) {
				t.Fatalf("Next: %v, want boom", err)
			}
			break
		}
	}
	if string(got) != "some body" {
		t.Fatalf("body %q", got)
	}
	if _, err := mr.NextPart(); !errors.Is(err, boom) {
		t.Fatalf("NextPart: %v, want boom", err)
	}
	if src.afterErr > 0 {
		t.Fatalf("the source was read %d times after its error", src.afterErr)
	}
}

type countingErrReader struct {
	r        io.Reader
	err      error
	failed   bool
	afterErr int
}

func (c *countingErrReader) Read(p []byte) (int, error) {
	if c.failed {
		c.afterErr++
		return 0, c.err
	}
	n, err := c.r.Read(p)
	if err == io.EOF {
		c.failed = true
		return n, c.err
	}
	return n, err
}

// FuzzSameAsMimeMultipart: for any body and boundary, this package reads
// exactly what mime/multipart reads (see checkSame).
func FuzzSameAsMimeMultipart(f *testing.F) {
	f.Add([]byte("--b\r\nA: b\r\n\r\nbody\r\n--b--\r\n"), "b")
	f.Add(build("XyZ", "a\r\n--XyZ", "--XyZ--"), "XyZ")
	f.Add([]byte("pre\n--q\nA: b\n\nx\n--q \n\ny\n--q--"), "q")
	f.Add([]byte("--b\r\nA: b\r\n c\r\n\r\n\r\n--b\r\n--b--"), "b")
	f.Fuzz(func(t *testing.T, body []byte, boundary string) {
		if len(boundary) == 0 || len(boundary) > 70 || strings.ContainsAny(boundary, "\r\n") {
			return // not a boundary a Content-Type can carry
		}
		if len(body) > 64<<10 {
			return
		}
		checkSame(t, body, boundary)
	})
}

// TestLineLimitFinalBoundaryAtTheEnd: a final boundary line padded with
// spaces (RFC 2046's transport padding) that the body ends without a line
// break is bounded like any other line outside the parts, its missing line
// break counted: MaxLineBytes-1 bytes end the parts (io.EOF) and
// MaxLineBytes bytes fail with ErrLineTooLong, through a 64 KiB buffer and
// a 1 MiB one alike, and whether the body's reader returns its last bytes
// with io.EOF or alone (a 64 KiB buffer fills up before the end is seen in
// the one case and not in the other). With LF line breaks a line of
// MaxLineBytes, "\n" included, is read and one byte more is refused, as
// with CRLF (TestLineLimit).
func TestLineLimitFinalBoundaryAtTheEnd(t *testing.T) {
	final := func(line int) []byte {
		return append([]byte("--b\r\n\r\nx\r\n--b--"), bytes.Repeat([]byte(" "), line-len("--b--"))...)
	}
	for _, size := range []int{MaxLineBytes, 1 << 20} {
		for name, src := range map[string]func(io.Reader) io.Reader{"whole": identity, "data with EOF": iotest.DataErrReader} {
			read := func(body []byte) error {
				mr := NewReader(src(bytes.NewReader(body)), "b", size)
				if _, err := mr.NextPart(); err != nil {
					return fmt.Errorf("the first part: %w", err)
				}
				_, err := mr.NextPart()
				return err
			}
			if err := read(final(MaxLineBytes - 1)); err != io.EOF {
				t.Errorf("a final boundary line of %d bytes at the end, %d-byte buffer, %s: %v, want io.EOF", MaxLineBytes-1, size, name, err)
			}
			if err := read(final(MaxLineBytes)); !errors.Is(err, ErrLineTooLong) {
				t.Errorf("a final boundary line of %d bytes at the end, %d-byte buffer, %s: %v, want ErrLineTooLong", MaxLineBytes, size, name, err)
			}
		}
		lf := func(line int) []byte {
			return append(append(bytes.Repeat([]byte("p"), line-1), '\n'), "--b\n\nx\n--b--\n"...)
		}
		if _, err := NewReader(bytes.NewReader(lf(MaxLineBytes)), "b", size).NextPart(); err != nil {
			t.Errorf("an LF preamble line of %d bytes through a %d-byte buffer: %v", MaxLineBytes, size, err)
		}
		if _, err := NewReader(bytes.NewReader(lf(MaxLineBytes+1)), "b", size).NextPart(); !errors.Is(err, ErrLineTooLong) {
			t.Errorf("an LF preamble line of %d bytes through a %d-byte buffer: %v, want ErrLineTooLong", MaxLineBytes+1, size, err)
		}
	}
}
