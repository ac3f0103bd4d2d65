package scrapetest

import (
	"strings"
	"testing"
)

func TestParseAndSum(t *testing.T) {
	in := `# TYPE req_total counter
req_total{route="a",code="200"} 3
req_total{route="a",code="500"} 1
req_total{route="b",code="200"} 2
# TYPE up gauge
up 1
# TYPE lat_seconds histogram
lat_seconds_bucket{route="a",le="1"} 4
lat_seconds_bucket{route="a",le="+Inf"} 4
lat_seconds_sum{route="a"} 0.5
lat_seconds_count{route="a"} 4
`
	s, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		{"req_total", nil, 6, true},
		{"req_total", []string{"route", "a"}, 4, true},
		{"req_total", []string{"route", "a", "code", "500"}, 1, true},
		{"req_total", []string{"route", "c"}, 0, false},
		{"up", nil, 1, true},
		{"lat_seconds_count", []string{"route", "a"}, 4, true},
		{"lat_seconds_sum", nil, 0.5, true},
		{"missing", nil, 0, false},
	} {
		got, ok := s.Sum(c.name, c.labels...)
		if got != c.want || ok != c.ok {
			t.Errorf("Sum(%s, %v) = %g %v, want %g %v", c.name, c.labels, got, ok, c.want, c.ok)
		}
	}
	if !strings.Contains(s.String(), `req_total{code="500",route="a"} 1`) {
		t.Fatalf("String:\n%s", s)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	if _, err := Parse(strings.NewReader("req_total{route=\"a\" 3\n")); err == nil {
		t.Fatal("a malformed exposition parsed")
	}
}
