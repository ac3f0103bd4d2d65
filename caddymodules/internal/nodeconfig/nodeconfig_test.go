package nodeconfig

import "testing"

// TestSiteConflict compares an api address with a Caddy HTTP server's
// listen addresses: the same port on an overlapping host conflicts,
// another port, host or network does not.
func TestSiteConflict(t *testing.T) {
	for _, tc := range []struct {
		api    string
		listen []string
		want   string // "" when none conflicts
	}{
		{"127.0.0.1:30086", []string{":30086"}, ":30086"},
		{":30086", []string{"127.0.0.1:30086"}, "127.0.0.1:30086"},
		{"127.0.0.1:30086", []string{"0.0.0.0:30086"}, "0.0.0.0:30086"},
		{"127.0.0.1:30086", []string{"[::]:30086"}, "[::]:30086"},
		{"127.0.0.1:30086", []string{"127.0.0.1:30086"}, "127.0.0.1:30086"},
		{"127.0.0.1:30086", []string{"tcp4/127.0.0.1:30086"}, "tcp4/127.0.0.1:30086"},
		{"tcp6/[::1]:30086", []string{"[::1]:30086"}, "[::1]:30086"},
		{"[::1]:30086", []string{":30086"}, ":30086"},
		{"127.0.0.1:30086", []string{"[::ffff:127.0.0.1]:30086"}, "[::ffff:127.0.0.1]:30086"},
		{"10.0.0.5:30086", []string{"127.0.0.1:443", ":30080-30090"}, ":30080-30090"},
		{"Gateway.internal:30086", []string{"gateway.internal:30086"}, "gateway.internal:30086"},
		// No conflict.
		{"127.0.0.1:30087", []string{":30086", "127.0.0.1:443"}, ""},
		{"127.0.0.1:30086", []string{"10.0.0.5:30086"}, ""},
		{"127.0.0.1:30086", []string{"[::1]:30086"}, ""},
		{"127.0.0.1:30086", []string{"udp/:30086"}, ""},                 // HTTP/3
		{"127.0.0.1:30086", []string{"unix//run/caddy.sock"}, ""},       // not TCP
		{"127.0.0.1:30086", []string{"localhost:30086"}, ""},            // names are not resolved
		{"127.0.0.1:30086", []string{"not an address:x:y", ":443"}, ""}, // skipped
		{"127.0.0.1:30086", nil, ""},
	} {
		api, err := parseAPIAddress(tc.api)
		if err != nil {
			t.Fatalf("%s: %v", tc.api, err)
		}
		got, ok := SiteConflict(api, tc.listen)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("SiteConflict(%s, %q) = %q, %v; want %q", tc.api, tc.listen, got, ok, tc.want)
		}
	}
}

// TestParseAPIAddress: an IPv6 host, a tcp4/tcp6 network and a host
// name parse; a scheme, a path, another network, a range, no port and
// port 0 are refused, each by its own error.
func TestParseAPIAddress(t *testing.T) {
	for _, s := range []string{"[::1]:30087", "tcp6/[::1]:30087", "tcp4/127.0.0.1:30087", "gateway.internal:30087", ":30087"} {
		if _, err := parseAPIAddress(s); err != nil {
			t.Errorf("parseAPIAddress(%q): %v", s, err)
		}
	}
	for s, want := range map[string]string{
		"127.0.0.1:0":              `listen "127.0.0.1:0": port 0 is not allowed (the API needs a port its clients know)`,
		":0":                       `listen ":0": port 0 is not allowed`,
		"127.0.0.1":                `listen "127.0.0.1": needs a port (host:port)`,
		"http://127.0.0.1:30087":   `listen "http://127.0.0.1:30087": a host:port, without a scheme or a path`,
		"127.0.0.1:30087/internal": `listen "127.0.0.1:30087/internal": a host:port, without a scheme or a path`,
		"[::1]:30087/":             `listen "[::1]:30087/": a host:port, without a scheme or a path`,
		"udp/127.0.0.1:30087":      `listen "udp/127.0.0.1:30087": the network must be tcp, not udp`,
		"[::1]:30087-30088":        `listen "[::1]:30087-30088": must be one port, not a range`,
	} {
		_, err := parseAPIAddress(s)
		if err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("parseAPIAddress(%q) = %v; want an error starting %q", s, err, want)
		}
	}
}
