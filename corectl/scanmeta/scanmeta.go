// Package scanmeta lists the objects of corectl's orphan scan
// (docs/corectl.md "Orphan scan"), decoding only the fields the scan
// decides on: Ingresses and NetworkPolicies as metadata (Lister.Page),
// BatchSandboxes as the part of their JSON the scan reads
// (Lister.SandboxPage).
package scanmeta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Lister lists the orphan scan's Ingresses and NetworkPolicies as
// metadata (the apiserver's PartialObjectMetadataList in protobuf), read
// into a pooled buffer and decoded for only the fields the scan decides
// on (Project): name, namespace, creation time, labels, owner
// references and the probe echo's lifetime annotation. Managed fields,
// the other annotations (a policy's LKG copy of its spec among them) and
// the rest of the metadata are skipped as the answer is read. The request
// is the metadata client's (a consistent list of the apiserver, never a
// cache), only its decoding differs: TestOrphanScanMetadataAgreesWithTheTypedList (corectl/lifecycle),
// FuzzDecode. An encoding read differently by protowire and
// the generated Unmarshal (errUnusual) is decoded in full with the latter;
// an answer that is not protobuf is decoded as JSON, in full.
//
// Its REST clients for networking.k8s.io/v1 and for BatchSandboxes are
// made from the cluster's configuration (New): the same apiserver,
// credentials and client limits (a token bucket of their own each).
type Lister struct {
	rest      rest.Interface
	sandboxes rest.Interface
}

// New returns a Lister for the apiserver of cfg (a copy is taken;
// cluster.NetworkingProtobufClient asking for metadataAccept). Errors:
// those of rest.RESTClientFor.
func New(cfg *rest.Config) (*Lister, error) {
	rc, err := cluster.NetworkingProtobufClient(cfg, metadataAccept)
	if err != nil {
		return nil, fmt.Errorf("metadata list client: %w", err)
	}
	sc := rest.CopyConfig(cfg)
	sgv := sandbox.GVK.GroupVersion()
	sc.GroupVersion = &sgv
	sc.APIPath = "/apis"
	sc.ContentType = runtime.ContentTypeJSON
	sc.AcceptContentTypes = runtime.ContentTypeJSON
	sc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	src, err := rest.RESTClientFor(sc)
	if err != nil {
		return nil, fmt.Errorf("batchsandboxes list client: %w", err)
	}
	return &Lister{rest: rc, sandboxes: src}, nil
}

// metadataAccept asks for a PartialObjectMetadataList, protobuf first
// (client-go's metadata client asks the same).
const metadataAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"

// metaBuffers holds the buffers the answers are read into (a page of 100
// objects is tens of kilobytes, read 100 times a scan at 10,000
// sandboxes).
var metaBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Page lists one page of resource (ingresses or networkpolicies) in
// namespace ("": every namespace) with opts, and returns its items as
// Project gives them and the continue token. Errors: the list failed
// (the apiserver's error), its answer is larger than readPage's bound,
// or it does not decode.
func (l *Lister) Page(ctx context.Context, resource, namespace string, opts *metav1.ListOptions) ([]metav1.PartialObjectMetadata, string, error) {
	body, err := l.rest.Get().Namespace(namespace).Resource(resource).VersionedParams(opts, scheme.ParameterCodec).
		SetHeader("Accept", metadataAccept).Stream(ctx)
	if err != nil {
		return nil, "", err
	}
	defer body.Close()
	buf := metaBuffers.Get().(*bytes.Buffer)
	defer metaBuffers.Put(buf)
	if err := readPage(buf, body, resource, opts.Limit); err != nil {
		return nil, "", err
	}
	return Decode(buf.Bytes())
}

// protobufPrefix starts every protobuf answer of the apiserver (package
// k8s.io/apimachinery/pkg/runtime/serializer/protobuf), followed by a
// runtime.Unknown whose raw field is the object.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// errMetadata: the answer is not a PartialObjectMetadataList.
var errMetadata = errors.New("the list answer is not a PartialObjectMetadataList")

// errUnusual: protowire met an encoding the generated code may read
// differently (a group, a malformed tag, a scalar where a message is
// read); the caller decodes the message in full instead.
var errUnusual = errors.New("an unusual protobuf encoding")

// Decode decodes an answer to a metadata list (the bytes as
// the apiserver sent them): its items as Project gives them and its
// continue token.
func Decode(b []byte) ([]metav1.PartialObjectMetadata, string, error) {
	if !bytes.HasPrefix(b, protobufPrefix) {
		var list metav1.PartialObjectMetadataList
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, "", fmt.Errorf("%w: %s", errMetadata, err.Error())
		}
		return projectList(&list)
	}
	unknown := b[len(protobufPrefix):]
	var raw []byte
	err := fields(unknown, unknownWire, func(num protowire.Number, v []byte) error {
		switch num {
		case 2:
			raw = v
		case 3:
			if len(v) != 0 {
				return fmt.Errorf("%w: content encoding %q", errMetadata, v)
			}
		}
		return nil
	})
	if errors.Is(err, errUnusual) {
		var unk runtime.Unknown
		if err := unk.Unmarshal(unknown); err != nil {
			return nil, "", fmt.Errorf("%w: %s", errMetadata, err.Error())
		}
		if unk.ContentEncoding != "" {
			return nil, "", fmt.Errorf("%w: content encoding %q", errMetadata, unk.ContentEncoding)
		}
		raw, err = unk.Raw, nil
	}
	if err != nil {
		return nil, "", err
	}
	items, cont, err := decodeMetadataList(raw)
	if errors.Is(err, errUnusual) {
		var list metav1.PartialObjectMetadataList
		if err := list.Unmarshal(raw); err != nil {
			return nil, "", fmt.Errorf("%w: %s", errMetadata, err.Error())
		}
		return projectList(&list)
	}
	return items, cont, err
}

// projectList is Project of every item of list, and its continue
// token.
func projectList(list *metav1.PartialObjectMetadataList) ([]metav1.PartialObjectMetadata, string, error) {
	out := make([]metav1.PartialObjectMetadata, len(list.Items))
	for i := range list.Items {
		out[i] = Project(&list.Items[i].ObjectMeta)
	}
	return out, list.Continue, nil
}

// Project is the part of m the orphan scan decides on for an Ingress
// or a NetworkPolicy: name, namespace, creation time, labels, owner
// references, and of the annotations only the probe echo's lifetime
// (probesource.AnnotationEchoLifetime).
func Project(m *metav1.ObjectMeta) metav1.PartialObjectMetadata {
	out := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace,
		CreationTimestamp: m.CreationTimestamp, Labels: m.Labels, OwnerReferences: m.OwnerReferences}}
	if v, ok := m.Annotations[probesource.AnnotationEchoLifetime]; ok {
		out.Annotations = map[string]string{probesource.AnnotationEchoLifetime: v}
	}
	return out
}

// decodeMetadataList decodes raw, a protobuf PartialObjectMetadataList
// (field numbers from k8s.io/apimachinery's generated.proto:
// PartialObjectMetadataList metadata 1, items 2; ListMeta continue 3;
// PartialObjectMetadata metadata 1).
func decodeMetadataList(raw []byte) ([]metav1.PartialObjectMetadata, string, error) {
	var (
		items []metav1.PartialObjectMetadata
		cont  string
	)
	err := fields(raw, listWire, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return fields(v, listMetaWire, func(num protowire.Number, v []byte) error {
				if num == 3 {
					cont = string(v)
				}
				return nil
			})
		case 2:
			var m metav1.ObjectMeta
			err := fields(v, itemWire, func(num protowire.Number, v []byte) error {
				if num == 1 {
					return decodeObjectMeta(v, &m)
				}
				return nil
			})
			if err != nil {
				return err
			}
			items = append(items, metav1.PartialObjectMetadata{ObjectMeta: m})
		}
		return nil
	})
	return items, cont, err
}

// decodeObjectMeta decodes into m what Project keeps of the protobuf
// ObjectMeta b (generated.proto: name 1, namespace 3, creationTimestamp 8,
// labels 11, annotations 12, ownerReferences 13; map entries key 1,
// value 2). The generated code lets a repeated field's last value win and
// merges repeated messages; so does this.
func decodeObjectMeta(b []byte, m *metav1.ObjectMeta) error {
	return fields(b, metaWire, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 8:
			return unmarshalTime(v, &m.CreationTimestamp)
		case 11:
			k, val, err := mapEntry(v)
			if err != nil {
				return err
			}
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[k] = val
		case 12:
			k, val, err := mapEntry(v)
			if err != nil {
				return err
			}
			if k == probesource.AnnotationEchoLifetime {
				m.Annotations = map[string]string{k: val}
			}
		case 13:
			var r metav1.OwnerReference
			if err := r.Unmarshal(v); err != nil {
				return errUnusual
			}
			m.OwnerReferences = append(m.OwnerReferences, r)
		}
		return nil
	})
}

// unmarshalTime merges the protobuf Timestamp v into t, as the generated
// ObjectMeta.Unmarshal does. Errors: errUnusual.
func unmarshalTime(v []byte, t *metav1.Time) error {
	if err := t.Unmarshal(v); err != nil {
		return errUnusual
	}
	return nil
}

// mapEntry decodes a protobuf map<string,string> entry (key 1, value 2; a
// missing one is ""). Errors: errUnusual.
func mapEntry(b []byte) (k, v string, err error) {
	err = fields(b, entryWire, func(num protowire.Number, f []byte) error {
		switch num {
		case 1:
			k = string(f)
		case 2:
			v = string(f)
		}
		return nil
	})
	return k, v, err
}

// wireTypes gives, for each field number below 64 of a message, the
// wire type the generated code requires (bit n of bytes: field n is
// length-delimited; of varints: a varint); other fields are skipped in
// any wire type, as the generated code skips unknown fields.
type wireTypes struct{ bytes, varints uint64 }

// The messages read here (generated.proto of k8s.io/apimachinery and
// k8s.io/api): runtime.Unknown, PartialObjectMetadataList, ListMeta,
// PartialObjectMetadata, ObjectMeta, and a map entry.
var (
	unknownWire  = wireTypes{bytes: bits(1, 2, 3, 4)}
	listWire     = wireTypes{bytes: bits(1, 2)}
	listMetaWire = wireTypes{bytes: bits(1, 2, 3), varints: bits(4)}
	itemWire     = wireTypes{bytes: bits(1)}
	metaWire     = wireTypes{bytes: bits(1, 2, 3, 4, 5, 6, 8, 9, 11, 12, 13, 14, 17), varints: bits(7, 10)}
	entryWire    = wireTypes{bytes: bits(1, 2)}
)

func bits(nums ...protowire.Number) uint64 {
	var b uint64
	for _, n := range nums {
		b |= 1 << n
	}
	return b
}

// fields calls f with the number and contents of every length-delimited
// field of the protobuf message b, in order; other fields are skipped.
// Errors: errUnusual (a field of w in another wire type than w's, a
// group, a malformed field), or f's.
func fields(b []byte, w wireTypes, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return errUnusual
		}
		b = b[n:]
		if num < 64 && (w.bytes&(1<<num) != 0 && typ != protowire.BytesType || w.varints&(1<<num) != 0 && typ != protowire.VarintType) {
			return errUnusual
		}
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errUnusual
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errUnusual
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
