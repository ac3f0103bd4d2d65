package dataplane

import (
	"compress/gzip"
	"fmt"
	"io"
)

// Defaults of the gzip upload bounds (Config.MaxDecompressedBytes,
// Config.MaxDecompressionRatio).
const (
	// DefaultMaxDecompressedBytes is the most bytes one gzip-encoded write
	// may decompress to: 1 GiB.
	DefaultMaxDecompressedBytes = 1 << 30
	// DefaultMaxDecompressionRatio is the most bytes one gzip-encoded write
	// may decompress to per compressed byte read, once it is past
	// DecompressionRatioFloor: 100 (ordinary text and logs compress 3 to 20
	// times; gzip itself cannot exceed about 1,032).
	DefaultMaxDecompressionRatio = 100
	// DecompressionRatioFloor is the decompressed size below which the
	// ratio is not checked (16 MiB), so that a small, very compressible
	// file (zeros, a sparse image) can still be written.
	DecompressionRatioFloor = 16 << 20
)

// tooLarge is the error a bounded decompression ends with; uploadBody turns it
// into WRITE_TOO_LARGE.
type tooLarge struct{ msg string }

func (e *tooLarge) Error() string { return e.msg }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// gunzipBounded decompresses a gzip body, failing with *tooLarge before
// it yields more than maxBytes, or more than ratio times the compressed
// bytes read once past DecompressionRatioFloor. Nothing beyond a bound is
// ever returned to the caller, so a refused write never reaches execd
// whole. The error of gzip.NewReader (not gzip) is returned as is.
func gunzipBounded(body io.Reader, maxBytes, ratio int64) (io.ReadCloser, error) {
	in := &countingReader{r: body}
	zr, err := gzip.NewReader(in)
	if err != nil {
		return nil, err
	}
	return &boundedGunzip{zr: zr, in: in, max: maxBytes, ratio: ratio}, nil
}

type boundedGunzip struct {
	zr    *gzip.Reader
	in    *countingReader
	out   int64
	max   int64
	ratio int64
	err   error
}

func (b *boundedGunzip) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Never read more than one byte past the size bound, so the check
	// below sees an overrun without handing it on.
	if room := b.max - b.out + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.zr.Read(p)
	out := b.out + int64(n)
	switch {
	case out > b.max:
		b.err = &tooLarge{fmt.Sprintf("the gzip body decompresses to more than %d bytes (max_decompressed_size)", b.max)}
		return 0, b.err
	case out > DecompressionRatioFloor && out > b.ratio*b.in.n:
		b.err = &tooLarge{fmt.Sprintf("the gzip body decompresses to more than %d times its compressed size (max_decompression_ratio)", b.ratio)}
		return 0, b.err
	}
	b.out = out
	return n, err
}

func (b *boundedGunzip) Close() error { return b.zr.Close() }
