package argcount

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestCheck checks the count of a directive's arguments on the first line
// of a Caddyfile, with d at the directive's name: the ranges accepted,
// the wording of the wanted count, that a "{" ends the arguments, that
// the cursor does not move, and that no argument is quoted.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		min, max   int
		syntax     string
		want       string // "" for no error
	}{
		{"none wanted, none given", "d", 0, 0, "", ""},
		{"none wanted, one given", "d s3cr3t", 0, 0, "", "d wants no argument and got 1"},
		{"one wanted", "d a", 1, 1, "<a>", ""},
		{"one wanted, none given", "d", 1, 1, "<a>", "d wants 1 argument, <a>, and got 0"},
		{"a block ends the arguments", "d a {\n}", 1, 1, "<a>", ""},
		{"a block is no argument", "d {\n}", 1, 1, "", "d wants 1 argument and got 0"},
		{"three wanted, four given", "d s3cr3t s3cr3t s3cr3t s3cr3t", 3, 3, "<a> <b> <c>", "d wants 3 arguments, <a> <b> <c>, and got 4"},
		{"range", "d a b c", 3, 4, "", ""},
		{"range, too few", "d a", 3, 4, "", "d wants 3 or 4 arguments and got 1"},
		{"wide range, too many", "d a b c d", 1, 3, "", "d wants 1 to 3 arguments and got 4"},
		{"no upper bound", "d a b c d e", 1, -1, "", ""},
		{"no upper bound, none given", "d", 1, -1, "<a>...", "d wants at least 1 argument, <a>..., and got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := caddyfile.Tokenize([]byte(tc.line), "Caddyfile")
			if err != nil {
				t.Fatal(err)
			}
			d := caddyfile.NewDispenser(tokens)
			d.Next()
			err = Check(d, "d", tc.min, tc.max, tc.syntax)
			if d.Val() != "d" {
				t.Errorf("cursor on %q after Check; want it still on the directive", d.Val())
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check: nil; want %q", tc.want)
			}
			want := tc.want + " (" + Hint + "), at Caddyfile:1"
			if err.Error() != want {
				t.Errorf("Check: %q\nwant     %q", err, want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("Check: %q quotes an argument", err)
			}
		})
	}
}
