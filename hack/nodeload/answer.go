package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Bounds on an API answer that readAnswer accepts.
const (
	maxAnswerHeaders = 100
	maxAnswerBody    = 1 << 20
)

// errAnswer is the class of an answer readAnswer does not read: not
// HTTP/1.x, no Content-Length (a chunked body), or over its bounds.
var errAnswer = errors.New("nodeload: unexpected API answer")

// readAnswer reads one HTTP/1.1 answer with a Content-Length body from br
// and returns its status, its body and whether the connection stays open
// (no "Connection: close"). It reads only what the internal API sends (a
// small JSON body whose length net/http states), at a fraction of
// http.ReadResponse's cost, which at 5,000 operations/s the load side's
// one CPU would pay.
func readAnswer(br *bufio.Reader) (status int, body []byte, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, err
	}
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	if !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(rest) < 3 {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errAnswer, line)
	}
	status, err = strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errAnswer, line)
	}
	length, keep := -1, true
	for i := 0; ; i++ {
		if i == maxAnswerHeaders {
			return 0, nil, false, fmt.Errorf("%w: over %d header lines", errAnswer, maxAnswerHeaders)
		}
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("%w: header line %q", errAnswer, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 || length > maxAnswerBody {
				return 0, nil, false, fmt.Errorf("%w: Content-Length %q", errAnswer, value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, false, fmt.Errorf("%w: Transfer-Encoding %q", errAnswer, value)
		}
	}
	if length < 0 {
		return 0, nil, false, fmt.Errorf("%w: no Content-Length", errAnswer)
	}
	body = make([]byte, length)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, nil, false, err
	}
	return status, body, keep, nil
}
