package execd

import (
	"strings"
	"testing"
	"time"
)

// sameViews fails unless body, when readViews takes it as a plain
// listing, is one decodeFileInfoList decodes to the entries the views
// show. It reports whether body was plain.
func sameViews(t *testing.T, body string) bool {
	t.Helper()
	var views []FileInfoView
	_, viewed, err := (&Client{}).decodeListing(listResponse(body), func(v []FileInfoView) {
		for _, x := range v { // the views outlive the call here only as copies
			views = append(views, FileInfoView{Path: clone(x.Path), Type: clone(x.Type), Owner: clone(x.Owner), Group: clone(x.Group),
				Size: x.Size, Perm: x.Perm, Modified: clone(x.Modified), ModifiedNanos: x.ModifiedNanos})
		}
	})
	if !viewed {
		return false
	}
	if err != nil {
		t.Fatalf("body %q: viewed, and error %v", body, err)
	}
	list, err := (&Client{}).decodeFileInfoList(listResponse(body))
	if err != nil {
		t.Fatalf("body %q: viewed, and refused when decoded: %v", body, err)
	}
	if len(list) != len(views) {
		t.Fatalf("body %q: %d views, %d decoded", body, len(views), len(list))
	}
	for i, fi := range list {
		v := views[i]
		perm, err := fi.Perm()
		if err != nil || string(v.Path) != fi.Path || string(v.Type) != fi.Type || string(v.Owner) != fi.Owner ||
			string(v.Group) != fi.Group || v.Size != fi.Size || v.Perm != perm {
			t.Fatalf("body %q entry %d: view %+v, decoded %+v (perm %o, %v)", body, i, v, fi, perm, err)
		}
		if fi.ModifiedAt.IsZero() != (v.Modified == nil) || v.Modified != nil &&
			(fi.ModifiedAt.Location() != time.UTC || fi.ModifiedAt.Format("2006-01-02T15:04:05") != string(v.Modified) || fi.ModifiedAt.Nanosecond() != v.ModifiedNanos) {
			t.Fatalf("body %q entry %d: view's time %q %d, decoded %v", body, i, v.Modified, v.ModifiedNanos, fi.ModifiedAt)
		}
	}
	return true
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// TestListingViews: execd's listings are read as views of the entries
// decodeFileInfoList decodes; a listing of more than max_listing_entries
// is not, and decoding it refuses it as before.
func TestListingViews(t *testing.T) {
	entry := `{"path":"/home/user/a.txt","type":"file","size":10,"modified_at":"2026-12-06T17:26:02.397661013Z","created_at":"2026-12-06T17:26:02.397661013Z","owner":"root","group":"root","mode":644}`
	for _, body := range []string{`[]`, `[` + entry + `]`, `[` + entry + `,` + entry + `]`,
		`[{"path":"/d","type":"directory","mode":755,"modified_at":"0001-01-01T00:00:00Z","owner":"","group":"0"}]`,
		`[{"path":"x","size":0,"mode":0,"modified_at":"2000-02-29T23:59:59.1Z","created_at":null}]`} {
		if !sameViews(t, body) {
			t.Errorf("body %q: not read as views", body)
		}
	}
	over := `[` + strings.Repeat(`{"path":"/a"},`, DefaultMaxListingEntries) + `{"path":"/a"}]`
	called := false
	_, viewed, err := (&Client{}).decodeListing(listResponse(over), func([]FileInfoView) { called = true })
	if viewed || called || err == nil || !strings.Contains(err.Error(), "max_listing_entries") {
		t.Fatalf("%d entries: viewed %v, called %v, error %v", DefaultMaxListingEntries+1, viewed, called, err)
	}
}

// FuzzListingViews: for any body, views read from it show what decoding
// it gives.
func FuzzListingViews(f *testing.F) {
	f.Add(`[{"path":"/home/user/a.txt","type":"file","size":10,"modified_at":"2026-12-06T17:26:02.397661013Z","created_at":"2026-12-06T17:26:02.397661013Z","owner":"root","group":"root","mode":644}]`)
	f.Add(`[{"path":"/a","mode":0777,"size":18446744073709551615}]`)
	f.Add(`[{"path":"/a","modified_at":"9999-12-31T23:59:59.999999999Z","created_at":[{"a":"\u0041"}]}]`)
	f.Fuzz(func(t *testing.T, body string) {
		sameViews(t, body)
	})
}

// TestDeclinedListingKeepsNoViews: a listing readViews declines, for
// whatever reason (one entry past max_listing_entries, an entry it does not
// take, a bad separator), leaves no view into its body in the decoder's
// kept slice: the decoder goes back to listDecoders, and a body the pool
// does not keep (one over maxPooledList, up to max_listing_size) must not
// stay reachable through it.
func TestDeclinedListingKeepsNoViews(t *testing.T) {
	entries := func(n int, last string) string {
		return `[` + strings.Repeat(`{"path":"/home/user/a"},`, n) + last + `]`
	}
	for name, c := range map[string]struct {
		body       string
		maxEntries int
	}{
		"one past max_listing_entries": {entries(8, `{"path":"/home/user/b"}`), 8},
		"an entry not taken":           {entries(8, `{"path":"/home/user/b","x":1}`), 16},
		"a bad separator":              {strings.TrimSuffix(entries(8, `{"path":"/home/user/b"}`), "]") + "x", 16},
	} {
		ld := &listDecoder{}
		if _, ok := ld.readViews([]byte(c.body), 9, c.maxEntries); ok {
			t.Fatalf("%s: taken as a plain listing", name)
		}
		for i, v := range ld.viewBuf[:cap(ld.viewBuf)] {
			if v.Path != nil || v.Type != nil || v.Owner != nil || v.Group != nil || v.Modified != nil {
				t.Fatalf("%s: the decoder keeps view %d into the declined body: %q", name, i, v.Path)
			}
		}
	}
}

// TestHandViewsClearsOnPanic: a plain callback that panics leaves no view
// into the listing's body in the decoder's kept slice (the panic goes on to
// the caller, as Caddy's server recovers a handler's), and a slice over
// maxPooledViews is not kept at all.
func TestHandViewsClearsOnPanic(t *testing.T) {
	for _, n := range []int{3, maxPooledViews + 1} {
		ld := &listDecoder{}
		if _, ok := ld.readViews([]byte(`[`+strings.Repeat(`{"path":"/home/user/a"},`, n-1)+`{"path":"/home/user/b"}]`), n, n); !ok {
			t.Fatalf("%d entries: not taken as a plain listing", n)
		}
		views := ld.viewBuf[:n]
		func() {
			defer func() {
				if r := recover(); r != "plain" {
					t.Fatalf("%d entries: recovered %v, want the callback's panic", n, r)
				}
			}()
			ld.handViews(views, func([]FileInfoView) { panic("plain") })
		}()
		if n > maxPooledViews {
			if ld.viewBuf != nil {
				t.Fatalf("%d entries: the decoder keeps a slice of %d views", n, cap(ld.viewBuf))
			}
			continue
		}
		for i, v := range ld.viewBuf[:cap(ld.viewBuf)] {
			if v.Path != nil {
				t.Fatalf("%d entries: after a panicking callback the decoder keeps view %d: %q", n, i, v.Path)
			}
		}
	}
}
