package sandboxlogs

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/memtest"
)

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func lines(entries ...Entry) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.Time.Format(time.RFC3339Nano) + " " + e.Line + "\n")
	}
	return b.String()
}

// TestParse: the kubelet's "<time> <text>" lines; a line without a time
// continues the one before (dropped when first); CR before the newline
// and a last line without a newline are read; a long line is cut.
func TestParse(t *testing.T) {
	in := "garbage before any time\n" + lines(Entry{at(1), "hello world"}) + "a continuation\n" +
		at(2).Format(time.RFC3339Nano) + " crlf\r\n" + at(3).Format(time.RFC3339Nano) + " " + strings.Repeat("x", MaxLineBytes+100) + "\n" +
		at(4).Format(time.RFC3339Nano) + " last, no newline"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{at(1), "hello world"}, {at(1), "a continuation"}, {at(2), "crlf"}, {at(3), strings.Repeat("x", MaxLineBytes-len(at(3).Format(time.RFC3339Nano))-1)},
		{at(4), "last, no newline"}}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if !got[i].Time.Equal(want[i].Time) || got[i].Line != want[i].Line {
			t.Errorf("entry %d = %v %.40q, want %v %.40q (%d bytes, want %d)", i, got[i].Time, got[i].Line, want[i].Time, want[i].Line, len(got[i].Line), len(want[i].Line))
		}
	}
	if got, err := Parse(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Fatalf("empty stream: %v %v", got, err)
	}
}

// TestParseBounded: a stream over MaxReadBytes is refused without being
// kept, and one huge line costs at most MaxLineBytes of it.
func TestParseBounded(t *testing.T) {
	huge := io.MultiReader(strings.NewReader(at(1).Format(time.RFC3339Nano)+" "), &repeat{b: 'y', n: MaxReadBytes + 10})
	if _, err := Parse(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("stream over the limit: %v", err)
	}
	alloc := memtest.AllocatedDuring(func() {
		got, err := Parse(io.MultiReader(strings.NewReader(at(1).Format(time.RFC3339Nano)+" "), &repeat{b: 'y', n: MaxReadBytes - 100}))
		if err != nil || len(got) != 1 || len(got[0].Line) > MaxLineBytes {
			t.Errorf("one long line: %d entries, %v", len(got), err)
		}
	})
	if alloc > 1<<20 {
		t.Fatalf("parsing a %d-byte line allocated %d bytes", MaxReadBytes, alloc)
	}
}

type repeat struct {
	b byte
	n int
}

func (r *repeat) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.n)
	for i := range n {
		p[i] = r.b
	}
	r.n -= n
	return n, nil
}

// TestSelect: entries of two pods merged by time; the window includes
// both ends; backward is newest first; the limit keeps the first ones in
// the direction; search is a case-sensitive substring.
func TestSelect(t *testing.T) {
	podA := []Entry{{at(1), "a1"}, {at(3), "a3 Error"}, {at(5), "a5"}}
	podB := []Entry{{at(2), "b2 error"}, {at(4), "b4"}}
	all := append(append([]Entry{}, podA...), podB...)
	text := func(es []Entry) string {
		var s []string
		for _, e := range es {
			s = append(s, e.Line)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		q    Query
		want string
	}{
		{Query{Limit: 10}, "a1,b2 error,a3 Error,b4,a5"},
		{Query{Limit: 2}, "a1,b2 error"},
		{Query{Limit: 2, Backward: true}, "a5,b4"},
		{Query{Limit: 10, From: at(2), To: at(4)}, "b2 error,a3 Error,b4"},
		{Query{Limit: 10, To: at(3), Backward: true}, "a3 Error,b2 error,a1"},
		{Query{Limit: 10, Search: "error"}, "b2 error"},
		{Query{Limit: 0}, ""},
	} {
		if got := text(Select(all, c.q)); got != c.want {
			t.Errorf("%+v = %q, want %q", c.q, got, c.want)
		}
	}
}
