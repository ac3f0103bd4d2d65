package jsonplain

import (
	"math/rand/v2"
	"testing"
)

// TestWordsAgainstTheTables compares Word with Byte and HTMLWord with
// HTMLByte on each of a word's eight bytes: every byte value at every
// position of a plain word, every pair of two special bytes, and
// 1,000,000 random words (and their ASCII halves).
func TestWordsAgainstTheTables(t *testing.T) {
	for _, c := range []struct {
		name string
		word func(uint64) bool
		byte func(byte) bool
	}{{"Word", Word, Byte}, {"HTMLWord", HTMLWord, HTMLByte}} {
		t.Run(c.name, func(t *testing.T) {
			want := func(w uint64) bool {
				for i := range 8 {
					if !c.byte(byte(w >> (8 * i))) {
						return false
					}
				}
				return true
			}
			check := func(w uint64) {
				if got := c.word(w); got != want(w) {
					t.Fatalf("%s(%#016x) = %v, want %v", c.name, w, got, !got)
				}
			}
			const plain = 0x6162636465666768 // "hgfedcba"
			for pos := range 8 {
				for b := range 256 {
					check(plain&^(0xff<<(8*pos)) | uint64(b)<<(8*pos))
				}
			}
			specials := []uint64{0x00, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x25, 0x26, 0x27, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xff}
			for p1 := range 8 {
				for p2 := range 8 {
					for _, a := range specials {
						for _, b := range specials {
							w := plain&^(0xff<<(8*p1)) | a<<(8*p1)
							w = w&^(0xff<<(8*p2)) | b<<(8*p2)
							check(w)
						}
					}
				}
			}
			r := rand.New(rand.NewPCG(1, 2))
			for range 1_000_000 {
				w := r.Uint64()
				check(w)
				check(w &^ highs) // ASCII only: the other tests decide
			}
		})
	}
}

// TestSets: the sets are what the package says, byte by byte.
func TestSets(t *testing.T) {
	for c := range 256 {
		b := byte(c)
		wantPlain := c >= 0x20 && c < 0x80 && b != '"' && b != '\\'
		if Byte(b) != wantPlain {
			t.Errorf("Byte(%#02x) = %v", c, Byte(b))
		}
		if HTMLByte(b) != (wantPlain && b != '<' && b != '>' && b != '&') {
			t.Errorf("HTMLByte(%#02x) = %v", c, HTMLByte(b))
		}
	}
}
