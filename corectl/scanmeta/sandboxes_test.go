package scanmeta

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	kjson "sigs.k8s.io/json"
)

func TestLifecycleTagIsTheAnnotation(t *testing.T) {
	f, _ := reflect.TypeOf(sandboxItem{}.Metadata.Annotations).FieldByName("Lifecycle")
	if tag := f.Tag.Get("json"); tag != v1alpha1.AnnotationLifecycle {
		t.Fatalf("the lifecycle field's tag is %q, want %q", tag, v1alpha1.AnnotationLifecycle)
	}
}

// scanView is what the orphan scan reads of a BatchSandbox (and
// sandbox.From, deleteSandbox): the fields SandboxPage keeps.
type scanView struct {
	Name, Namespace, UID    string
	Created                 string
	Deleted                 string
	Lifecycle               string
	HasLifecycle            bool
	TemplateLabels          map[string]string
	TemplateLabelsMalformed bool
}

func view(c *sandbox.Cached) scanView {
	v := scanView{Name: c.Name, Namespace: c.Namespace, UID: string(c.UID), Created: c.CreationTimestamp.UTC().String()}
	if c.DeletionTimestamp != nil {
		v.Deleted = c.DeletionTimestamp.UTC().String()
	}
	v.Lifecycle, v.HasLifecycle = sandbox.Annotation(c, v1alpha1.AnnotationLifecycle)
	v.TemplateLabels, v.TemplateLabelsMalformed = c.Spec.Template.Metadata.Labels, c.Spec.Template.Metadata.Malformed
	return v
}

// typedViews decodes b as controller-runtime's client decodes a
// sandbox.CachedList (sigs.k8s.io/json, case-sensitive), the scan's
// reading before SandboxPage.
func typedViews(b []byte) ([]scanView, string, error) {
	var l sandbox.CachedList
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, &l); err != nil {
		return nil, "", err
	}
	var out []scanView
	for _, c := range l.Items {
		if c == nil {
			c = &sandbox.Cached{}
		}
		out = append(out, view(c))
	}
	return out, l.Continue, nil
}

func pageViews(p *SandboxPage) []scanView {
	var out []scanView
	for i := range p.Items {
		out = append(out, view(&p.Items[i]))
	}
	return out
}

const samplePage = `{"apiVersion":"sandbox.opensandbox.io/v1alpha1","kind":"BatchSandboxList","metadata":{"resourceVersion":"9","continue":"next"},
"items":[{"apiVersion":"sandbox.opensandbox.io/v1alpha1","kind":"BatchSandbox","metadata":{"name":"a","namespace":"ns","uid":"u1",
"creationTimestamp":"2026-12-06T01:02:03Z","deletionTimestamp":"2026-12-06T01:02:04Z","labels":{"x":"y"},
"annotations":{"network.sandgate.io/lifecycle":"Deleting","other":"o"},"managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}]},
"spec":{"replicas":1,"template":{"metadata":{"labels":{"sandgate.io/allocation-id":"al1","k":"v"}},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1"}}}]}}},
"status":{"ready":1}},
{"metadata":{"name":"b","namespace":"ns","uid":"u2","creationTimestamp":"2026-12-06T01:02:03Z","annotations":{"network.sandgate.io/lifecycle":"Ready"}},
"spec":{"template":{"metadata":{"labels":{"sandgate.io/allocation-id":7}}}}},
{"metadata":{"name":"c","annotations":{"network.sandgate.io/lifecycle":null}},"spec":{"template":{"metadata":null}}},
{"metadata":{"name":"d"}}]}`

func TestDecodeSandboxesAsTheTypedList(t *testing.T) {
	want, wantCont, err := typedViews([]byte(samplePage))
	if err != nil {
		t.Fatal(err)
	}
	var p SandboxPage
	for range 2 { // the second decode reuses the first's memory
		if err := DecodeSandboxes([]byte(samplePage), &p); err != nil {
			t.Fatal(err)
		}
		if got := pageViews(&p); p.Continue != wantCont || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeSandboxes:\n got %q %+v\nwant %q %+v", p.Continue, got, wantCont, want)
		}
	}
	if len(want) != 4 || !want[0].HasLifecycle || want[0].Deleted == "" || !want[1].TemplateLabelsMalformed || !want[2].HasLifecycle {
		t.Fatalf("the sample does not hold what it is meant to: %+v", want)
	}
	// A shorter page after a longer one keeps nothing of it.
	if err := DecodeSandboxes([]byte(`{"items":[{"metadata":{"name":"z"}}]}`), &p); err != nil {
		t.Fatal(err)
	}
	if got := pageViews(&p); p.Continue != "" || !reflect.DeepEqual(got, []scanView{{Name: "z", Created: want[3].Created}}) {
		t.Fatalf("the next page: %q %+v", p.Continue, got)
	}
}

func TestDecodeSandboxesRefusesWhatTheTypedListRefuses(t *testing.T) {
	for _, b := range []string{`[`, `{"items":{}}`, `{"items":[{"spec":{"template":"x"}}]}`, `{"metadata":{"continue":1}}`} {
		if _, _, err := typedViews([]byte(b)); err == nil {
			t.Fatalf("the typed list decodes %s", b)
		}
		var p SandboxPage
		if err := DecodeSandboxes([]byte(b), &p); err == nil || !strings.Contains(err.Error(), "batchsandboxes list") {
			t.Errorf("DecodeSandboxes(%s) = %v, want an error naming the list", b, err)
		}
	}
}

// FuzzDecodeSandboxes: every BatchSandboxList JSON that decodes as a
// sandbox.CachedList (the scan's reading before) decodes with
// DecodeSandboxes, into a page that held another page before, to the same
// values the scan reads, and the same continue token.
func FuzzDecodeSandboxes(f *testing.F) {
	f.Add([]byte(samplePage))
	f.Add([]byte(`{"items":[{"metadata":{"name":"a","annotations":{"network.sandgate.io/lifecycle":"Ready","network.sandgate.io/lifecycle":"Creating"}}}]}`))
	f.Add([]byte(`{"items":[null,{"metadata":{"Name":"a","name":"b","deletionTimestamp":null}}]}`))
	f.Add([]byte(`{"items":[{"metadata":{"creationTimestamp":"2026-12-06T01:02:03\u005a","deletionTimestamp":"2026-12-06T01:02:03+01:00","annotations":{"network.sandgate.io/lifecycle":"Re\u0061dy\u00e9"}}},{"metadata":{"creationTimestamp":null}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantCont, err := typedViews(b)
		if err != nil {
			return
		}
		var p SandboxPage
		if err := DecodeSandboxes([]byte(samplePage), &p); err != nil {
			t.Fatal(err)
		}
		if err := DecodeSandboxes(b, &p); err != nil {
			t.Fatalf("the typed list decodes, DecodeSandboxes: %v", err)
		}
		if got := pageViews(&p); p.Continue != wantCont || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeSandboxes:\n got %q %+v\nwant %q %+v", p.Continue, got, wantCont, want)
		}
	})
}

// zeros is an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestReadPageIsBounded: a page's answer is read up to its bound (the
// page's object limit times etcd's object limit, plus 1 MiB) and no
// further; one byte more is an error naming the list.
func TestReadPageIsBounded(t *testing.T) {
	most := int64(2*maxObjectBytes + 1<<20)
	var buf bytes.Buffer
	if err := readPage(&buf, io.LimitReader(zeros{}, most), "batchsandboxes", 2); err != nil || int64(buf.Len()) != most {
		t.Fatalf("an answer of exactly the bound: %v, %d bytes read", err, buf.Len())
	}
	err := readPage(&buf, zeros{}, "batchsandboxes", 2)
	if err == nil || !strings.Contains(err.Error(), "batchsandboxes list answer is larger than") {
		t.Fatalf("an endless answer: %v", err)
	}
	if int64(buf.Len()) > most+1 {
		t.Fatalf("an endless answer was read to %d bytes, bound %d", buf.Len(), most)
	}
	// A list without a limit is bounded as a page of one.
	if err := readPage(&buf, io.LimitReader(zeros{}, maxObjectBytes+1<<20+1), "ingresses", 0); err == nil {
		t.Fatal("an answer over the bound of a page of one was read")
	}
}
