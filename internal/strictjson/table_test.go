package strictjson_test

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/internal/strictjson/strictjsontest"
)

// TestCheckCallersTable: strictjsontest's table, which Check's callers
// test their answers with, says what Check does.
func TestCheckCallersTable(t *testing.T) {
	for _, b := range strictjsontest.Refused() {
		if err := strictjson.Check(b.Body); !errors.Is(err, b.Class) || err.Error() != b.Text {
			t.Errorf("%s: strictjson.Check(%q) = %v; the table says %q (%v)", b.Name, b.Body, err, b.Text, b.Class)
		}
	}
	for _, b := range strictjsontest.NotObjects() {
		if err := strictjson.Check(b); err != nil {
			t.Errorf("strictjson.Check(%s) = %v", b, err)
		}
	}
}
