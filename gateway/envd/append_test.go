package envd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// marshalSame fails unless AppendJSON gives exactly json.Marshal's bytes.
func marshalSame(t *testing.T, r ListDirResponse) {
	t.Helper()
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got := r.AppendJSON([]byte("prefix"))
	if !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("AppendJSON =\n%s\njson.Marshal =\n%s", got[len("prefix"):], want)
	}
	var parts []byte
	for i, more := 0, true; more; i++ {
		if i > len(r.Entries)+1 {
			t.Fatalf("AppendJSONPart goes on past %d entries", len(r.Entries))
		}
		parts, more = r.AppendJSONPart(parts, i)
	}
	if !bytes.Equal(parts, want) {
		t.Fatalf("AppendJSONPart's parts =\n%s\njson.Marshal =\n%s", parts, want)
	}
}

// TestAppendJSONMatchesMarshal: the hand-written encoding is byte for byte
// encoding/json's, for empty, nil and full responses and every escape
// class.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	ts := Timestamp(time.Date(2026, 11, 29, 15, 5, 23, 775_000_000, time.FixedZone("x", 3600)))
	link := "/tmp/<target>&\u2028"
	marshalSame(t, ListDirResponse{})
	marshalSame(t, ListDirResponse{Entries: []EntryInfo{}})
	marshalSame(t, ListDirResponse{Entries: []EntryInfo{
		{Name: "a.txt", Type: FileTypeFile, Path: "/home/user/a.txt", Size: 12, Mode: 0o644, Permissions: "-rw-r--r--", Owner: "user", Group: "user", ModifiedTime: &ts},
		{Name: "d", Type: FileTypeDirectory, Path: "/d", Mode: 0o755, Permissions: Permissions(0o755, true)},
		{Name: "quote\"back\\slash\b\f\n\r\t\x00\x1f\x7f<>&é\u2029\xff\xc3", Type: FileTypeUnspecified, Path: "", SymlinkTarget: &link},
		{Name: "", Size: -1},
	}})
	for _, ns := range []int{0, 1, 1000, 123_456_000, 999_999_999, 5_000_000} {
		ts := Timestamp(time.Date(1999, 1, 2, 3, 4, 5, ns, time.UTC))
		marshalSame(t, ListDirResponse{Entries: []EntryInfo{{Name: "t", ModifiedTime: &ts}}})
	}
}

// TestSizeHintCoversUnescapedListing: for entries whose strings need no
// escaping and whose members are all present at their longest (the
// smallest int64 size, the largest mode, a time with nine fractional
// digits), sizeHint is at least the encoding's length, so AppendJSON
// allocates its buffer once.
func TestSizeHintCoversUnescapedListing(t *testing.T) {
	ts := Timestamp(time.Date(9999, 12, 31, 23, 59, 59, 123_456_789, time.UTC))
	link := "/home/user/target"
	e := EntryInfo{Name: "file.txt", Type: FileTypeDirectory, Path: "/home/user/file.txt", Size: -1 << 63, Mode: 1<<32 - 1,
		Permissions: "drwxrwxrwx", Owner: "owner", Group: "group", ModifiedTime: &ts, SymlinkTarget: &link}
	for _, n := range []int{0, 1, 100} {
		r := ListDirResponse{Entries: make([]EntryInfo, n)}
		for i := range r.Entries {
			r.Entries[i] = e
		}
		got := r.AppendJSON(nil)
		if hint := r.sizeHint(); len(got) > hint {
			t.Fatalf("%d entries: encoding %d bytes, sizeHint %d", n, len(got), hint)
		}
		if cap(got) > 2*len(got)+64 {
			t.Fatalf("%d entries: encoding %d bytes in a buffer of %d", n, len(got), cap(got))
		}
	}
}

// FuzzAppendJSON: for any strings and numbers the encoding equals
// json.Marshal's.
func FuzzAppendJSON(f *testing.F) {
	f.Add("a.txt", "/home/user/a.txt", "user", "grp", int64(12), uint32(0o644), int64(1764428723775000000), true)
	f.Add("<&>\u2028", "\xff\x00\"\\", "", "", int64(0), uint32(0), int64(0), false)
	f.Fuzz(func(t *testing.T, name, p, owner, group string, size int64, mode uint32, unixNano int64, withTime bool) {
		e := EntryInfo{Name: name, Type: FileTypeFile, Path: p, Size: Int64(size), Mode: mode,
			Permissions: Permissions(mode, false), Owner: owner, Group: group}
		if withTime {
			ts := Timestamp(time.Unix(0, unixNano))
			e.ModifiedTime = &ts
			e.SymlinkTarget = &name
		}
		marshalSame(t, ListDirResponse{Entries: []EntryInfo{e, e}})
	})
}

// BenchmarkListDirEncode compares AppendJSON with json.Marshal for a
// 16-entry listing.
func BenchmarkListDirEncode(b *testing.B) {
	ts := Timestamp(time.Now())
	r := ListDirResponse{}
	for range 16 {
		r.Entries = append(r.Entries, EntryInfo{Name: "file-00.txt", Type: FileTypeFile, Path: "/home/user/bench/file-00.txt",
			Size: 10, Mode: 0o644, Permissions: "-rw-r--r--", Owner: "root", Group: "root", ModifiedTime: &ts})
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 8192)
		for b.Loop() {
			buf = r.AppendJSON(buf[:0])
		}
	})
}

// TestTimestampMatchesAppendFormat: the timestamp's digits written out
// equal time.Time.AppendFormat's RFC 3339 layout for random times, the
// edges of years 0 and 9999, and years outside them (which take
// AppendFormat itself).
func TestTimestampMatchesAppendFormat(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	times := []time.Time{time.Time{}, time.Unix(0, 0), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	for range 100_000 {
		times = append(times, time.Unix(rnd.Int64N(400_000_000_000)-100_000_000_000, rnd.Int64N(1e9)).In(time.FixedZone("z", rnd.IntN(50_000)-25_000)))
	}
	for _, tm := range times {
		got := Timestamp(tm).appendJSON(nil)
		u := tm.UTC()
		want := `"` + u.Format("2006-01-02T15:04:05")
		switch ns := u.Nanosecond(); { // protojson: 0, 3, 6 or 9 digits
		case ns == 0:
		case ns%1e6 == 0:
			want += fmt.Sprintf(".%03d", ns/1e6)
		case ns%1e3 == 0:
			want += fmt.Sprintf(".%06d", ns/1e3)
		default:
			want += fmt.Sprintf(".%09d", ns)
		}
		want += `Z"`
		if string(got) != want {
			t.Fatalf("%v: %s, want %s", tm, got, want)
		}
	}
}
