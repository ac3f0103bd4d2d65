// Package argcount words the error of a sandgate Caddyfile directive given
// the wrong number of arguments. Caddy's own error for that ("wrong
// argument count or unexpected line ending after '<token>'") quotes a
// token of the line, which may be a secret an operator put there, and
// does not say what was wanted; this one names the directive, the count
// wanted and the count given, never an argument.
package argcount

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// Hint is the part of the error that explains why a line that looks right
// may count differently: Caddy expands {$NAME} environment placeholders
// before it splits the Caddyfile into arguments.
const Hint = "a {$NAME} environment placeholder that is unset or empty adds no argument, " +
	"and one whose value has spaces adds one argument per word"

// Check counts, without consuming them, the arguments left on the line at
// d's cursor (an unquoted "{" ends them) and returns nil when there are at
// least min and at most max of them (max < 0: no upper bound). Otherwise it
// returns d's error at that line:
//
//	<directive> wants <n> arguments, <syntax>, and got <m> (<Hint>)
//
// directive is the name the operator wrote (e.g. "token_key", or
// "credentials file" for a module's line); syntax (may be empty) names the
// wanted arguments, e.g. "<kid> <algorithm> <key file>". Call it with d
// at the directive's name, before reading its arguments.
func Check(d *caddyfile.Dispenser, directive string, min, max int, syntax string) error {
	got := d.CountRemainingArgs()
	if got >= min && (max < 0 || got <= max) {
		return nil
	}
	want := wanted(min, max)
	if syntax != "" {
		want += ", " + syntax + ","
	}
	return d.Errf("%s wants %s and got %d (%s)", directive, want, got, Hint)
}

// wanted words the range [min, max] of an argument count.
func wanted(min, max int) string {
	switch {
	case max < 0:
		return "at least " + plural(min)
	case min == max && min == 0:
		return "no argument"
	case min == max:
		return plural(min)
	case max == min+1:
		return fmt.Sprintf("%d or %s", min, plural(max))
	default:
		return fmt.Sprintf("%d to %s", min, plural(max))
	}
}

// plural is "1 argument" or "<n> arguments".
func plural(n int) string {
	if n == 1 {
		return "1 argument"
	}
	return fmt.Sprintf("%d arguments", n)
}
