package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/sandbox"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrTemplateNotFound: no sandbox template is configured for the create's
// template ID.
var ErrTemplateNotFound = errors.New("lifecycle: template not found")

// Limits of a create's metadata and envVars (E2B states none; these keep
// the BatchSandbox well under the apiserver's object and annotation
// limits).
const (
	// MaxMetadataEntries bounds the metadata entries.
	MaxMetadataEntries = 64
	// MaxMetadataBytes bounds the encoded metadata (JSON), in bytes.
	MaxMetadataBytes = 16 << 10
	// MaxEnvVars bounds the envVars entries.
	MaxEnvVars = 256
	// MaxEnvVarsBytes bounds the names and values of envVars together,
	// in bytes.
	MaxEnvVarsBytes = 64 << 10
)

// HasTemplate reports whether a sandbox template is configured for id.
func (o *Orchestrator) HasTemplate(id string) bool {
	if o.Template == nil {
		return false
	}
	_, ok := o.Template(id)
	return ok
}

// ValidateMetadata checks E2B metadata: at most MaxMetadataEntries
// entries, keys non-empty and at most 256 bytes, the JSON encoding as
// stored on the BatchSandbox (v1alpha1.AnnotationMetadata, escapes
// included) at most MaxMetadataBytes.
func ValidateMetadata(m map[string]string) error {
	if len(m) > MaxMetadataEntries {
		return fmt.Errorf("metadata has more than %d entries", MaxMetadataEntries)
	}
	n := 2
	for k, v := range m {
		if k == "" || len(k) > 256 {
			return errors.New("metadata keys must be 1 to 256 bytes")
		}
		n += len(k) + len(v) + 6
	}
	if n > MaxMetadataBytes {
		return fmt.Errorf("metadata is larger than %d bytes", MaxMetadataBytes)
	}
	// n is the encoding's size when nothing needs escaping; encoding/json
	// writes some characters as six bytes ("<" as \u003c), so the bound
	// is checked on the encoding as stored (at most six times n, so this
	// costs at most that).
	if b, err := json.Marshal(m); err != nil || len(b) > MaxMetadataBytes {
		return fmt.Errorf("metadata is larger than %d bytes as stored (JSON, with its escapes)", MaxMetadataBytes)
	}
	return nil
}

// ValidateEnvVars checks E2B envVars: at most MaxEnvVars entries, names
// that Kubernetes accepts for a container's env (letters, digits, '_',
// '-', '.', not starting with a digit), names and values together at most
// MaxEnvVarsBytes.
func ValidateEnvVars(m map[string]string) error {
	if len(m) > MaxEnvVars {
		return fmt.Errorf("envVars has more than %d entries", MaxEnvVars)
	}
	n := 0
	for k, v := range m {
		if errs := validation.IsEnvVarName(k); len(errs) > 0 {
			return fmt.Errorf("envVars name %q: %s", truncate(k, 64), strings.Join(errs, "; "))
		}
		n += len(k) + len(v)
	}
	if n > MaxEnvVarsBytes {
		return fmt.Errorf("envVars are larger than %d bytes", MaxEnvVarsBytes)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// E2B's default environment variables of a sandbox (E2B's documentation,
// "Environment variables": set for its commands when it is created):
// EnvSandbox is "true", EnvSandboxID the sandbox's ID, EnvTemplateID the
// template it was created from. podSpec sets them in the sandbox
// container's env, where execd (and so every command) inherits them.
// E2B's fourth, E2B_TEAM_ID, has no counterpart: the resource credential
// that created the sandbox is not shown to what runs inside it.
const (
	EnvSandbox    = "E2B_SANDBOX"
	EnvSandboxID  = "E2B_SANDBOX_ID"
	EnvTemplateID = "E2B_TEMPLATE_ID"
)

// podSpec builds the BatchSandbox pod spec of a create: the template's pod
// with E2B's default variables (EnvSandbox, EnvSandboxID, EnvTemplateID)
// and then req.EnvVars set in the sandbox container's env (the create's
// sorted by name, each $ written as $$ so that the kubelet's $(NAME)
// expansion gives the process the value as given; a template entry of the
// same name is replaced, and an envVars entry replaces a default of its
// name) and, when the cluster has
// an execdTokenSecretFile, EXECD_ACCESS_TOKEN set to sandbox sandboxID's
// derived execd token on the execd container (cluster.SetExecdToken,
// replacing a template's or a create's entry). Errors wrap
// ErrTemplateNotFound, cluster.ErrNoExecdContainer or
// cluster.ErrExecdSecretNotLoaded.
func (o *Orchestrator) podSpec(req CreateRequest, sandboxID string) (map[string]any, error) {
	if o.Template == nil {
		return nil, fmt.Errorf("%w: %q", ErrTemplateNotFound, req.TemplateID)
	}
	tpl, ok := o.Template(req.TemplateID)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrTemplateNotFound, req.TemplateID)
	}
	spec := tpl.Pod.DeepCopy()
	i, err := cluster.SandboxContainer(spec, tpl.Container)
	if err != nil {
		return nil, err
	}
	c := &spec.Containers[i]
	defaults := []corev1.EnvVar{{Name: EnvSandbox, Value: "true"}, {Name: EnvSandboxID, Value: sandboxID}, {Name: EnvTemplateID, Value: tpl.ID}}
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
		return slices.ContainsFunc(defaults, func(d corev1.EnvVar) bool { return d.Name == e.Name })
	})
	c.Env = append(c.Env, defaults...)
	if len(req.EnvVars) > 0 {
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { _, ok := req.EnvVars[e.Name]; return ok })
		names := make([]string, 0, len(req.EnvVars))
		for k := range req.EnvVars {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			// The kubelet expands $(NAME) in a value and turns $$ into $;
			// E2B passes envVars through as given, so every $ is escaped.
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: strings.ReplaceAll(req.EnvVars[k], "$", "$$")})
		}
	}
	// The sandbox's own execd access token, never the cluster secret
	// (issue 29 finding 4); set after the envVars, so a create cannot
	// override it.
	tok, err := o.Cluster.ExecdToken(sandboxID)
	if err != nil {
		return nil, err
	}
	if tok != "" {
		if err := o.Cluster.SetExecdToken(spec, i, tok); err != nil {
			return nil, err
		}
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(spec)
	if err != nil {
		return nil, fmt.Errorf("encode the pod spec: %w", err)
	}
	return m, nil
}

// Metadata returns the metadata recorded on a BatchSandbox (never nil; an
// unreadable annotation reads as none).
func Metadata(u metav1.Object) map[string]string {
	m := map[string]string{}
	if v := u.GetAnnotations()[v1alpha1.AnnotationMetadata]; v != "" {
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return map[string]string{}
		}
	}
	return m
}

// SizesOf reads a BatchSandbox's resources from its own pod template (the
// object, not today's configuration): the sandbox container is the one
// its template names, or the first. Zero Sizes when they cannot be read.
func (o *Orchestrator) SizesOf(u client.Object) cluster.Sizes {
	spec, ok := sandbox.PodSpecOf(u)
	if !ok {
		return cluster.Sizes{}
	}
	name := ""
	if o.Template != nil {
		tid, _ := sandbox.Annotation(u, AnnotationTemplateID)
		if tpl, ok := o.Template(tid); ok {
			name = tpl.Container
		}
	}
	i, err := cluster.SandboxContainer(spec, name)
	if err != nil {
		i = 0
		if len(spec.Containers) == 0 {
			return cluster.Sizes{}
		}
	}
	s, _ := cluster.SizesOf(&spec.Containers[i])
	return s
}
