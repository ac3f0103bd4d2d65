package scanmeta

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
)

// SandboxPage is one page of BatchSandboxes as the orphan scan reads them
// (Lister.SandboxPage), reused from page to page: Items and Continue are
// the page's until the next call.
type SandboxPage struct {
	// Items are the page's BatchSandboxes, each holding only what the scan
	// decides on: name, namespace, UID, creation and deletion time, of the
	// annotations only v1alpha1.AnnotationLifecycle (the map shared by
	// every item with the same value: read only), and
	// spec.template.metadata (its labels, or Malformed as
	// sandbox.CachedTemplateMeta decodes it).
	Items []sandbox.Cached
	// Continue is the list's continue token ("" on the last page).
	Continue string

	list      sandboxList
	lifecycle map[string]map[string]string
}

// sandboxList is the part of a BatchSandboxList's JSON the scan reads.
type sandboxList struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []sandboxItem `json:"items"`
}

// sandboxItem is the part of a BatchSandbox's JSON the scan reads; the
// rest (managed fields, labels, other annotations, the pod template's
// spec, status) is skipped as the JSON is read. Its spec path is the one
// sandbox.Cached decodes, with the same template metadata type.
type sandboxItem struct {
	Metadata struct {
		Name              string     `json:"name"`
		Namespace         string     `json:"namespace"`
		UID               types.UID  `json:"uid"`
		CreationTimestamp timestamp  `json:"creationTimestamp"`
		DeletionTimestamp *timestamp `json:"deletionTimestamp"`
		Annotations       struct {
			// Lifecycle is v1alpha1.AnnotationLifecycle
			// (TestLifecycleTagIsTheAnnotation).
			Lifecycle annotation `json:"network.sandgate.io/lifecycle"`
		} `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata sandbox.CachedTemplateMeta `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
}

// annotation is one annotation's value and whether the object has it (a
// JSON null counts as present and "", as it does decoded into a
// map[string]string).
type annotation struct {
	value string
	set   bool
}

// UnmarshalJSON decodes a string or null.
func (a *annotation) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*a = annotation{set: true}
		return nil
	}
	s, ok := plainString(b)
	if !ok {
		if err := kjson.UnmarshalCaseSensitivePreserveInts(b, &s); err != nil {
			return err
		}
	}
	*a = annotation{value: s, set: true}
	return nil
}

// timestamp is a metav1.Time decoded as metav1.Time.UnmarshalJSON
// decodes it, a plain string (plainString) without its json.Unmarshal.
type timestamp metav1.Time

// UnmarshalJSON decodes b as metav1.Time does.
func (t *timestamp) UnmarshalJSON(b []byte) error {
	s, ok := plainString(b)
	if !ok {
		return (*metav1.Time)(t).UnmarshalJSON(b)
	}
	pt, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = pt.Local()
	return nil
}

// plainString is the value of the JSON string literal b when it holds
// no escape and no control character and is valid UTF-8: then its bytes
// between the quotes are the value, as a JSON decoder gives it; false
// for anything else (which the caller decodes with a JSON decoder).
func plainString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	in := b[1 : len(b)-1]
	for _, c := range in {
		if c < 0x20 || c == '"' || c == '\\' {
			return "", false
		}
	}
	if !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

// sandboxParams encodes list options for the BatchSandbox group
// version, which client-go's scheme does not know.
var sandboxParams = func() runtime.ParameterCodec {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, sandbox.GVK.GroupVersion())
	return runtime.NewParameterCodec(s)
}()

// maxObjectBytes is the largest object the apiserver stores: etcd's
// default request limit (--max-request-bytes, 1.5 MiB), which a list
// answer's items cannot exceed each.
const maxObjectBytes = 3 << 19

// SandboxPage lists one page of BatchSandboxes (sandbox.GVK) in namespace
// ("": every namespace) with opts into page: the same request as
// controller-runtime's client makes for a sandbox.CachedList (a
// consistent list of the apiserver, JSON: a custom resource is served in
// no other encoding), read into a pooled buffer (readPage's bound), and
// decoded for only what
// the scan decides on (SandboxPage.Items). An answer that sandbox.Cached
// decodes gives the same values (TestOrphanScanSandboxPagesAgreeWithTheTypedList
// in corectl/lifecycle, FuzzDecodeSandboxes). Errors: the list failed
// (the apiserver's error), the answer is larger than the bound, or it
// does not decode.
func (l *Lister) SandboxPage(ctx context.Context, namespace string, opts *metav1.ListOptions, page *SandboxPage) error {
	body, err := l.sandboxes.Get().Namespace(namespace).Resource("batchsandboxes").VersionedParams(opts, sandboxParams).
		SetHeader("Accept", runtime.ContentTypeJSON).Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	buf := metaBuffers.Get().(*bytes.Buffer)
	defer metaBuffers.Put(buf)
	if err := readPage(buf, body, "batchsandboxes", opts.Limit); err != nil {
		return err
	}
	return DecodeSandboxes(buf.Bytes(), page)
}

// readPage reads body, the answer to a list of resource with limit
// objects a page, into buf: at most limit (at least 1) times
// maxObjectBytes plus 1 MiB, the most a page of objects the apiserver
// stored can take. Errors: the read failed, or the answer is larger.
func readPage(buf *bytes.Buffer, body io.Reader, resource string, limit int64) error {
	buf.Reset()
	most := max(limit, 1)*maxObjectBytes + 1<<20
	n, err := buf.ReadFrom(io.LimitReader(body, most+1))
	if err != nil {
		return fmt.Errorf("read the %s list: %w", resource, err)
	}
	if n > most {
		return fmt.Errorf("the %s list answer is larger than %d bytes", resource, most)
	}
	return nil
}

// DecodeSandboxes decodes b, a BatchSandboxList's JSON, into page
// (SandboxPage.Items, Continue), reusing its memory. Errors: b does not
// decode where sandbox.Cached reads it (the error names the field).
func DecodeSandboxes(b []byte, page *SandboxPage) error {
	l := &page.list
	// Decoded elements are not zeroed first: a field the JSON lacks would
	// keep the last page's value.
	clear(l.Items[:cap(l.Items)])
	l.Items = l.Items[:0]
	l.Metadata.Continue = ""
	clear(page.Items[:cap(page.Items)])
	page.Items, page.Continue = page.Items[:0], ""
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, l); err != nil {
		return fmt.Errorf("the batchsandboxes list: %w", err)
	}
	if page.lifecycle == nil {
		page.lifecycle = map[string]map[string]string{}
	}
	for i := range l.Items {
		it := &l.Items[i]
		m := &it.Metadata
		c := sandbox.Cached{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			CreationTimestamp: metav1.Time(m.CreationTimestamp), DeletionTimestamp: (*metav1.Time)(m.DeletionTimestamp)}}
		if a := m.Annotations.Lifecycle; a.set {
			shared, ok := page.lifecycle[a.value]
			if !ok {
				// Bounded: a few lifecycle states, or one entry per page
				// for another writer's values (the map is the page's).
				if len(page.lifecycle) >= 64 {
					clear(page.lifecycle)
				}
				shared = map[string]string{v1alpha1.AnnotationLifecycle: a.value}
				page.lifecycle[a.value] = shared
			}
			c.Annotations = shared
		}
		c.Spec.Template.Metadata = it.Spec.Template.Metadata
		page.Items = append(page.Items, c)
	}
	page.Continue = l.Metadata.Continue
	return nil
}
