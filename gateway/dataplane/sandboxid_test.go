package dataplane

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestValidSandboxID: validSandboxID agrees with the DNS-1123 label
// expression it stands for, on the edges and on random strings over an
// alphabet that holds every class the expression tells apart.
func TestValidSandboxID(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	for _, id := range []string{"", "a", "-", "a-", "-a", "a-b", "sbxbench", "0", strings.Repeat("a", 63), strings.Repeat("a", 64),
		"a" + strings.Repeat("-", 61) + "b", "A", "a_b", "a.b", "a\nb", "a\x00", "é", "a b"} {
		if got := validSandboxID(id); got != re.MatchString(id) {
			t.Fatalf("%q: validSandboxID %v", id, got)
		}
	}
	rnd := rand.New(rand.NewPCG(7, 8))
	const alphabet = "az09-AZ_.\n \x00\xff"
	for range 200_000 {
		b := make([]byte, rnd.IntN(70))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
			if rnd.IntN(3) > 0 {
				b[i] = "abcxyz0189-"[rnd.IntN(11)]
			}
		}
		if got := validSandboxID(string(b)); got != re.MatchString(string(b)) {
			t.Fatalf("%q: validSandboxID %v", b, got)
		}
	}
}
