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
	"errors"
	"fmt"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
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

// Put replaces the defaults of template id with n (from wire.DecodeTemplateNetwork),
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
