package realpeers_test

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestTwoStreamsOnOneProcessAgainstTheRealExecd: with extended_operations,
// a background command's Start stream and a Connect stream beside it both
// get its output (JS SDK 2.51's commands.run with background and
// commands.connect, sdk.mjs "twoStreams", three rounds), against each real
// execd. The Start stream used to remove the process's output files as
// soon as it saw the end, and the Connect stream then ended with exit 0
// and no output, or with FILE_NOT_FOUND.
func TestTwoStreamsOnOneProcessAgainstTheRealExecd(t *testing.T) {
	requireTier(t)
	for _, version := range execdVersions {
		t.Run("execd-"+version, func(t *testing.T) {
			w.startExecd(t, version)
			id := w.createSandbox(t)
			var r struct {
				Rounds []struct{ Start, Connect sdkAttempt }
			}
			runScenario(t, w.extended, "node", []string{"sdk.mjs", "twoStreams"}, filepath.Join(w.root, "integration/js"), &r,
				"E2B_PACKAGE=e2b-2.51.0", "SANDBOX_ID="+id)
			if len(r.Rounds) != 3 {
				t.Fatalf("rounds %+v, want 3", r.Rounds)
			}
			for i, round := range r.Rounds {
				want := fmt.Sprintf("X%d\n", i)
				wantValue(t, fmt.Sprintf("round %d, the Start stream", i), round.Start, want)
				wantValue(t, fmt.Sprintf("round %d, the Connect stream", i), round.Connect, want)
			}
		})
	}
}
