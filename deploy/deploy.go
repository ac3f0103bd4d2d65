// Package deploy holds what runs sandgate outside a laptop (docs/deploy.md):
// the container image build files of the three programs (images/, built by
// hack/images.sh and `make images`) and the Kubernetes manifests, as
// kustomize bases: portal/ (the gateway and corectl in the Portal cluster)
// and compute/ (corectl's CRDs and RBAC in every compute cluster), with an
// example overlay (overlays/example).
//
// The manifests under deploy/ are the one source of truth: kubectl and
// kustomize read them there, and this package embeds the same files for Go
// code (corectl's tests install the CRDs and the RBAC from here, the node
// stores' tests the gateway's CRDs). Its own
// tests render the bases and the overlays with kustomize's Go API and apply
// every object to a real kube-apiserver, adapt the gateway's Caddyfile from
// the rendered ConfigMap with bin/caddy, and build the images with the
// Docker engine of DOCKER_HOST, running each binary inside.
package deploy

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"path"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed compute/crds/*.yaml compute/rbac.yaml portal/crds/*.yaml
var files embed.FS

// CRDs returns corectl's CustomResourceDefinitions, the files of
// compute/crds/ (sandboxingressallowlists, sandboxtemplatenetworks and
// cniqualifications in network.sandgate.io). The error reports a manifest
// that does not decode strictly (a build defect).
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return crdsIn("compute/crds", "network.sandgate.io")
}

// NodeCRDs returns the gateway's CustomResourceDefinitions, the files of
// portal/crds/ (nodepools, nodeenrolmenttokens, enrollednodes and
// nodeplacements in nodes.sandgate.io, whose Go types are package
// nodecore/apis/v1alpha1): the node state that several gateway replicas share
// (package nodecore/kubestore, docs/scale-out.md "Node state"). The error
// reports a manifest that does not decode strictly (a build defect).
func NodeCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return crdsIn("portal/crds", "nodes.sandgate.io")
}

// crdsIn decodes the CRD manifests in dir, each of API group group.
func crdsIn(dir, group string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, dir+"/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, n := range names {
		data, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		crd, err := DecodeCRD(data)
		if err == nil && crd.Spec.Group != group {
			err = fmt.Errorf("group %q, want %s", crd.Spec.Group, group)
		}
		if err != nil {
			return nil, fmt.Errorf("deploy: %s: %w", path.Base(n), err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// DecodeCRD strictly decodes one CustomResourceDefinition manifest (YAML or
// JSON); unknown fields are an error.
func DecodeCRD(data []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, err
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("kind %q, want CustomResourceDefinition", crd.Kind)
	}
	return &crd, nil
}

// RBAC returns the objects of compute/rbac.yaml, corectl's least-privilege
// RBAC in a compute cluster (ServiceAccount, ClusterRole,
// ClusterRoleBinding, Role, RoleBinding) as unstructured objects, in file
// order. The error reports a manifest that does not decode (a build
// defect).
func RBAC() ([]*unstructured.Unstructured, error) {
	data, err := files.ReadFile("compute/rbac.yaml")
	if err != nil {
		return nil, err
	}
	return decodeAll(data)
}

// decodeAll splits a multi-document YAML stream into objects, skipping
// empty documents.
func decodeAll(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// bufioReader wraps data for the YAML document reader.
func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
