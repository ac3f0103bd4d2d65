// Package template stores sandbox templates' default network policies
// (spec §3.2): the default ingress allowlist and default egress allowlist
// a sandbox created from the template starts with. Each template is a
// SandboxTemplateNetwork object named after the template ID in corectl's
// template namespace; its metadata.generation is the version. Template
// changes never touch existing sandboxes: a sandbox copies the defaults
// once, at creation (package createnet).
package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cidr"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/internal/strictjson"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Errors.
var (
	// ErrInvalidID: the template ID is not a DNS-1123 subdomain (lowercase
	// a-z, 0-9, '-' and '.', at most 253 bytes), so it cannot name an
	// object.
	ErrInvalidID = errors.New("template: invalid template ID")
	// ErrBadRequest: the PUT body is not a template network object.
	ErrBadRequest = errors.New("template: bad request")
	// ErrNotFound: the template has no default network policy.
	ErrNotFound = errors.New("template: no network defaults for this template")
	// ErrUnavailable: the apiserver could not answer.
	ErrUnavailable = errors.New("template: apiserver unavailable")
)

// Network is a template's default network policy: both lists normalised
// (sorted, deduplicated) and never nil. An empty Ingress means an
// unrestricted entry for sandboxes that inherit it (spec §5.2.1); an empty
// Egress means DNS only.
type Network struct {
	// Ingress is the default ingress allowlist.
	Ingress []v1alpha1.IngressRule `json:"ingress"`
	// Egress is the default egress allowlist.
	Egress []v1alpha1.EgressRule `json:"egress"`
}

// View is the GET answer: the template ID, its defaults and its version.
type View struct {
	// TemplateID is the template.
	TemplateID string `json:"templateID"`
	Network    `json:",inline"`
	// Version is the object's metadata.generation; it grows with every
	// change.
	Version int64 `json:"version"`
}

// ValidateID checks a template ID; the error wraps ErrInvalidID.
func ValidateID(id string) error {
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidID, strings.Join(errs, "; "))
	}
	return nil
}

// MaxRequestSize bounds a PUT body, in bytes (256 KiB).
const MaxRequestSize = 256 << 10

// DecodeRequest decodes a PUT /sandbox-templates/{id}/network body,
// {"ingress": [{"cidr", "description"?}], "egress": [{"cidr"}]}, strictly:
// unknown or duplicate fields, nulls, wrong types and trailing data are
// errors; an absent list is empty (full replacement). CIDRs are
// normalised. Errors wrap ErrBadRequest (and cidr.ErrInvalid /
// cidr.ErrTooMany naming ingress[i] or egress[i]).
func DecodeRequest(body []byte) (Network, error) {
	if len(body) > MaxRequestSize {
		return Network{}, fmt.Errorf("%w: body larger than %d bytes", ErrBadRequest, MaxRequestSize)
	}
	if err := strictjson.Check(body); err != nil {
		return Network{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return Network{}, fmt.Errorf("%w: body must be a JSON object", ErrBadRequest)
	}
	n := Network{Ingress: []v1alpha1.IngressRule{}, Egress: []v1alpha1.EgressRule{}}
	for k, v := range raw {
		switch k {
		case "ingress":
			rules, err := ingressallow.DecodeRules(v, "ingress")
			if err != nil {
				return Network{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
			}
			n.Ingress = rules
		case "egress":
			set, err := decodeEgress(v)
			if err != nil {
				return Network{}, err
			}
			for _, c := range set {
				n.Egress = append(n.Egress, v1alpha1.EgressRule{CIDR: c})
			}
		default:
			return Network{}, fmt.Errorf("%w: unknown field %q (only ingress and egress)", ErrBadRequest, k)
		}
	}
	return n, nil
}

func decodeEgress(v json.RawMessage) ([]string, error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil || items == nil {
		return nil, fmt.Errorf("%w: egress must be an array of objects", ErrBadRequest)
	}
	list := make([]string, len(items))
	for i, it := range items {
		if it == nil {
			return nil, fmt.Errorf("%w: egress[%d] must be an object", ErrBadRequest, i)
		}
		for k := range it {
			if k != "cidr" {
				return nil, fmt.Errorf("%w: egress[%d]: unknown field %q", ErrBadRequest, i, k)
			}
		}
		c, ok := it["cidr"]
		if !ok || string(c) == "null" || json.Unmarshal(c, &list[i]) != nil {
			return nil, fmt.Errorf("%w: egress[%d].cidr must be a string", ErrBadRequest, i)
		}
	}
	set, err := cidr.Normalize(list)
	if err != nil {
		var ee *cidr.EntryError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%w: egress[%d].cidr: %w", ErrBadRequest, ee.Index, err)
		}
		return nil, fmt.Errorf("%w: egress: %w", ErrBadRequest, err)
	}
	return set, nil
}

// EgressCIDRs returns the CIDRs of n.Egress.
func (n Network) EgressCIDRs() []string {
	out := make([]string, len(n.Egress))
	for i, r := range n.Egress {
		out[i] = r.CIDR
	}
	return out
}

// Store reads and writes template defaults.
type Store struct {
	// Client reaches the template cluster's apiserver.
	Client client.Client
	// Namespace holds the SandboxTemplateNetwork objects.
	Namespace string
}

// Get returns the defaults of template id. Errors: ErrInvalidID,
// ErrNotFound, ErrUnavailable.
func (s *Store) Get(ctx context.Context, id string) (*View, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	obj := &v1alpha1.SandboxTemplateNetwork{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: id}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
	}
	return view(obj), nil
}

func view(obj *v1alpha1.SandboxTemplateNetwork) *View {
	v := &View{TemplateID: obj.Name, Version: obj.Generation, Network: Network{Ingress: obj.Spec.Ingress, Egress: obj.Spec.Egress}}
	if v.Ingress == nil {
		v.Ingress = []v1alpha1.IngressRule{}
	}
	if v.Egress == nil {
		v.Egress = []v1alpha1.EgressRule{}
	}
	return v
}

// Put replaces the defaults of template id with n (from DecodeRequest),
// creating the object when missing, and returns what was stored (read
// back). Concurrent writers are retried a few times; the last write wins.
// Errors: ErrInvalidID, ErrUnavailable.
func (s *Store) Put(ctx context.Context, id string, n Network) (*View, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		obj := &v1alpha1.SandboxTemplateNetwork{}
		err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: id}, obj)
		switch {
		case apierrors.IsNotFound(err):
			obj = &v1alpha1.SandboxTemplateNetwork{
				ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: s.Namespace,
					Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}},
				Spec: v1alpha1.SandboxTemplateNetworkSpec{TemplateID: id, Ingress: n.Ingress, Egress: n.Egress},
			}
			err = s.Client.Create(ctx, obj)
		case err != nil:
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
		default:
			obj.Spec.Ingress, obj.Spec.Egress = n.Ingress, n.Egress
			err = s.Client.Update(ctx, obj)
		}
		if err == nil {
			got := &v1alpha1.SandboxTemplateNetwork{}
			if err := s.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
				return nil, fmt.Errorf("%w: read back: %s", ErrUnavailable, err.Error())
			}
			return view(got), nil
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 4 {
			continue
		}
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, err.Error())
	}
}
