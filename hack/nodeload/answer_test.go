package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadAnswerFromNetHTTP: readAnswer reads net/http's answers as the
// internal API sends them (a small body, its length stated) over one
// kept-alive connection, sees "Connection: close", and refuses a chunked
// body with errAnswer.
func TestReadAnswerFromNetHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/chunked":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush() // the length is not known: chunked
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"outcome":"success"}` + "\n"))
	}))
	defer srv.Close()
	nc, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	ask := func(path string) (int, []byte, bool, error) {
		body := `{"x":1}`
		if _, err := nc.Write([]byte("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n" + body)); err != nil {
			t.Fatal(err)
		}
		return readAnswer(br)
	}
	for range 3 {
		status, body, keep, err := ask("/")
		if err != nil || status != http.StatusConflict || string(body) != `{"outcome":"success"}`+"\n" || !keep {
			t.Fatalf("answer %d %q keep %v, %v", status, body, keep, err)
		}
	}
	if _, _, err := readAnswerOf(t, srv, "/chunked"); !errors.Is(err, errAnswer) {
		t.Fatalf("chunked answer: %v", err)
	}
	if keep, _, err := readAnswerOf(t, srv, "/close"); err != nil || keep {
		t.Fatalf("Connection: close answer: keep %v, %v", keep, err)
	}
}

// readAnswerOf asks path on a connection of its own.
func readAnswerOf(t *testing.T, srv *httptest.Server, path string) (keep bool, body []byte, err error) {
	t.Helper()
	nc, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_, body, keep, err = readAnswer(bufio.NewReader(nc))
	return keep, body, err
}

// TestReadAnswerRefusesMalformed: what is not an HTTP/1.x answer within
// the bounds is errAnswer.
func TestReadAnswerRefusesMalformed(t *testing.T) {
	for _, in := range []string{
		"SPDY/3 200 OK\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", maxAnswerHeaders+1) + "\r\n",
	} {
		if _, _, _, err := readAnswer(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, errAnswer) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// answerBytes is an internal API answer as Caddy sends it.
const answerBytes = "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Type: application/json\r\nServer: Caddy\r\n" +
	"Date: Sat, 05 Dec 2026 01:40:00 GMT\r\nContent-Length: 22\r\n\r\n{\"outcome\":\"success\"}\n"

// BenchmarkReadAnswer and BenchmarkReadResponse compare readAnswer with
// net/http's parser on one answer.
func BenchmarkReadAnswer(b *testing.B) {
	r := strings.NewReader(answerBytes)
	br := bufio.NewReader(r)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(answerBytes)
		br.Reset(r)
		if _, _, _, err := readAnswer(br); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadResponse(b *testing.B) {
	r := strings.NewReader(answerBytes)
	br := bufio.NewReader(r)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(answerBytes)
		br.Reset(r)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}
