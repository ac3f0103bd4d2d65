package gctrace

import (
	"bytes"
	"testing"
	"time"
)

// TestClock: the wall-clock length of a collection is the sum of the three
// "ms clock" phases of a Go 1.26 gctrace line; other lines are not
// collections.
func TestClock(t *testing.T) {
	for line, want := range map[string]time.Duration{
		"gc 12 @34.567s 2%: 0.11+45+0.020 ms clock, 0.22+1.0/40/0+0.04 ms cpu, 300->310->70 MB, 350 MB goal, 0 MB stacks, 0 MB globals, 1 P":     45130 * time.Microsecond,
		"gc 12 @3.456s 2%: 0.021+4.5+0.034 ms clock, 0.042+1.2/2.1/0+0.068 ms cpu, 180->182->95 MB, 190 MB goal, 0 MB stacks, 0 MB globals, 2 P": 4555 * time.Microsecond,
	} {
		if d, ok := Clock(line); !ok || d != want {
			t.Fatalf("Clock = %s, %v; want %s, true", d, ok, want)
		}
	}
	for _, line := range []string{"", "gc", "gcx 1 @0.1s 0%: 1+1+1 ms clock", "gc 1 @0.1s 0%: 1+x+1 ms clock", `{"level":"warn"}`, `{"msg":"corectl serving"}`} {
		if _, ok := Clock(line); ok {
			t.Errorf("Clock(%q) took it for a collection", line)
		}
	}
}

// TestWatchKeepsWindowsAndPassesOtherLines: a gctrace line split over
// writes gives one window ending when its last byte arrived; other lines
// go on to Next, and the gctrace lines too only with KeepGC.
func TestWatchKeepsWindowsAndPassesOtherLines(t *testing.T) {
	for _, keep := range []bool{false, true} {
		var out bytes.Buffer
		w := &Watch{Next: &out, KeepGC: keep}
		before := time.Now().UnixNano()
		for _, p := range []string{"hello\ngc 1 @0.5s 1%: 1+", "2+3 ms clock, 1 P\nbye", "\n"} {
			if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		ws := w.Snapshot()
		if len(ws) != 1 || ws[0].End-ws[0].Start != int64(6*time.Millisecond) || ws[0].End < before {
			t.Fatalf("windows %v; want one of 6 ms ending after %d", ws, before)
		}
		want := "hello\nbye\n"
		if keep {
			want = "hello\ngc 1 @0.5s 1%: 1+2+3 ms clock, 1 P\nbye\n"
		}
		if out.String() != want {
			t.Errorf("KeepGC %v: passed on %q, want %q", keep, out.String(), want)
		}
	}
}

// TestOverlaps: an interval meets a window when they share an instant,
// ends included.
func TestOverlaps(t *testing.T) {
	ws := []Window{{Start: 10, End: 20}, {Start: 40, End: 50}}
	for _, c := range []struct {
		from, to int64
		want     bool
	}{{0, 9, false}, {0, 10, true}, {20, 30, true}, {21, 39, false}, {45, 46, true}, {51, 60, false}} {
		if got := Overlaps(ws, c.from, c.to); got != c.want {
			t.Errorf("Overlaps(%d, %d) = %v", c.from, c.to, got)
		}
	}
}
