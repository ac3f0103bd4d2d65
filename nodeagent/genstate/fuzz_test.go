package genstate

import (
	"errors"
	"os"
	"testing"

	"github.com/sandgate/sandgate/nodeagent/lease"
)

// FuzzRecords writes arbitrary bytes as each record of a generation and
// reads them back: a record is either refused with one of the package's
// error classes or accepted with a binding to that very generation; no
// input panics, and nothing is written by reading.
func FuzzRecords(f *testing.F) {
	d, err := Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"schema":1,"installation_id":"` + inst + `","generation":7,"specification_digest":"` + digest + `","source":"s","path":"7.d","import_started":false}`,
		`{"schema":1,"installation_id":"` + inst + `","generation":7,"specification_digest":"` + digest + `","native_cleanup_done":true}`,
		`{"schema":1,"installation_id":"` + inst + `","generation":7,"specification_digest":"` + digest + `","source":"s","path":"7.d","provider":"docker","image_ref":"a:1","image_id":"` + imgID + `","files":[{"name":"m","kind":"manifest","sha256":"` + digest + `","size":1}]}`,
		`{"schema":1,"generation":7,"x":null}`, `[]`, `{"schema":1}{}`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range []Record{RecordPlan, RecordConfig, RecordJournal, RecordDropped} {
			// Plain writes: the fsyncs of WriteAtomic are not what is fuzzed.
			if err := os.WriteFile(d.RecordPath(7, r), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		l := d.Inspect(7)
		check := func(name string, bd *Binding, err error) {
			switch {
			case err != nil && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrMismatch) && !errors.Is(err, lease.ErrInvalid):
				t.Fatalf("%s: error %v of no known class", name, err)
			case err == nil && bd != nil && (bd.Generation != 7 || !bd.valid()):
				t.Fatalf("%s accepted with binding %+v", name, bd)
			}
		}
		check("plan", planB(l.Plan), l.PlanErr)
		check("config", cfgB(l.Config), l.ConfigErr)
		check("journal", jB(l.Journal), l.JournalErr)
		check("dropped", dB(l.Dropped), l.DroppedErr)
	})
}

func planB(p *Plan) *Binding {
	if p == nil {
		return nil
	}
	return &p.Binding
}

func cfgB(c *Config) *Binding {
	if c == nil {
		return nil
	}
	return &c.Binding
}

func jB(j *Journal) *Binding {
	if j == nil {
		return nil
	}
	return &j.Binding
}

func dB(x *Dropped) *Binding {
	if x == nil {
		return nil
	}
	return &x.Binding
}
