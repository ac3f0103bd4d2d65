package dataplane

import (
	"bytes"
	"crypto/rand"
	"io"
	"mime"
	"mime/multipart"
	"testing"

	"github.com/sandgate/sandgate/internal/multipartstream"
)

// writeSizes records the size of every Write: the chunks Go's transport
// would send.
type writeSizes struct {
	bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(b []byte) (int, error) {
	w.sizes = append(w.sizes, len(b))
	return w.Buffer.Write(b)
}

// TestUploadBodyWriteTo: a multipart write of a 3 MiB file and a small
// one produces, through WriteTo (the path of a chunked upstream body),
// execd's body with both files whole, in writes of at most uploadChunk
// bytes; the framing before the first file goes out in a write of at
// most uploadFramingBuffer bytes.
func TestUploadBodyWriteTo(t *testing.T) {
	big := make([]byte, 3<<20+17)
	_, _ = rand.Read(big)
	files := [][2]string{{"/home/user/big.bin", string(big)}, {"/home/user/small.txt", "small\r\n"}}
	ct, body := multipartBody(t, files)
	_, params, _ := mime.ParseMediaType(ct)
	mr := multipartstream.NewReader(bytes.NewReader(body), params["boundary"], uploadChunk)
	next := func() (uploadFile, bool, *Error) {
		part, err := mr.NextPart()
		if err == io.EOF {
			return uploadFile{}, false, nil
		}
		if err != nil {
			t.Fatalf("NextPart: %v", err)
		}
		_, p, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		return uploadFile{target: p["filename"], body: part}, true, nil
	}
	up := newUploadBody(sdkUser{}, next)
	if e := up.start(); e != nil {
		t.Fatalf("start: %v", e)
	}
	var w writeSizes
	if _, err := up.WriteTo(&w); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if e, complete := up.stop(); e != nil || !complete {
		t.Fatalf("stop: %v, complete %v", e, complete)
	}
	for i, n := range w.sizes {
		if n > uploadChunk {
			t.Fatalf("write %d is %d bytes, over uploadChunk (%d)", i, n, uploadChunk)
		}
	}
	if w.sizes[0] > uploadFramingBuffer {
		t.Fatalf("the first write (framing) is %d bytes, over uploadFramingBuffer (%d)", w.sizes[0], uploadFramingBuffer)
	}
	_, params, _ = mime.ParseMediaType(up.contentType())
	got := map[string]string{}
	xr := multipart.NewReader(&w.Buffer, params["boundary"])
	for {
		p, err := xr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("execd's body: %v", err)
		}
		b, _ := io.ReadAll(p)
		if p.FormName() == "file" {
			got[p.FileName()] = string(b)
		}
	}
	if len(got) != 2 || got["big.bin"] != string(big) || got["small.txt"] != "small\r\n" {
		t.Fatalf("execd's body has %d files (big.bin %d bytes, small.txt %q)", len(got), len(got["big.bin"]), got["small.txt"])
	}
}
