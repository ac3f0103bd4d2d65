package envd

import (
	"bytes"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/jsonplain"
)

// plainText reports whether every byte of s is jsonplain.HTMLByte, as
// PlainEntry's strings must be.
func plainText(s string) bool {
	for i := range len(s) {
		if !jsonplain.HTMLByte(s[i]) {
			return false
		}
	}
	return true
}

// samePlainEncoding fails unless the PlainEntry of an entry encodes to
// the bytes its EntryInfo does, alone, in a list and in parts.
func samePlainEncoding(t *testing.T, e EntryInfo) {
	t.Helper()
	p := PlainEntry{Name: []byte(e.Name), Type: e.Type, Path: []byte(e.Path), Size: int64(e.Size), Mode: e.Mode,
		Permissions: e.Permissions, Owner: []byte(e.Owner), Group: []byte(e.Group)}
	if e.ModifiedTime != nil {
		tt := time.Time(*e.ModifiedTime).UTC()
		p.Modified, p.ModifiedNanos = []byte(tt.Format("2006-01-02T15:04:05")), tt.Nanosecond()
	}
	for _, n := range []int{0, 1, 3} {
		entries, plain := make([]EntryInfo, n), make([]PlainEntry, n)
		for i := range n {
			entries[i], plain[i] = e, p
		}
		want := ListDirResponse{Entries: entries}.AppendJSON(nil)
		pr := PlainListDirResponse{Entries: plain}
		if got := pr.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("%d entries:\nplain %s\nentry %s", n, got, want)
		}
		var parts []byte
		for i, more := 0, true; more; i++ {
			parts, more = pr.AppendJSONPart(parts, i)
		}
		if !bytes.Equal(parts, want) {
			t.Fatalf("%d entries in parts:\nplain %s\nentry %s", n, parts, want)
		}
		if pr.SizeHint() < len(want) {
			t.Fatalf("%d entries: SizeHint %d under %d", n, pr.SizeHint(), len(want))
		}
	}
}

// TestPlainEntryEncoding: a PlainEntry is written as its EntryInfo is,
// with every member present, absent or zero, and times of every fraction
// length.
func TestPlainEntryEncoding(t *testing.T) {
	ts := func(tm time.Time) *Timestamp { x := Timestamp(tm); return &x }
	for _, e := range []EntryInfo{
		{Name: "a.txt", Type: FileTypeFile, Path: "/home/user/a.txt", Size: 10, Mode: 0o644, Permissions: Permissions(0o644, false),
			Owner: "root", Group: "root", ModifiedTime: ts(time.Date(2026, 12, 6, 17, 26, 2, 397661013, time.UTC))},
		{Name: "d", Type: FileTypeDirectory, Path: "/d", Permissions: Permissions(0, true), ModifiedTime: ts(time.Date(2026, 12, 6, 0, 0, 0, 120_000_000, time.UTC))},
		{Name: "x", Type: FileTypeUnspecified, Path: "x", Size: -1, Mode: 0o7777, Owner: "1000", ModifiedTime: ts(time.Date(0, 1, 1, 0, 0, 0, 1000, time.UTC))},
		{Name: "", Type: FileTypeFile, Path: "", Group: "g", ModifiedTime: ts(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))},
	} {
		samePlainEncoding(t, e)
	}
}

// FuzzPlainEntryEncoding: for any plain strings, numbers and time, the
// PlainEntry's encoding is the EntryInfo's.
func FuzzPlainEntryEncoding(f *testing.F) {
	f.Add("a.txt", "/home/user/a.txt", "root", "root", uint8(1), int64(10), uint32(0o644), int64(1796577962), int64(397661013), true)
	f.Add("", "", "", "", uint8(0), int64(0), uint32(0), int64(-62135596800), int64(0), false)
	f.Fuzz(func(t *testing.T, name, path, owner, group string, typ uint8, size int64, mode uint32, sec, nsec int64, timed bool) {
		if !plainText(name) || !plainText(path) || !plainText(owner) || !plainText(group) {
			return
		}
		types := []FileType{FileTypeUnspecified, FileTypeFile, FileTypeDirectory}
		e := EntryInfo{Name: name, Type: types[int(typ)%len(types)], Path: path, Size: Int64(size), Mode: mode & 0o7777,
			Permissions: Permissions(mode, typ%3 == 2), Owner: owner, Group: group}
		if timed {
			// A year of four digits, as execd's times have.
			tm := time.Unix(sec%253402300800, nsec%1e9).UTC()
			if tm.Year() < 0 {
				tm = tm.AddDate(2000, 0, 0)
			}
			x := Timestamp(tm)
			e.ModifiedTime = &x
		}
		samePlainEncoding(t, e)
	})
}
