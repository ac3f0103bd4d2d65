package daemon

import (
	"os"
	"runtime/debug"
	"testing"
)

// gcPercent reads GOGC without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestStartupGCLowersGOGCUntilEveryClusterReplayed(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	g := newStartupGC()
	g.lower("a")
	g.lower("b")
	if p := gcPercent(); p != startupGCPercent {
		t.Fatalf("GOGC during the replay = %d, want %d", p, startupGCPercent)
	}
	g.replayed("a")
	if p := gcPercent(); p != startupGCPercent {
		t.Fatalf("GOGC after one of two clusters replayed = %d, want %d", p, startupGCPercent)
	}
	g.replayed("b")
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC after every cluster replayed = %d, want 100 (restored)", p)
	}
	// A replay ending again (its timer) and the shutdown's restore
	// change nothing once restored.
	debug.SetGCPercent(80)
	g.replayed("a")
	g.restore()
	if p := gcPercent(); p != 80 {
		t.Fatalf("GOGC changed after it was restored: %d, want 80", p)
	}
}

func TestStartupGCLowersAgainForANewLeadersReplay(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	g := newStartupGC()
	g.lower("a")
	g.replayed("a")
	g.lower("a") // elected later: the controllers' replay
	if p := gcPercent(); p != startupGCPercent {
		t.Fatalf("GOGC during a new leader's replay = %d, want %d", p, startupGCPercent)
	}
	// The first lowering's bound ending does not end the second's.
	g.end("a", 1)
	if p := gcPercent(); p != startupGCPercent {
		t.Fatalf("GOGC after an earlier replay's bound = %d, want %d", p, startupGCPercent)
	}
	g.end("a", 2)
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC after the replay's own bound = %d, want 100", p)
	}
}

func TestStartupGCLeavesTheOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "200")
	before := debug.SetGCPercent(200)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	g := newStartupGC()
	g.lower("a")
	if p := gcPercent(); p != 200 {
		t.Fatalf("GOGC with the environment's GOGC=200 = %d, want 200", p)
	}
	g.replayed("a")
	if p := gcPercent(); p != 200 {
		t.Fatalf("GOGC after the replay = %d, want 200", p)
	}
}

// TestStartupGCFollowsTheOperatorsGOGC: the replay's GOGC is lowered when
// the environment has no GOGC or an empty one (the runtime's default is in
// force), and an explicit GOGC (200, off) is left alone, the rule of the
// gateway's policy (gcpolicy.OperatorGOGC).
func TestStartupGCFollowsTheOperatorsGOGC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     *string // nil: unset
		runtime int     // what the runtime made of the environment at start
		lowered bool
	}{
		{"unset", nil, 100, true},
		{"empty", ptr(""), 100, true},
		{"200", ptr("200"), 200, false},
		{"off", ptr("off"), -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", "")
			if tc.env == nil {
				if err := os.Unsetenv("GOGC"); err != nil { // t.Setenv restores it
					t.Fatal(err)
				}
			} else {
				t.Setenv("GOGC", *tc.env)
			}
			before := debug.SetGCPercent(tc.runtime)
			t.Cleanup(func() { debug.SetGCPercent(before) })
			g := newStartupGC()
			g.lower("a")
			want := tc.runtime
			if tc.lowered {
				want = startupGCPercent
			}
			if p := gcPercent(); p != want {
				t.Fatalf("GOGC during the replay = %d, want %d", p, want)
			}
			g.replayed("a")
			if p := gcPercent(); p != tc.runtime {
				t.Fatalf("GOGC after the replay = %d, want %d", p, tc.runtime)
			}
		})
	}
}

func ptr(s string) *string { return &s }
