package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sandgate/sandgate/corectl/cluster"
	"google.golang.org/protobuf/encoding/protowire"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// PolicyLister answers the conflict step's question (Conflicts over every
// NetworkPolicy of a namespace) from the apiserver's protobuf list
// without decoding every policy in full: of each policy it decodes the
// name and the podSelector, and the rest of the spec only when that
// selector selects one of the sandbox's label sets (or cannot be
// evaluated); a one-label matchLabels selector that selects none of them
// (every other sandbox's policy) is judged on its encoding without being
// decoded. Metadata other than the name (labels, annotations with the LKG
// copy of a spec, managed fields, owner references) is skipped. The
// answer is Conflicts' on the fully decoded list, the same policies
// judged by the same rules: the list is the same request (every policy of
// the namespace, at the same resourceVersion options), only its decoding
// differs (TestPolicyListerAgreesWithTheTypedList,
// TestConflictsInProtobufAgreesWithConflicts, FuzzConflictsInProtobuf).
// An encoding read differently by protowire and generated Unmarshal
// (errUnusual) is decoded in full with the latter; an answer that is not
// protobuf is decoded as JSON, in full.
//
// The lister has its own REST client for networking.k8s.io/v1 from the
// configuration it was made with (NewPolicyLister): the same apiserver,
// credentials and client limits (QPS and Burst, a token bucket of its own
// beside the typed client's, which client-go keeps per REST client).
type PolicyLister struct {
	rest rest.Interface
}

// NewPolicyLister returns a PolicyLister for the apiserver of cfg (a copy
// is taken; cluster.NetworkingProtobufClient asking for protobuf, then
// JSON). Errors: those of rest.RESTClientFor.
func NewPolicyLister(cfg *rest.Config) (*PolicyLister, error) {
	rc, err := cluster.NetworkingProtobufClient(cfg, runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON)
	if err != nil {
		return nil, fmt.Errorf("NetworkPolicy list client: %w", err)
	}
	return &PolicyLister{rest: rc}, nil
}

// listBuffers holds the buffers list answers are read into: a list of a
// namespace of many sandboxes is hundreds of kilobytes, read once per
// PUT.
var listBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// protobufPrefix starts every protobuf answer of the apiserver (package
// k8s.io/apimachinery/pkg/runtime/serializer/protobuf), followed by a
// runtime.Unknown whose raw field is the object.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// policySet is a namespace's NetworkPolicies as listed for the conflict
// step: the lister's protobuf answer (in a buffer of listBuffers) or the
// typed client's decoded list.
type policySet struct {
	buf   *bytes.Buffer
	items []networkingv1.NetworkPolicy
}

// conflicts returns Conflicts(the set, own, labelSets, allowed, dns).
// Errors: the protobuf answer cannot be decoded.
func (p *policySet) conflicts(own string, labelSets []labels.Set, allowed []string, dns networkingv1.NetworkPolicyEgressRule) ([]string, error) {
	if p.buf == nil {
		return Conflicts(p.items, own, labelSets, allowed, dns), nil
	}
	return conflictsInProtobuf(p.buf.Bytes()[len(protobufPrefix):], newJudge(own, labelSets, allowed, dns))
}

// release returns the set's buffer to listBuffers; the set is not used
// afterwards.
func (p *policySet) release() {
	if p.buf != nil {
		listBuffers.Put(p.buf)
		p.buf = nil
	}
}

// list lists the NetworkPolicies of namespace, a consistent read. Errors:
// the list failed (the apiserver's error, as the typed client returns
// it), or an answer that is not protobuf does not decode as a
// NetworkPolicyList.
func (l *PolicyLister) list(ctx context.Context, namespace string) (*policySet, error) {
	body, err := l.rest.Get().Namespace(namespace).Resource("networkpolicies").Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	buf := listBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(body); err != nil {
		listBuffers.Put(buf)
		return nil, fmt.Errorf("read the NetworkPolicy list: %w", err)
	}
	if bytes.HasPrefix(buf.Bytes(), protobufPrefix) {
		return &policySet{buf: buf}, nil
	}
	// Not protobuf (an apiserver or proxy that answers JSON only): the
	// whole list, decoded as the typed client would.
	defer listBuffers.Put(buf)
	var list networkingv1.NetworkPolicyList
	if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(), buf.Bytes(), &list); err != nil {
		return nil, fmt.Errorf("decode the NetworkPolicy list: %w", err)
	}
	return &policySet{items: list.Items}, nil
}

// errProtobuf: the answer is not the protobuf encoding of a
// NetworkPolicyList.
var errProtobuf = errors.New("the NetworkPolicy list answer is not a protobuf NetworkPolicyList")

// conflictsInProtobuf judges the items of unknown, a protobuf
// runtime.Unknown whose raw field is a NetworkPolicyList (field numbers
// from k8s.io/apimachinery's and k8s.io/api's generated.proto: Unknown
// typeMeta 1, raw 2, contentEncoding 3, contentType 4; NetworkPolicyList
// metadata 1, items 2; NetworkPolicy metadata 1, spec 2; ObjectMeta name
// 1; NetworkPolicySpec podSelector 1).
func conflictsInProtobuf(unknown []byte, j *judge) ([]string, error) {
	var raw []byte
	err := fields(unknown, 4, func(num protowire.Number, v []byte) error {
		switch num {
		case 2:
			raw = v
		case 3:
			if len(v) != 0 {
				return fmt.Errorf("%w: content encoding %q", errProtobuf, v)
			}
		}
		return nil
	})
	if errors.Is(err, errUnusual) {
		var unk runtime.Unknown
		if err := unk.Unmarshal(unknown); err != nil {
			return nil, fmt.Errorf("%w: %s", errProtobuf, err.Error())
		}
		raw, err = unk.Raw, nil
		if unk.ContentEncoding != "" {
			err = fmt.Errorf("%w: content encoding %q", errProtobuf, unk.ContentEncoding)
		}
	}
	if err != nil {
		return nil, err
	}
	out, err := conflictsInItems(raw, j)
	if errors.Is(err, errUnusual) {
		// Decoded in full, as the typed client would.
		var list networkingv1.NetworkPolicyList
		if err := list.Unmarshal(raw); err != nil {
			return nil, fmt.Errorf("%w: %s", errProtobuf, err.Error())
		}
		out = nil
		for i := range list.Items {
			if j.conflicts(&list.Items[i]) {
				out = append(out, list.Items[i].Name)
			}
		}
		slices.Sort(out)
		return out, nil
	}
	return out, err
}

// conflictsInItems is conflictsInProtobuf on raw, the NetworkPolicyList.
func conflictsInItems(raw []byte, j *judge) ([]string, error) {
	var out []string
	err := fields(raw, 2, func(num protowire.Number, item []byte) error {
		if num != 2 {
			return nil
		}
		conflict, name, err := judgeItem(item, j)
		if err != nil {
			return err
		}
		if conflict {
			out = append(out, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// judgeItem judges one NetworkPolicy's encoding as Conflicts does and
// returns whether it conflicts and its name (only when it does). A policy
// whose metadata, name, spec or podSelector occurs more than once (which
// protobuf merges, and no apiserver writes) is decoded in full.
func judgeItem(item []byte, j *judge) (bool, string, error) {
	var meta, spec []byte
	var metas, specs int
	err := fields(item, 2, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			meta, metas = v, metas+1
		case 2:
			spec, specs = v, specs+1
		}
		return nil
	})
	if err != nil {
		return false, "", err
	}
	var name, sel []byte
	var names, sels int
	if err := fields(meta, 1, func(num protowire.Number, v []byte) error {
		if num == 1 {
			name, names = v, names+1
		}
		return nil
	}); err != nil {
		return false, "", err
	}
	if err := fields(spec, 1, func(num protowire.Number, v []byte) error {
		if num == 1 {
			sel, sels = v, sels+1
		}
		return nil
	}); err != nil {
		return false, "", err
	}
	if metas > 1 || specs > 1 || names > 1 || sels > 1 {
		var np networkingv1.NetworkPolicy
		if err := np.Unmarshal(item); err != nil {
			return false, "", fmt.Errorf("%w: %s", errProtobuf, err.Error())
		}
		return j.conflicts(&np), np.Name, nil
	}
	if string(name) == j.own {
		return false, "", nil
	}
	if j.selectsNoneFast(sel) {
		return false, "", nil
	}
	var ls metav1.LabelSelector
	if err := ls.Unmarshal(sel); err != nil {
		return false, "", fmt.Errorf("%w: %s", errProtobuf, err.Error())
	}
	selects, err := j.selects(&ls)
	if err != nil {
		return true, string(name), nil
	}
	if !selects {
		return false, "", nil
	}
	var full networkingv1.NetworkPolicySpec
	if err := full.Unmarshal(spec); err != nil {
		return false, "", fmt.Errorf("%w: %s", errProtobuf, err.Error())
	}
	return j.widens(&full), string(name), nil
}

// selectsNoneFast reports, without decoding sel (a LabelSelector's
// encoding) into maps and strings, that it is one selectsAny answers
// "selects none, no error" for: matchLabels of one entry and no
// matchExpressions (every sandbox's platform policy), its key one
// selectsAny has already found valid in this judge, its value a valid
// label value, and no label set with that value under that key. false
// means "decode and ask selectsAny", never "selects".
func (j *judge) selectsNoneFast(sel []byte) bool {
	var entry []byte
	entries := 0
	if fields(sel, 2, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			entry, entries = v, entries+1
		case 2:
			entries = -1 << 30 // matchExpressions
		}
		return nil
	}) != nil || entries != 1 {
		return false
	}
	var key, value []byte
	keys, values := 0, 0
	if fields(entry, 2, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			key, keys = v, keys+1
		case 2:
			value, values = v, values+1
		}
		return nil
	}) != nil || keys != 1 || values != 1 {
		return false
	}
	if !j.keys[string(key)] || !validLabelValue(value) {
		return false
	}
	for _, set := range j.sets {
		if got, ok := set[string(key)]; ok && got == string(value) {
			return false
		}
	}
	return true
}

// validLabelValue is validation.IsValidLabelValue's rule (at most 63
// characters; empty, or alphanumerics at both ends and [-_.A-Za-z0-9]
// between) on bytes, without allocating.
func validLabelValue(v []byte) bool {
	if len(v) > 63 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i, c := range v {
		if !alnum(c) && (i == 0 || i == len(v)-1 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}

// errUnusual: fields met an encoding protowire refuses or reads
// differently from generated Unmarshal (a group, whose end generated
// code does not match with its start; a field number beyond protobuf's
// range, which generated code truncates; a field read here with another
// wire type; a malformed tag or length). No apiserver writes one; the
// caller decodes such an answer with generated Unmarshal instead, so the
// answer stays that of the fully decoded list.
var errUnusual = errors.New("an unusual protobuf encoding")

// fields calls f with the number and contents of every length-delimited
// field of the protobuf message b, in order; varint and fixed-size fields
// are skipped, except that fields numbered 1 to bytesUpTo must be
// length-delimited (the fields read here). Errors: errUnusual (see
// there), or f's.
func fields(b []byte, bytesUpTo protowire.Number, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return errUnusual
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if num <= bytesUpTo {
				return errUnusual
			}
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
