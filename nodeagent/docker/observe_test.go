package docker

import (
	"io"
	"runtime"
	"strings"
	"testing"
)

// endless is an answer that never ends: `{"networks":{"a":{},"a":{},…`.
type endless struct{ off int }

func (e *endless) Read(p []byte) (int, error) {
	const head, rep = `{"networks":{`, `"a":{},`
	for i := range p {
		if e.off < len(head) {
			p[i] = head[e.off]
		} else {
			p[i] = rep[(e.off-len(head))%len(rep)]
		}
		e.off++
	}
	return len(p), nil
}

// TestDecodeStatsBounded: a stats answer is read up to maxStatsAnswer
// bytes and no further (an endless one is refused with an error naming
// the bound, the heap growing by about the bound only); a sample within
// it decodes; what is not a stats object is an error.
func TestDecodeStatsBounded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := decodeStats(&endless{})
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "stats answer over 1048576 bytes") {
		t.Fatalf("endless answer: %v, want the bound's error", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8*maxStatsAnswer {
		t.Fatalf("reading the endless answer allocated %d bytes, want about the %d bound", grew, maxStatsAnswer)
	}
	st, err := decodeStats(strings.NewReader(`{"read":"2026-12-06T08:00:00Z","cpu_stats":{"online_cpus":2}}`))
	if err != nil || st.Read.Year() != 2026 || st.CPUStats.OnlineCPUs != 2 {
		t.Fatalf("sample: %+v %v", st, err)
	}
	if _, err := decodeStats(strings.NewReader(`[1,2]`)); err == nil {
		t.Fatal("an array decoded as a stats answer")
	}
	if _, err := decodeStats(io.LimitReader(strings.NewReader(`{"read":`), 8)); err == nil {
		t.Fatal("a cut answer decoded")
	}
}
