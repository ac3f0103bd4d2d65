// Package jsonplain tells the bytes a JSON string holds as they are (RFC
// 8259 §7: no escape needed) from those that end the plain run, one byte
// or eight at a time, for the hand-written JSON scanners and writers of
// the data plane's hot paths (execd's listing decoder, envd's answer
// encoder). Two sets:
//
//   - Byte / Word: printable ASCII (0x20–0x7f) but the quote and the
//     backslash: what a decoder copies without looking further.
//   - HTMLByte / HTMLWord: Byte's set without <, > and &, which
//     encoding/json escapes by default (\u003c, \u003e, \u0026): what an
//     encoder that writes what encoding/json writes copies as it is.
//
// A Word function reports whether all eight bytes of a uint64 are in its
// set, in either byte order; each of its tests is the exact "has a zero
// byte" (or "a byte below 0x20") test of the word, whose borrows can only
// mark bytes above one that does hold, so the answer is exact
// (TestWordsAgainstTheTables compares them byte by byte).
package jsonplain

const ones, highs = 0x0101010101010101, 0x8080808080808080

var plain, plainHTML = func() (p, h [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		p[c] = c != '"' && c != '\\'
		h[c] = p[c] && c != '<' && c != '>' && c != '&'
	}
	return p, h
}()

// Byte reports whether c is printable ASCII other than '"' and '\\'.
func Byte(c byte) bool { return plain[c] }

// HTMLByte reports whether c is a Byte other than '<', '>' and '&'.
func HTMLByte(c byte) bool { return plainHTML[c] }

// Word reports whether all eight bytes of w are Byte: none is below
// 0x20, at or above 0x80, '"' or '\\'.
func Word(w uint64) bool {
	q, bs := w^'"'*ones, w^'\\'*ones
	return ((w-0x20*ones)&^w|(q-ones)&^q|(bs-ones)&^bs|w)&highs == 0
}

// HTMLWord reports whether all eight bytes of w are HTMLByte.
func HTMLWord(w uint64) bool {
	q, bs, amp := w^'"'*ones, w^'\\'*ones, w^'&'*ones
	// < (0x3c) and > (0x3e) differ in bit 1 only: one test for both.
	angle := (w ^ '<'*ones) &^ (2 * ones)
	return ((w-0x20*ones)&^w|(q-ones)&^q|(bs-ones)&^bs|(amp-ones)&^amp|(angle-ones)&^angle|w)&highs == 0
}
